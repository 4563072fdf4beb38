"""Rule broken: step_count grows by 1 per accepted step (docs/protocol.md §3.5).

The wire reports step_count 0 in every time step and state answer."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "lifecycle.step_count"
COLLATERAL = frozenset(
    {
        "concurrency.event_loop_live",
        "concurrency.isolation",
        "lifecycle.episode_ids",
        "lifecycle.state_machine",
        "lifecycle.state_never_fails",
        "lifecycle.state_read_only",
        "lifecycle.step_after_end",
        "lifecycle.timeout_aborts",
        "parity.grpc_vs_http",
        "protocol.pipelining",
        "schema.invalid_actions",
        "schema.valid_actions",
        "sessions.resume_exactly_once",
        "vector.autoreset_modes",
        "vector.batch_matches_sequential",
    }
)


class Wire(Proxy):
    def answer(self, stream, req, resp):
        kind = resp.WhichOneof("kind")
        if kind in ("reset", "step"):
            getattr(resp, kind).time_step.step_count = 0
        elif kind == "state":
            resp.state.step_count = 0
        return [resp]


__all__ = ["Env", "Wire"]
