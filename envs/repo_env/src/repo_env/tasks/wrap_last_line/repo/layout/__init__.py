from layout.wrap import wrap

__all__ = ["wrap"]
