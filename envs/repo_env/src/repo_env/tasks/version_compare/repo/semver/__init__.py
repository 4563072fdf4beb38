from semver.compare import compare, newest

__all__ = ["compare", "newest"]
