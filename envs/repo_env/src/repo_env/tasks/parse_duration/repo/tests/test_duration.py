import unittest

from timefmt import format_duration, parse_duration


class DurationTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_duration("1h30m"), 5400)

    def test_format(self):
        self.assertEqual(format_duration(3661), "1h1m1s")
