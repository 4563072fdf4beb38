"""Rule broken: pipelined requests are answered in request order (docs/protocol.md §4).
In a run of consecutive ``state`` requests, the answer to the fifth is held back until the
client's next request has arrived, and sent after that request's answer (once per session).

Deterministic: the held answer waits (bounded, 5 s) for the next request rather than
sampling whether one happens to be queued already, so a client that pipelines such a run
always sees the swap; a client that waits for each answer sees it late, never reordered."""

import asyncio

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "protocol.pipelining"
COLLATERAL = frozenset({"protocol.half_close"})
WAIT_S = 5.0
RUN = 5


class Wire(Proxy):
    async def before_answer(self, stream, req, resp):
        kind = req.WhichOneof("kind") if req is not None else None
        run = stream.state["run"] = stream.state.get("run", 0) + 1 if kind == "state" else 0
        if run != RUN or stream.state.get("waited"):
            return
        stream.state["waited"] = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not stream.pending.qsize() and loop.time() < deadline:
            await asyncio.sleep(0.005)
        stream.state["swap"] = stream.pending.qsize() > 0

    def answer(self, stream, req, resp):
        held = stream.state.pop("held", None)
        if held is not None:
            return [resp, held] if resp.WhichOneof("kind") != "close" else [held, resp]
        if stream.state.pop("swap", False):
            stream.state["held"] = resp
            return []
        return [resp]

    def flush(self, stream):
        held = stream.state.pop("held", None)
        return [held] if held is not None else []


__all__ = ["Env", "Wire"]
