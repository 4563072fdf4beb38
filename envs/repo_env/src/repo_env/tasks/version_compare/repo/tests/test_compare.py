import unittest

from semver import compare


class CompareTest(unittest.TestCase):
    def test_numeric(self):
        self.assertEqual(compare("1.10.0", "1.9.0"), 1)
