"""Rule broken: a handshake beyond max_sessions is RESOURCE_EXHAUSTED (docs/protocol.md §3.3).
The environment advertises 2 sessions but the server admits 64."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "concurrency.capacity"
# protocol.load: GetLoad reports the real capacity (64), not the advertised 2 (RFC 0005).
COLLATERAL = frozenset({"concurrency.disconnect_frees_slot", "parity.grpc_vs_http", "protocol.load", "vector.capacity"})
SERVER_KWARGS = {"max_sessions": 64}


class Wire(Proxy):
    def info_of(self, info):
        info.info.capabilities.max_sessions = 2
        return info

    def answer(self, stream, req, resp):
        if resp.WhichOneof("kind") == "handshake":
            resp.handshake.info.capabilities.max_sessions = 2
        return [resp]


__all__ = ["Env", "Wire"]
