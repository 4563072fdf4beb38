"""Rule broken: step_count grows by 1 per accepted step (docs/protocol.md §3.5).

The wire reports step_count 0 in every time step and state answer."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "lifecycle.step_count"
COLLATERAL = frozenset({"lifecycle.state_machine", "protocol.pipelining", "lifecycle.step_after_end",
                        "lifecycle.state_never_fails", "lifecycle.episode_ids", "schema.valid_actions",
                        "schema.invalid_actions", "concurrency.isolation"})


class Wire(Proxy):
    def answer(self, stream, req, resp):
        kind = resp.WhichOneof("kind")
        if kind in ("reset", "step"):
            getattr(resp, kind).time_step.step_count = 0
        elif kind == "state":
            resp.state.step_count = 0
        return [resp]


__all__ = ["Env", "Wire"]
