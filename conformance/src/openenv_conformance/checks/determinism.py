"""Level ``determinism``: seeded determinism, for environments that declare it."""

from __future__ import annotations

from hypothesis import strategies as st

from openenv_conformance.canonical import diff, trajectory
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.registry import check
from openenv_conformance.strategies import Action

_EPISODE = "determinism-check"


def _render(t: list[dict]) -> str:
    parts = []
    for x in t:
        if "error" in x:
            parts.append(f"error {x['error']}")
        elif "stream_end" in x:
            parts.append(f"stream ended ({x['stream_end']})")
        elif "observation" in x:
            parts.append(
                f"#{x['step_count']} reward={x['reward']} terminated={x['terminated']} truncated={x['truncated']}"
            )
        else:
            parts.append(str(x))
    return "; ".join(parts)


@check(
    "determinism.same_seed",
    "With Capabilities.deterministic, the same seed and the same generated actions give identical "
    "observations, rewards and flags (maps compared by content, floats within float_tolerance): again in the "
    "same session after a reset, and in a new session",
    "docs/protocol.md §1.3 (deterministic, float_tolerance), §3.4",
)
def same_seed(ctx: Context) -> None:
    if not ctx.spec.caps.deterministic:
        raise CheckSkipped(
            "the environment declares itself nondeterministic (Capabilities.deterministic = false); "
            "the certificate records it"
        )
    ctx.require_actions()
    tol = ctx.spec.tolerance

    def replay(seed: int, actions: list[Action]) -> None:
        s1 = ctx.session()
        first = trajectory(s1, ctx.spec, seed, _EPISODE, actions)
        again = trajectory(s1, ctx.spec, seed, _EPISODE, actions)
        s2 = ctx.session()
        other = trajectory(s2, ctx.spec, seed, _EPISODE, actions)
        for label, t in (("the same session after another reset", again), ("a new session", other)):
            d = diff(first, t, tol)
            if d:
                raise Violation(
                    f"seed {seed} replayed in {label} differs at {d}\n  first:  {_render(first)}\n"
                    f"  replay: {_render(t)}"
                )

    ctx.search(replay, seed=st.integers(0, 2**32 - 1), actions=ctx.actions.episodes())
