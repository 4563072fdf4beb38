"""Matrix operations on lists of rows."""


def transpose(m):
    if not m:
        return []
    return [[row[j] for row in m] for j in range(len(m[0]))]
