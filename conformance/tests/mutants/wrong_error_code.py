"""Rule broken: an unknown tool is NOT_FOUND (error table).
The wire answers INVALID_ARGUMENT instead."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "tools.unknown_tool"
COLLATERAL: frozenset[str] = frozenset()


class Wire(Proxy):
    def answer(self, stream, req, resp):
        if resp.WhichOneof("kind") == "error" and resp.error.code == 5:
            resp.error.code = 3
        return [resp]


__all__ = ["Env", "Wire"]
