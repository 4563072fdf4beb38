from config.merge import merge

__all__ = ["merge"]
