"""Comparing dotted version numbers."""

import functools


def compare(a, b):
    if a == b:
        return 0
    return -1 if a < b else 1


def newest(versions):
    return max(versions, key=functools.cmp_to_key(compare))
