__version__ = "0.3.1"

_count = 0


def reset() -> None:
    global _count
    _count = 0
