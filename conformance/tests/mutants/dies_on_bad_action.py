"""Rule broken: an invalid action is INVALID_ARGUMENT, not fatal; the session stays usable
(error table). The wire marks a refused step fatal and ends the stream."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "schema.invalid_actions"
COLLATERAL = frozenset(
    {
        "concurrency.isolation",
        "determinism.episode_id_independent",
        "determinism.same_seed",
        "lifecycle.state_machine",
        "lifecycle.state_never_fails",
        "lifecycle.state_read_only",
        "lifecycle.step_after_end",
        "lifecycle.timeout_aborts",  # its search of the actions sends invalid ones too
        "schema.error_precedence",
        "schema.observations",
        "schema.valid_actions",
        "sessions.restore_reproduces",
    }
)


class Wire(Proxy):
    def answer(self, stream, req, resp):
        if (
            resp.WhichOneof("kind") == "error"
            and resp.error.code == 3
            and req is not None
            and req.WhichOneof("kind") == "step"
        ):
            resp.error.fatal = True
            stream.ended = True
        return [resp]


__all__ = ["Env", "Wire"]
