"""Roman numerals."""

_VALUES = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]
_LETTERS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError("out of range")
    out = []
    for value, letters in _VALUES:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def from_roman(s):
    total = 0
    for i, ch in enumerate(s):
        v = _LETTERS[ch]
        if i + 1 < len(s) and _LETTERS[s[i + 1]] > v:
            total -= v
        else:
            total += v
    return total
