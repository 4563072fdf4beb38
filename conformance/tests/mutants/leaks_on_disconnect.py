"""Rule broken: the server frees a session's slot whatever way it ends (docs/protocol.md §3.7).
A gRPC session that the client ends without a close request (its stream cancelled, its
connection closed, a half-close alone) keeps its slot for good: it is never released.

Deterministic by construction: whether a session leaks depends only on the requests its
client sent, never on how the transport reports the end (a cancelled stream is seen either
as a cancelled handler task or as end-of-input, depending on scheduling)."""

import contextvars

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "concurrency.disconnect_frees_slot"
# Its slots are never freed: a shorter bound than the default 10 s keeps each probe quick.
RUN_OPTIONS = {"slot_free_bound": 4.0}
COLLATERAL = frozenset(
    {
        "concurrency.capacity",
        "concurrency.isolation",
        "parity.grpc_vs_http",
        "robustness.abrupt_disconnect",
        "robustness.oversized_message",
        "robustness.random_bytes",
        "robustness.still_serving",
        "vector.autoreset_modes",
        "vector.batch_matches_sequential",
        "vector.capacity",
        "vector.request_rules",
        "vector.validation_is_atomic",
    }
)

_stream = contextvars.ContextVar("stream", default=None)


class Wire(Proxy):
    def __init__(self, inner):
        super().__init__(inner)
        release = self.manager.release

        async def leaky_release(session):
            stream = _stream.get()  # set for releases made by a gRPC Session handler
            if stream is not None and not stream.state.get("closed"):
                return  # the session keeps its slot
            await release(session)

        self.manager.release = leaky_release

    def request(self, stream, req):
        # Called in the stream's handler task, where the session is released: tag the task.
        _stream.set(stream)
        if req.WhichOneof("kind") == "close":
            stream.state["closed"] = True
        return req

    def answer(self, stream, req, resp):
        if resp.WhichOneof("kind") == "error" and resp.error.fatal:
            stream.state["closed"] = True  # the server itself ended the session
        return [resp]


__all__ = ["Env", "Wire"]
