"""Matrix operations on lists of rows."""


def transpose(m):
    n = len(m)
    return [[m[i][j] for i in range(n)] for j in range(n)]
