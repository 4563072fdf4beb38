"""Rule broken: state before the first reset is unset or a valid value of the declared state
type (docs/protocol.md §3.6). Before any reset, state() returns ``{"value": "none yet"}``,
which breaks the declared state schema (``value`` is an integer)."""

from mutants.base import Counter

CAUGHT_BY = "lifecycle.state_before_reset"
COLLATERAL = frozenset({"schema.observations"})


class Env(Counter):
    started = False

    def reset(self, *, seed=None, episode_id=None, options=None):
        self.started = True
        return super().reset(seed=seed, episode_id=episode_id, options=options)

    def state(self):
        if not self.started:
            return {"value": "none yet"}
        return super().state()
