"""Text rendering of matrices."""

from grid.ops import transpose


def render(m):
    return "\n".join(" ".join(str(x) for x in row) for row in m)


def render_columns(m):
    """Each column of m as a line."""
    return render(transpose(m))
