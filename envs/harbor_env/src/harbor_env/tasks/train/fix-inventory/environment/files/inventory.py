class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, item, n):
        self.stock[item] = self.stock.get(item, 0) + n

    def remove(self, item, n):
        self.stock[item] = self.stock.get(item, 0) - n
