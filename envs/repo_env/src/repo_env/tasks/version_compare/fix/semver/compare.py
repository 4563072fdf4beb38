"""Comparing dotted version numbers."""

import functools
import itertools


def compare(a, b):
    pa = [int(p) for p in a.split(".")]
    pb = [int(p) for p in b.split(".")]
    for x, y in itertools.zip_longest(pa, pb, fillvalue=0):
        if x != y:
            return -1 if x < y else 1
    return 0


def newest(versions):
    return max(versions, key=functools.cmp_to_key(compare))
