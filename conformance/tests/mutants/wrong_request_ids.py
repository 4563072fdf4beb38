"""Rule broken: every answer carries its request's id (docs/protocol.md §4).
The wire truncates ids to 32 bits (a uint32 on the server's side)."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.request_ids"
COLLATERAL: frozenset[str] = frozenset()


class Wire(Proxy):
    def answer(self, stream, req, resp):
        resp.request_id &= 0xFFFFFFFF
        return [resp]


__all__ = ["Env", "Wire"]
