"""Rule broken: state never fails once the handshake is done (docs/protocol.md §3.6).
state() raises once the episode has ended (INTERNAL on the wire)."""

from mutants.base import Counter

CAUGHT_BY = "lifecycle.state_never_fails"
COLLATERAL = frozenset(
    {
        "concurrency.isolation",
        "lifecycle.state_machine",
        "lifecycle.state_read_only",
        "lifecycle.step_after_end",
        "lifecycle.step_count",
        "parity.grpc_vs_http",
        "schema.observations",
        "vector.autoreset_modes",
    }
)


class Env(Counter):
    def reset(self, *, seed=None, episode_id=None, options=None):
        self.steps, self.done = 0, False
        return super().reset(seed=seed, episode_id=episode_id, options=options)

    def step(self, action):
        r = super().step(action)
        self.steps += 1
        self.done = r.terminated or self.steps >= self.max_episode_steps
        return r

    def state(self):
        if getattr(self, "done", False):
            raise RuntimeError("no state after the end of an episode")
        return super().state()
