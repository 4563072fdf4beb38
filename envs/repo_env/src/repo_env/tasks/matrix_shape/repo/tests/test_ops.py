import unittest

from grid import render_columns, transpose


class OpsTest(unittest.TestCase):
    def test_square(self):
        self.assertEqual(transpose([[1, 2], [3, 4]]), [[1, 3], [2, 4]])

    def test_wide(self):
        self.assertEqual(transpose([[1, 2, 3]]), [[1], [2], [3]])

    def test_columns(self):
        self.assertEqual(render_columns([[1, 2, 3], [4, 5, 6]]), "1 4\n2 5\n3 6")
