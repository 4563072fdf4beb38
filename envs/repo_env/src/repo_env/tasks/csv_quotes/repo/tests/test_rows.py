import unittest

from tabular import split_row


class RowsTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(split_row("a,b,c"), ["a", "b", "c"])

    def test_quoted_comma(self):
        self.assertEqual(split_row('"Smith, J",42'), ["Smith, J", "42"])
