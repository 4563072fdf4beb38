import unittest

from inventory import Inventory


class T(unittest.TestCase):
    def test_add(self):
        inv = Inventory()
        inv.add("apple", 3)
        self.assertEqual(inv.stock["apple"], 3)

    def test_remove_too_many(self):
        inv = Inventory()
        inv.add("apple", 1)
        with self.assertRaises(ValueError):
            inv.remove("apple", 2)
        self.assertEqual(inv.stock["apple"], 1)


if __name__ == "__main__":
    unittest.main()
