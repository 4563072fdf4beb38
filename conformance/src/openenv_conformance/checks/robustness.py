"""Level ``robustness``: oversized messages, random bytes, abrupt disconnects; the server survives."""

from __future__ import annotations

import random

import grpc

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import payload_pb2, tool_pb2
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckSkipped, Violation
from openenv_conformance.registry import check
from openenv_conformance.transport import GRPC, NoAnswer, StreamEnd, describe

_SPEC = "docs/protocol.md"
_MAX_PROBE = 64 * 1024 * 1024


def _prepare(ctx: Context) -> None:
    """Learn an accepted action before the disruption (used to prove the server still works)."""
    if ctx.spec.sim and ctx.actions.valid() is not None:
        try:
            ctx.accepted_actions(1)
        except CheckSkipped:
            pass


@check(
    "robustness.oversized_message",
    "A request just under max_message_bytes is answered; one over it ends that stream with RESOURCE_EXHAUSTED, "
    "and the server stays healthy",
    f"{_SPEC} §8; error table: RESOURCE_EXHAUSTED (message too large)",
    requires=(GRPC,),
    why=(
        "gRPC only: the limit is enforced by the gRPC library on the serialized message (the HTTP side "
        "has its own WebSocket message limit, in JSON bytes)"
    ),
)
def oversized_message(ctx: Context) -> None:
    _prepare(ctx)
    limit = int(ctx.spec.caps.max_message_bytes) or 16 * 1024 * 1024
    if limit > _MAX_PROBE:
        raise CheckSkipped(f"max_message_bytes {limit} is above what the suite sends ({_MAX_PROBE})")
    type_name = ctx.spec.action.message_type or "conformance.Oversized"

    def big_step(size: int) -> pb.SessionRequest:
        p = payload_pb2.Payload()
        p.message.type_url = "type.googleapis.com/" + type_name
        p.message.value = b"\xff" * size
        return pb.SessionRequest(request_id=99, step=pb.StepRequest(action=p))

    s = ctx.session()
    under = big_step(limit - 4096)
    s.send(under)
    resp = s.recv(max(ctx.options.timeout, 30.0))
    if not isinstance(resp, pb.SessionResponse):
        raise Violation(f"a {under.ByteSize()}-byte request (limit {limit}) was not answered: {describe(resp)}")
    s = ctx.next_session(s)  # one session at a time: capacity 1 is a valid declaration
    over = big_step(limit + 1024)
    s.send(over)
    end = s.recv(max(ctx.options.timeout, 30.0))
    if not isinstance(end, StreamEnd):
        raise Violation(
            f"a {over.ByteSize()}-byte request (limit {limit}) was answered in band ({describe(end)}); "
            "expected the stream to end with RESOURCE_EXHAUSTED"
        )
    if end.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        raise Violation(f"a {over.ByteSize()}-byte request (limit {limit}): the {end}; expected RESOURCE_EXHAUSTED")
    ctx.fresh_session_works("an oversized message")


@check(
    "robustness.random_bytes",
    "Random bytes as a request (first or after the handshake) get an error answer or end that stream, never a "
    "hang; the server stays healthy",
    f"{_SPEC} §5; grpc framing",
    requires=(GRPC,),
    why="gRPC only: random bytes test the gRPC message framing",
)
def random_bytes(ctx: Context) -> None:
    _prepare(ctx)
    rng = random.Random(ctx.seed_for("bytes"))
    blobs = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))) for _ in range(6)]
    blobs += [b"\xff" * 16, b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x05hello"]
    for i, blob in enumerate(blobs):
        s = ctx.wire.session()
        if i % 2:
            s.open()
        s.send(blob)
        s.send(s.request(state=pb.StateRequest()) if ctx.spec.sim else s.request())
        try:
            s.recv()
            s.half_close()
            s.wait_end()
        except NoAnswer:
            raise Violation(
                f"random bytes {blob.hex()} {'after' if i % 2 else 'before'} the handshake: the stream "
                "neither answered nor ended within the timeout"
            ) from None
        s.cancel()
    ctx.fresh_session_works("random bytes")


@check(
    "robustness.abrupt_disconnect",
    "Clients that vanish mid-request (cancelled streams, closed connections, with requests in flight) leave the "
    "server healthy",
    f"{_SPEC} §3.7",
)
def abrupt_disconnect(ctx: Context) -> None:
    _prepare(ctx)
    actions = ctx._accepted or []
    for i in range(8):
        channel = ctx.wire.new_channel() if i % 2 else None
        # The slot of the session dropped just before is freed asynchronously: with capacity 1
        # the handshake is retried for a while (Context.next_session).
        s = ctx.next_session(channel=channel)
        if ctx.spec.sim:
            s.send(s.request(reset=pb.ResetRequest()))
            for a in actions[:1] * 5:
                s.send(s.request(step=pb.StepRequest(action=a.payload)))
        else:
            for _ in range(5):
                s.send(s.request(list_tools=tool_pb2.ListToolsRequest()))
        if channel is not None:
            ctx.wire.close_channel(channel)
        else:
            s.cancel()
    ctx.fresh_session_works("abrupt disconnects")


@check(
    "robustness.still_serving",
    "At the end of the run, health is SERVING, GetInfo answers and a fresh session works end to end",
    f"{_SPEC} §1.1",
)
def still_serving(ctx: Context) -> None:
    _prepare(ctx)
    info = ctx.wire.get_info()
    if info.name != ctx.info.name:
        raise Violation(f"GetInfo now describes {info.name!r}, not {ctx.info.name!r}")
    ctx.fresh_session_works("the whole run")
