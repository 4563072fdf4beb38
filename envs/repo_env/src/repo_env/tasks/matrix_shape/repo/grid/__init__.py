from grid.ops import transpose
from grid.render import render, render_columns

__all__ = ["render", "render_columns", "transpose"]
