import unittest

from search import find


class FindTest(unittest.TestCase):
    def test_middle(self):
        self.assertEqual(find([1, 3, 5, 7, 9], 5), 2)

    def test_last(self):
        self.assertEqual(find([1, 3, 5], 5), 2)
