"""Small statistics helpers."""


def mean(xs):
    if not xs:
        raise ValueError("mean of an empty sequence")
    return sum(xs) / len(xs)


def median(xs):
    if not xs:
        raise ValueError("median of an empty sequence")
    xs.sort()
    return xs[len(xs) // 2]
