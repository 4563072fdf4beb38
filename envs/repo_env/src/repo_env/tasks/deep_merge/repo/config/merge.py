"""Merging configuration dictionaries."""


def merge(base, override):
    """A new dict: base's keys, with override's values on top."""
    out = dict(base)
    for key, value in override.items():
        out[key] = value
    return out
