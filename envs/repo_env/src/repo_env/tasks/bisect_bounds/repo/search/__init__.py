from search.binary import find

__all__ = ["find"]
