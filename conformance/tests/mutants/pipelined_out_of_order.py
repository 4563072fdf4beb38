"""Rule broken: the requests of a pipelined message are answered in their order, each under
its own id (RFC 0009). The wire swaps the last two answers inside every pipelined answer."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.pipelined_messages"
COLLATERAL: frozenset[str] = frozenset()


class Wire(Proxy):
    def answer(self, stream, req, resp):
        answers = resp.pipelined.responses if resp.WhichOneof("kind") == "pipelined" else []
        if len(answers) >= 2:
            last, before = answers[-1].SerializeToString(), answers[-2].SerializeToString()
            answers[-2].ParseFromString(last)
            answers[-1].ParseFromString(before)
        return [resp]


__all__ = ["Env", "Wire"]
