"""Rule broken: every reset starts a new episode with a new id (docs/protocol.md §3.4).

The wire keeps reporting the session's first episode id after later resets."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "lifecycle.episode_ids"
COLLATERAL = frozenset(
    {
        "concurrency.event_loop_live",  # its rounds reset the episode too
        "lifecycle.state_machine",
        "lifecycle.step_count",
        "lifecycle.timeout_aborts",
    }
)


class Wire(Proxy):
    def answer(self, stream, req, resp):
        kind = resp.WhichOneof("kind")
        first = stream.state.get("first")
        if kind in ("reset", "step"):
            ts = getattr(resp, kind).time_step
            if first is None and kind == "reset":
                stream.state["first"] = ts.episode_id
            elif first is not None:
                ts.episode_id = first
        elif kind == "state" and first is not None and resp.state.episode_id:
            resp.state.episode_id = first
        return [resp]


__all__ = ["Env", "Wire"]
