"""Canonical trajectories and their comparison: maps by content, floats within a tolerance.

A trajectory is the list of what a session answered to a reset and a sequence of steps,
each answer reduced to plain Python: the decoded observation (messages by their proto3
JSON mapping, so map order and serialization details do not matter), the reward (None
when unset, which is not 0), the flags, the step count and the episode id; a refused step
is reduced to its error code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from openenv.runtime.anys import canonicalize_anys
from openenv.v1 import environment_pb2 as pb
from openenv_conformance.spec import EnvSpec
from openenv_conformance.transport import SessionLike, StreamEnd, code_name

__all__ = ["canonical", "canonical_time_step", "diff", "differing_descriptions", "differing_fields", "trajectory"]


def canonical(resp: pb.SessionResponse | StreamEnd, spec: EnvSpec) -> dict[str, Any]:
    """One answer as plain Python."""
    if isinstance(resp, StreamEnd):
        return {"stream_end": resp.code.name}
    kind = resp.WhichOneof("kind")
    if kind == "error":
        return {"error": code_name(resp.error.code)}
    if kind in ("reset", "step"):
        return canonical_time_step(getattr(resp, kind).time_step, spec)
    return {"answer": kind}


def canonical_time_step(ts: pb.TimeStep, spec: EnvSpec) -> dict[str, Any]:
    """One time step as plain Python."""
    return {
        "observation": spec.observation.decode(ts.observation),
        "reward": ts.reward if ts.HasField("reward") else None,
        "terminated": ts.terminated,
        "truncated": ts.truncated,
        "step_count": ts.step_count,
        "episode_id": ts.episode_id,
    }


def trajectory(
    s: SessionLike, spec: EnvSpec, seed: int | None, episode_id: str, actions: Sequence[Any]
) -> list[dict[str, Any]]:
    """Reset (with ``seed`` and ``episode_id``) and step ``actions`` until the episode ends."""
    first = canonical(s.reset(seed=seed, episode_id=episode_id), spec)
    out = [first]
    done = "observation" not in first or first["terminated"] or first["truncated"]
    for a in actions:
        if done:
            break
        c = canonical(s.step(a), spec)
        out.append(c)
        done = "stream_end" in c or bool(c.get("terminated") or c.get("truncated"))
    return out


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def diff(a: Any, b: Any, tol: float = 0.0, path: str = "") -> str | None:
    """Where ``a`` and ``b`` first differ (None when equal): dicts by content, lists by
    position, numbers within ``tol`` (NaN equals NaN)."""
    here = path or "/"
    if _num(a) and _num(b):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return None
        if fa == fb or (math.isfinite(fa) and math.isfinite(fb) and abs(fa - fb) <= tol):
            return None
        return f"{here}: {a!r} != {b!r}" + (f" (tolerance {tol:g})" if tol else "")
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: present in only one ({'first' if k in a else 'second'})"
            d = diff(a[k], b[k], tol, f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{here}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = diff(x, y, tol, f"{path}/{i}")
            if d:
                return d
        return None
    if type(a) is not type(b) or a != b:
        return f"{here}: {a!r} != {b!r}"
    return None


def differing_fields(a: Any, b: Any) -> list[str]:
    """The names of the top-level fields where two messages of one type differ."""
    return [f.name for f in a.DESCRIPTOR.fields if getattr(a, f.name) != getattr(b, f.name)]


def differing_descriptions(a: pb.EnvironmentInfo, b: pb.EnvironmentInfo | None, spec: EnvSpec) -> list[str]:
    """:func:`differing_fields` of two descriptions, their ``Any`` values (examples) compared by
    content: a map inside one serializes in any order, and two processes pick different ones
    (openenv.runtime.anys), so equal examples can differ byte for byte. ``b`` missing (a
    handshake that carried no description) differs in every field."""
    if b is None:
        return ["all (the second carries no description)"]
    pools = [spec.pool] if spec.pool is not None else []
    copies = []
    for info in (a, b):
        c = pb.EnvironmentInfo()
        c.CopyFrom(info)
        canonicalize_anys(c, pools)
        copies.append(c)
    return differing_fields(*copies)
