"""Rule broken: the server frees a session's slot whatever way it ends (docs/protocol.md §3.7).
Every client that disconnects leaves a slot taken for good."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "concurrency.disconnect_frees_slot"
COLLATERAL = frozenset({"robustness.abrupt_disconnect", "robustness.still_serving", "robustness.random_bytes",
                        "robustness.oversized_message", "concurrency.capacity"})


class Wire(Proxy):
    async def disconnected(self, stream):
        await self.manager.open()  # a slot nobody will ever release


__all__ = ["Env", "Wire"]
