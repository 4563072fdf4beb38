from cache.lru import LRUCache

__all__ = ["LRUCache"]
