import unittest

from units import celsius_to_fahrenheit


class TemperatureTest(unittest.TestCase):
    def test_boiling(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(100), 212)
