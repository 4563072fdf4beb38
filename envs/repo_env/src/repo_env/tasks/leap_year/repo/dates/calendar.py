"""Calendar arithmetic."""

_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap_year(year):
    return year % 4 == 0


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError(f"no month {month}")
    if month == 2 and is_leap_year(year):
        return 29
    return _DAYS[month - 1]
