"""Small statistics helpers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of an empty sequence")
    return sum(xs) / len(xs)


def median(xs):
    if not xs:
        raise ValueError("median of an empty sequence")
    s = sorted(xs)
    mid = len(s) // 2
    if len(s) % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2
