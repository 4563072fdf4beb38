"""Rule broken: GetInfo returns the handshake's EnvironmentInfo (docs/protocol.md §1.1).
GetInfo answers with another description and version."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.get_info"
COLLATERAL = frozenset({"parity.grpc_vs_http"})


class Wire(Proxy):
    def info_of(self, info):
        out = type(info)()
        out.CopyFrom(info)
        out.info.description = "something else"
        out.info.version = "9.9.9"
        return out


__all__ = ["Env", "Wire"]
