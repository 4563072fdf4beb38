"""Rule broken: the server frees a session's slot whatever way it ends (docs/protocol.md §3.7).
Every client that disconnects (its stream cancelled, its connection closed) leaves its slot
taken for good: the session is never released."""

import asyncio

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "concurrency.disconnect_frees_slot"
COLLATERAL = frozenset({"concurrency.capacity", "parity.grpc_vs_http", "robustness.abrupt_disconnect",
                        "robustness.oversized_message", "robustness.random_bytes", "robustness.still_serving",
                        "vector.autoreset_modes", "vector.batch_matches_sequential", "vector.capacity",
                        "vector.request_rules", "vector.validation_is_atomic"})


class Wire(Proxy):
    def __init__(self, inner):
        super().__init__(inner)
        release = self.manager.release

        async def leaky_release(session):
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # the stream is being torn down: the client vanished
                return  # the session keeps its slot
            await release(session)

        self.manager.release = leaky_release


__all__ = ["Env", "Wire"]
