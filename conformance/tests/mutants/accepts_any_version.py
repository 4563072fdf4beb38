"""Rule broken: a protocol major other than 1 is FAILED_PRECONDITION (docs/protocol.md §3.3).
The wire rewrites every client's version to "1.0" before the server sees it. Certified at the
``protocol`` level only: the defect is in the handshake, which that level covers."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.version_negotiation"
COLLATERAL = frozenset({"protocol.version_unparsable"})
LEVELS = ("protocol",)


class Wire(Proxy):
    def request(self, stream, req):
        if req.WhichOneof("kind") == "handshake":
            req.handshake.protocol_version = "1.0"
        return req


__all__ = ["Env", "Wire"]
