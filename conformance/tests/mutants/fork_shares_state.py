"""Rule broken: forks are independent of each other (RFC 0006 §3). The snapshot hook keeps the
state in the process and restore adopts that very object, so every fork of one snapshot shares
it: stepping one fork moves the others."""

import copy
import uuid

from mutants.base import Counter

CAUGHT_BY = "sessions.forks_independent"
COLLATERAL: frozenset[str] = frozenset()

_KEPT: dict[str, dict] = {}


class Env(Counter):
    def snapshot(self):
        key = uuid.uuid4().hex
        _KEPT[key] = copy.deepcopy(vars(self))
        return key.encode()

    def restore(self, data):
        self.__dict__ = _KEPT[data.decode()]  # adopted, not copied
