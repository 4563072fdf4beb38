"""Not a mutant (tests/test_declarations.py uses it): a server as an older binding's might be.
It speaks protocol 1.1 (handshake and GetInfo) while advertising the features of 1.2 and 1.3
the runtime offers, and its GetLoad fails although it advertises load_reporting. A declaration
at 1.1 listing those features is then a warning (features ahead of the version) at best, and
protocol.declaration's probe of server_load fails."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

OLD = "1.1"


class Wire(Proxy):
    def info_of(self, info):
        out = type(info)()
        out.CopyFrom(info)
        out.info.protocol_version = OLD
        return out

    def answer(self, stream, req, resp):
        if resp.WhichOneof("kind") == "handshake":
            resp.handshake.protocol_version = OLD
            resp.handshake.info.protocol_version = OLD
        return [resp]

    def load_of(self, load):
        raise RuntimeError("this server advertises load_reporting but cannot report its load")


__all__ = ["Env", "Wire"]
