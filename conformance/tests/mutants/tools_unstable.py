"""Rule broken: the tool list is stable for the life of a session (docs/protocol.md §6).
Every other list_tools answer lists the tools in reverse order."""

import itertools

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "tools.list_stable"
COLLATERAL = frozenset({"parity.grpc_vs_http"})
_calls = itertools.count()


class Wire(Proxy):
    def answer(self, stream, req, resp):
        if resp.WhichOneof("kind") == "list_tools" and next(_calls) % 2:
            tools = list(resp.list_tools.tools)
            del resp.list_tools.tools[:]
            resp.list_tools.tools.extend(reversed(tools))
        return [resp]


__all__ = ["Env", "Wire"]
