"""Merging configuration dictionaries."""


def merge(base, override):
    """A new dict: base's keys, with override's values on top (nested dicts merged)."""
    out = {k: (merge(v, {}) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif isinstance(value, dict):
            out[key] = merge(value, {})
        else:
            out[key] = value
    return out
