"""Durations like 1h30m."""

import re

_PART = re.compile(r"(\d+)([hms])")
_UNITS = {"h": 3600, "m": 3600, "s": 1}


def parse_duration(text):
    text = text.strip()
    if not text or _PART.sub("", text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in _PART.findall(text))


def format_duration(seconds):
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"
