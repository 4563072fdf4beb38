from tabular.rows import split_row, to_records

__all__ = ["split_row", "to_records"]
