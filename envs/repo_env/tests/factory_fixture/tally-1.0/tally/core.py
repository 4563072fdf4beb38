def clamp(value, low=0, high=10):
    """value limited to [low, high]."""
    if low > high:
        raise ValueError("low is above high")
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """The arithmetic mean; ValueError for no values."""
    values = list(values)
    if len(values) == 0:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def running_total(values, start=0):
    """The running totals of values, from start."""
    out = []
    total = start
    for v in values:
        total = total + v
        out.append(total)
    return out


def window(items, size=2):
    """The consecutive windows of size items."""
    items = list(items)
    if size < 1:
        raise ValueError("size must be positive")
    return [tuple(items[i : i + size]) for i in range(0, len(items) - size + 1)]
