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
        s2 = ctx.next_session(s1)  # one session at a time: capacity 1 is a valid declaration
        other = trajectory(s2, ctx.spec, seed, _EPISODE, actions)
        for label, t in (("the same session after another reset", again), ("a new session", other)):
            d = diff(first, t, tol)
            if d:
                raise Violation(
                    f"seed {seed} replayed in {label} differs at {d}\n  first:  {_render(first)}\n"
                    f"  replay: {_render(t)}",
                    cause="nondeterministic",
                )

    ctx.search(replay, seed=st.integers(0, 2**32 - 1), actions=ctx.actions.episodes())


def _without_ids(t: list[dict]) -> list[dict]:
    return [{k: v for k, v in x.items() if k != "episode_id"} for x in t]


@check(
    "determinism.episode_id_independent",
    "With Capabilities.deterministic, an episode depends on its seed and actions, not on its episode id: the "
    "same seed and actions replayed under server-generated ids and under different client-chosen ids give "
    "identical observations, rewards and flags",
    "docs/protocol.md §1.3 (deterministic), §3.4",
)
def episode_id_independent(ctx: Context) -> None:
    if not ctx.spec.caps.deterministic:
        raise CheckSkipped("the environment declares itself nondeterministic (Capabilities.deterministic = false)")
    ctx.require_actions()
    tol = ctx.spec.tolerance

    def replay(seed: int, actions: list[Action]) -> None:
        s = ctx.session()
        runs = [
            (label, _without_ids(trajectory(s, ctx.spec, seed, eid, actions)))
            for label, eid in (
                ("a server-generated id", ""),
                ("another server-generated id", ""),
                ("the client-chosen id 'conformance-a'", "conformance-a"),
                ("the client-chosen id 'conformance-b'", "conformance-b"),
            )
        ]
        first_label, first = runs[0]
        for label, t in runs[1:]:
            d = diff(first, t, tol)
            if d:
                raise Violation(
                    f"seed {seed} under {label} differs from {first_label} at {d}: the episode depends on its "
                    f"episode id\n  {first_label}: {_render(first)}\n  {label}: {_render(t)}"
                )

    ctx.search(replay, seed=st.integers(0, 2**32 - 1), actions=ctx.actions.episodes())


@check(
    "determinism.seeds_honoured",
    "With Capabilities.seeded (and deterministic), reset's seed selects the episode: among 8 seeds with the "
    "same actions, not every episode is identical (an environment that ignores its seed is caught)",
    "docs/protocol.md §1.3 (seeded), §3.4",
)
def seeds_honoured(ctx: Context) -> str:
    caps = ctx.spec.caps
    if not (caps.deterministic and caps.seeded):
        raise CheckSkipped(
            "the environment does not declare Capabilities.seeded (with deterministic): it makes no claim "
            "about what a seed changes"
        )
    actions = ctx.accepted_actions(4)
    s = ctx.session()
    base = ctx.seed_for("seeds")
    seen: dict[str, int] = {}
    first = None
    for i in range(8):
        seed = (base + 7919 * i) % 2**32
        t = _without_ids(trajectory(s, ctx.spec, seed, "", actions))
        if first is None:
            first = t
        elif diff(first, t, ctx.spec.tolerance):
            return f"seeds {base} and {seed} gave different episodes"
        seen[str(seed)] = len(t)
    raise Violation(
        f"8 different seeds ({', '.join(seen)}) with the same actions gave identical episodes: "
        f"{_render(first or [])}; the seed is ignored"
    )
