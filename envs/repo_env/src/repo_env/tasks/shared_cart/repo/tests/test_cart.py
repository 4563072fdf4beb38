import unittest

from shop import Cart


class CartTest(unittest.TestCase):
    def test_total(self):
        c = Cart()
        c.add("pen", 1.5, 2)
        self.assertEqual(c.total(), 3.0)

    def test_carts_are_separate(self):
        a, b = Cart(), Cart()
        a.add("pen", 1.0)
        self.assertEqual(b.items, [])
