"""A shopping cart."""


class Cart:
    def __init__(self, items=None):
        self.items = list(items) if items is not None else []

    def add(self, name, price, qty=1):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self.items.append((name, price, qty))

    def total(self):
        return round(sum(price * qty for _, price, qty in self.items), 2)
