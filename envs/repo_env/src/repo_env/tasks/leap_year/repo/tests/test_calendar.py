import unittest

from dates.calendar import days_in_month, is_leap_year


class CalendarTest(unittest.TestCase):
    def test_leap(self):
        self.assertTrue(is_leap_year(2024))
        self.assertFalse(is_leap_year(1900))

    def test_february(self):
        self.assertEqual(days_in_month(2100, 2), 28)
