"""Level ``parity``: one environment, two transports, the same results.

Runs when the target serves both gRPC and OpenEnv's JSON protocol: a ``python:`` or
``docker:`` target (the suite knows both addresses), or any target given the other one with
``--parity-with URL``. The same seeded, generated action sequences are played over each and
compared canonically (as ``determinism.same_seed`` compares replays).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import json_format
from hypothesis import strategies as st

from openenv.v1 import environment_pb2 as pb
from openenv.values import from_struct
from openenv_conformance.canonical import canonical, diff, differing_descriptions
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.model import status_name
from openenv_conformance.registry import check
from openenv_conformance.spec import EnvSpec
from openenv_conformance.strategies import Action
from openenv_conformance.transport import EPISODE_FIELDS, NoAnswer, StreamEnd, Transport, expect_ok

_EPISODE = "parity-check"


def _view(resp: pb.SessionResponse | StreamEnd, spec: EnvSpec) -> dict[str, Any]:
    """An answer as plain Python: :func:`canonical` plus metadata, reward breakdown and, for
    errors, their fatality."""
    out = canonical(resp, spec)
    if isinstance(resp, pb.SessionResponse):
        kind = resp.WhichOneof("kind")
        if kind in ("reset", "step"):
            ts = getattr(resp, kind).time_step
            out["metadata"] = from_struct(ts.metadata)
            out["reward_breakdown"] = (
                json_format.MessageToDict(ts.reward_breakdown, preserving_proto_field_name=True)
                if ts.HasField("reward_breakdown")
                else None
            )
        elif kind == "error":
            out["fatal"] = resp.error.fatal
    return out


def _run(wire: Transport, spec: EnvSpec, seed: int, actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Reset with ``seed``, step ``actions`` until the episode ends, read the state."""
    s = wire.session()
    s.open()
    first = _view(s.reset(seed=seed, episode_id=_EPISODE), spec)
    out = [first]
    done = "observation" not in first or first["terminated"] or first["truncated"]
    for a in actions:
        if done:
            break
        c = _view(s.step(a), spec)
        out.append(c)
        done = "stream_end" in c or bool(c.get("terminated") or c.get("truncated"))
    st_ = expect_ok(s.state(), "state", "state")
    out.append(
        {
            "state": {
                "episode_id": st_.episode_id,
                "step_count": st_.step_count,
                "status": status_name(st_.status),
                "payload": spec.state.decode(st_.state),
            }
        }
    )
    s.shutdown()
    return out


def _tools(wire: Transport) -> list[dict[str, Any]]:
    s = wire.session()
    s.open()
    listed = expect_ok(s.list_tools(), "list_tools", f"list_tools over {wire.kind}")
    s.shutdown()
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": from_struct(t.input_schema),
            "output_schema": from_struct(t.output_schema) if t.HasField("output_schema") else None,
            "annotations": from_struct(t.annotations) if t.HasField("annotations") else None,
        }
        for t in listed.tools
    ]


def _render(run: list[dict[str, Any]]) -> str:
    parts = []
    for x in run:
        if "error" in x:
            parts.append(f"error {x['error']}")
        elif "observation" in x:
            parts.append(
                f"#{x['step_count']} reward={x['reward']} terminated={x['terminated']} truncated={x['truncated']}"
            )
        elif "state" in x:
            parts.append(f"state #{x['state']['step_count']} {x['state']['status']}")
        else:
            parts.append(str(x))
    return "; ".join(parts)


@check(
    "parity.grpc_vs_http",
    "Over gRPC and over OpenEnv's JSON protocol (the target's HTTP side) the environment is described alike, "
    "lists the same tools, and the same seeded generated action sequences give identical observations, rewards, "
    "flags, metadata, step counts, refusals and final state",
    "docs/bridge.md (one session machinery, parity); docs/protocol.md §1.3, §5.2",
)
def grpc_vs_http(ctx: Context) -> str | None:
    try:
        peer = ctx.peer()
    except (NoAnswer, grpc.aio.AioRpcError) as e:
        raise Violation(f"the target's other transport ({ctx.peer_url}) does not answer: {e}") from None
    if peer is None:
        raise CheckSkipped(
            f"the target serves one transport ({ctx.transport}); parity runs when a target serves gRPC "
            "and HTTP (python: and docker: targets, or --parity-with URL)"
        )
    other, other_info = peer
    grpc_w, http_w = (ctx.wire, other) if ctx.transport == "grpc" else (other, ctx.wire)
    if EPISODE_FIELDS not in http_w.features:
        raise CheckSkipped(
            "the HTTP side is a stock OpenEnv server (no openenv.hello): its time steps carry no "
            "episode id, step count or terminated/truncated to compare"
        )
    differing = differing_descriptions(ctx.info, other_info, ctx.spec)
    if differing:
        raise Violation(
            f"{ctx.transport} and {other.kind} describe the environment differently (fields: {', '.join(differing)})"
        )
    if ctx.spec.caps.tools:
        tg, th = _tools(grpc_w), _tools(http_w)
        if tg != th:
            raise Violation(
                f"the tool lists differ: over gRPC {[t['name'] for t in tg]}, over HTTP "
                f"{[t['name'] for t in th]}"
                + (" (same names, different descriptors)" if [t["name"] for t in tg] == [t["name"] for t in th] else "")
            )
    if not ctx.spec.sim:
        return "tools-only mode: the descriptions and tool lists were compared"
    if not ctx.spec.caps.deterministic:
        raise CheckSkipped(
            "the environment declares itself nondeterministic: trajectories over two transports need "
            "not agree (descriptions and tool lists were compared)"
        )
    ctx.require_actions()
    tol = ctx.spec.tolerance

    def same(seed: int, actions: list[Action]) -> None:
        over_grpc = _run(grpc_w, ctx.spec, seed, actions)
        over_http = _run(http_w, ctx.spec, seed, actions)
        d = diff(over_grpc, over_http, tol)
        if d:
            raise Violation(
                f"seed {seed}: gRPC and HTTP differ at {d}\n  gRPC: {_render(over_grpc)}\n  HTTP: {_render(over_http)}"
            )

    ctx.search(
        same,
        max_examples=max(5, ctx.options.max_examples // 4),
        seed=st.integers(0, 2**32 - 1),
        actions=ctx.actions.episodes(),
    )
    return None
