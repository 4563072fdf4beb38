import unittest

from config import merge


class MergeTest(unittest.TestCase):
    def test_flat(self):
        self.assertEqual(merge({"a": 1}, {"b": 2}), {"a": 1, "b": 2})

    def test_nested(self):
        got = merge({"db": {"host": "x", "port": 1}}, {"db": {"port": 2}})
        self.assertEqual(got, {"db": {"host": "x", "port": 2}})
