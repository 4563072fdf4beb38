"""Rule broken: pipelined requests are answered in request order (docs/protocol.md §4).
When more requests are already waiting, the wire swaps two consecutive answers."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.pipelining"
COLLATERAL = frozenset({"protocol.half_close"})


class Wire(Proxy):
    settle = 0.003

    def answer(self, stream, req, resp):
        held = stream.state.pop("held", None)
        if held is not None:
            return [resp, held] if resp.WhichOneof("kind") != "close" else [held, resp]
        if stream.pending.qsize() > 0 and resp.WhichOneof("kind") != "close":
            stream.state["held"] = resp
            return []
        return [resp]

    def flush(self, stream):
        held = stream.state.pop("held", None)
        return [held] if held is not None else []


__all__ = ["Env", "Wire"]
