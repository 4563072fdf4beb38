"""Level ``protocol``: handshake, versions, request ids, pipelining, health, reflection, GetInfo."""

from __future__ import annotations

from typing import Any

import grpc
import jsonschema
from google.protobuf import descriptor_pb2

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import task_pb2, tool_pb2
from openenv.values import from_struct
from openenv_conformance.canonical import differing_descriptions
from openenv_conformance.context import Context
from openenv_conformance.declaration import compare
from openenv_conformance.errors import CheckSkipped, CheckWarning, Violation
from openenv_conformance.registry import check
from openenv_conformance.transport import (
    EPISODE_FIELDS,
    FRAMES,
    GRPC,
    PROTOCOL_VERSION,
    SERVICE,
    SessionLike,
    StreamEnd,
    describe,
    expect_error,
    expect_ok,
    expect_response,
)
from openenv_conformance.transport.grpc import Wire

_SPEC = "docs/protocol.md"


def _ends(s: SessionLike, what: str, ctx: Context) -> StreamEnd:
    end, extra = s.wait_end(ctx.options.timeout)
    if extra:
        raise Violation(f"{what}: the server answered again after a fatal error ({describe(extra[0])})")
    return end


def _parse_version(v: str) -> tuple[int, int] | None:
    parts = v.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


@check(
    "protocol.handshake",
    "A handshake opens the session: HandshakeResponse with a session id, a 1.x protocol version and the "
    "environment's info, under the request's id",
    f"{_SPEC} §3.3",
    requires=(GRPC,),
    why=(
        "gRPC only: over OpenEnv's WebSocket protocol the connection is the handshake (no request, no "
        "version, no request id)"
    ),
)
def handshake(ctx: Context) -> None:
    ids = set()
    for rid in (7, 8):
        s = ctx.session(handshake=False)
        resp = expect_response(s.handshake(request_id=rid), "handshake", "handshake")
        hs = resp.handshake
        if resp.request_id != rid:
            raise Violation(f"handshake answer carries request_id {resp.request_id}, not {rid}")
        if not hs.session_id:
            raise Violation("HandshakeResponse.session_id is empty")
        ids.add(hs.session_id)
        pv = _parse_version(hs.protocol_version)
        if pv is None or pv[0] != 1:
            raise Violation(f"HandshakeResponse.protocol_version {hs.protocol_version!r} is not 1.MINOR")
        if not hs.HasField("info") or not hs.info.name:
            raise Violation("HandshakeResponse.info is missing or has no name")
        if hs.info.protocol_version != hs.protocol_version:
            raise Violation(
                f"info.protocol_version {hs.info.protocol_version!r} differs from the handshake's "
                f"{hs.protocol_version!r}"
            )
        s.shutdown()
    if len(ids) != 2:
        raise Violation("two sessions got the same session_id")


@check(
    "protocol.version_negotiation",
    "Any 1.x client version is accepted; another major is FAILED_PRECONDITION (fatal) and an empty version "
    "INVALID_ARGUMENT (fatal); the stream then ends",
    f"{_SPEC} §3.3, §10; error table: FAILED_PRECONDITION, INVALID_ARGUMENT",
    requires=(GRPC,),
    why="gRPC only: OpenEnv's WebSocket protocol negotiates no protocol version",
)
def version_negotiation(ctx: Context) -> None:
    for v in ("1.0", "1.7", "1.999"):
        s = ctx.session(handshake=False)
        expect_ok(s.handshake(v), "handshake", f"handshake with protocol_version {v!r}")
        expect_ok(
            s.state() if ctx.spec.sim else s.list_tools(),
            "state" if ctx.spec.sim else "list_tools",
            f"a request after a {v!r} handshake",
        )
        s.shutdown()
    for v, code in (
        ("2.0", "FAILED_PRECONDITION"),
        ("0.9", "FAILED_PRECONDITION"),
        ("99.1", "FAILED_PRECONDITION"),
        ("", "INVALID_ARGUMENT"),
    ):
        s = ctx.session(handshake=False)
        what = f"handshake with protocol_version {v!r}"
        expect_error(s.handshake(v), code, what, fatal=True)
        _ends(s, what, ctx)


@check(
    "protocol.version_unparsable",
    "A protocol version that does not parse as MAJOR.MINOR is refused with FAILED_PRECONDITION (fatal)",
    f"{_SPEC} §3.3; error table: FAILED_PRECONDITION (unsupported or unparsable version)",
    requires=(GRPC,),
    why="gRPC only: OpenEnv's WebSocket protocol negotiates no protocol version",
)
def version_unparsable(ctx: Context) -> None:
    for v in ("abc", "1", "1.x", "v1.0", "1.0.0"):
        s = ctx.session(handshake=False)
        what = f"handshake with protocol_version {v!r}"
        expect_error(s.handshake(v), "FAILED_PRECONDITION", what, fatal=True)
        _ends(s, what, ctx)


@check(
    "protocol.request_ids",
    "Every answer carries the request_id of the request it answers, whatever the id (0, 2^63, 2^64-1...)",
    f"{_SPEC} §4",
    requires=(GRPC,),
    why=(
        "gRPC only: request ids are the gRPC Session framing; OpenEnv's frames carry none (openenv's own"
        " correlation ids are checked on every reply instead)"
    ),
)
def request_ids(ctx: Context) -> None:
    s = ctx.session(handshake=False)
    hs = expect_response(s.handshake(request_id=2**64 - 1), "handshake", "handshake")
    if hs.request_id != 2**64 - 1:
        raise Violation(f"handshake with request_id 2^64-1 answered with request_id {hs.request_id}")
    reqs: list[pb.SessionRequest] = []
    ids = [0, 1, 2**63, 2**32 + 5, 12345678901234567, 3, 3]
    kinds: list[dict[str, Any]] = []
    if ctx.spec.sim:
        kinds += [{"state": pb.StateRequest()}, {"reset": pb.ResetRequest()}, {"state": pb.StateRequest()}]
    if ctx.spec.caps.tools:
        kinds += [{"list_tools": tool_pb2.ListToolsRequest()}]
    kinds += [{}]  # no kind: INVALID_ARGUMENT, still answered under its id
    for i, rid in enumerate(ids):
        reqs.append(pb.SessionRequest(request_id=rid, **kinds[i % len(kinds)]))
    for req in reqs:
        resp = s.exchange(req)
        if isinstance(resp, StreamEnd):
            kind = req.WhichOneof("kind") or "no kind"
            raise Violation(f"request {req.request_id} ({kind}) was not answered: {resp}")
        if resp.request_id != req.request_id:
            raise Violation(
                f"request {req.request_id} ({req.WhichOneof('kind') or 'no kind'}) answered with "
                f"request_id {resp.request_id}"
            )


@check(
    "protocol.pipelining",
    "Requests sent before reading any answer are answered once each, in request order, with their ids, and "
    "take effect in order",
    f"{_SPEC} §4",
    requires=(GRPC,),
    why="gRPC only: pipelining of arbitrary requests under chosen ids is the gRPC Session framing",
)
def pipelining(ctx: Context) -> None:
    plan: list[pb.SessionRequest] = []
    base = 1000

    def add(**kind: Any) -> None:
        plan.append(pb.SessionRequest(request_id=base + 7 * len(plan), **kind))

    actions = []
    if ctx.spec.sim and ctx.actions.valid() is not None:
        try:
            actions = ctx.accepted_actions(2)  # before opening the session: capacity may be 1
        except CheckSkipped:
            pass  # pipelining is still checked with state requests
    _ = ctx.tools
    s = ctx.session()
    if ctx.spec.sim:
        add(state=pb.StateRequest())
        add(reset=pb.ResetRequest(episode_id="pipelined-episode-1"))
        add(state=pb.StateRequest())
        for a in actions:
            add(step=pb.StepRequest(action=a.payload))
        add(state=pb.StateRequest())
    if ctx.spec.caps.tools:
        add(list_tools=tool_pb2.ListToolsRequest())
    for _ in range(20):
        add(**({"state": pb.StateRequest()} if ctx.spec.sim else {"list_tools": tool_pb2.ListToolsRequest()}))
    for req in plan:
        if not s.send(req):
            raise Violation(f"the stream stopped accepting requests after {plan.index(req)} pipelined requests")
    answers: list[pb.SessionResponse] = []
    for _ in plan:
        resp = s.recv()
        if isinstance(resp, StreamEnd):
            raise Violation(f"{len(answers)} of {len(plan)} pipelined requests answered, then the {resp}")
        answers.append(resp)
    for i, (req, resp) in enumerate(zip(plan, answers, strict=True)):
        if resp.request_id != req.request_id:
            got = [r.request_id for r in answers]
            raise Violation(
                f"pipelined answer #{i} carries request_id {resp.request_id}, expected "
                f"{req.request_id} (sent {[r.request_id for r in plan]}, got {got})"
            )
        k = resp.WhichOneof("kind")
        if k not in (req.WhichOneof("kind"), "error"):
            raise Violation(f"pipelined request #{i} ({req.WhichOneof('kind')}) answered with a {k} answer")
    if ctx.spec.sim:
        expect_ok(answers[0], "state", "state before reset")
        ts = expect_ok(answers[1], "reset", "pipelined reset").time_step
        st = expect_ok(answers[2], "state", "state after the pipelined reset")
        if st.episode_id != "pipelined-episode-1" or st.step_count != 0:
            raise Violation(
                f"state pipelined after reset(episode_id='pipelined-episode-1') shows episode "
                f"{st.episode_id!r}, step_count {st.step_count}: effects were not applied in order"
            )
        accepted = 0
        ended = ts.terminated or ts.truncated
        for j in range(len(actions)):
            r = answers[3 + j]
            if r.WhichOneof("kind") == "step" and not ended:
                accepted += 1
                ended = r.step.time_step.terminated or r.step.time_step.truncated
        st2 = expect_ok(answers[3 + len(actions)], "state", "state after the pipelined steps")
        if st2.step_count != accepted:
            raise Violation(f"state pipelined after {accepted} accepted steps shows step_count {st2.step_count}")


_RFC_PIPELINED = "docs/rfcs/0009-pipelined-requests.md"


@check(
    "protocol.pipelined_messages",
    "A pipelined message's requests are applied in order and answered in one message, in order, each under "
    "its own id (errors in place: a nested message, a request with no kind); an empty or oversized one is "
    "refused whole (non-fatal, nothing applied)",
    f"{_RFC_PIPELINED}; proto PipelinedRequests",
    requires=(GRPC,),
    why="gRPC only: pipelined messages are a SessionRequest kind; OpenEnv's JSON protocol has no such frame",
)
def pipelined_messages(ctx: Context) -> str | None:
    caps = ctx.spec.caps
    if not caps.pipelined_requests:
        raise CheckSkipped("the server does not offer pipelined messages (Capabilities.pipelined_requests unset)")
    limit = caps.max_pipelined_requests
    if limit < 1:
        raise Violation("Capabilities.pipelined_requests is set but max_pipelined_requests is 0")
    actions = []
    if ctx.spec.sim and ctx.actions.valid() is not None:
        try:
            actions = ctx.accepted_actions(2)  # before opening the session: capacity may be 1
        except CheckSkipped:
            pass  # order is still checked with state requests
    _ = ctx.tools
    s = ctx.session()
    items: list[pb.SessionRequest] = []

    def add(**kind: Any) -> None:
        items.append(pb.SessionRequest(request_id=2000 + 7 * len(items), **kind))

    read = {"state": pb.StateRequest()} if ctx.spec.sim else {"list_tools": tool_pb2.ListToolsRequest()}
    if ctx.spec.sim:
        add(state=pb.StateRequest())
        add(reset=pb.ResetRequest(episode_id="pipelined-message-1"))
        add(state=pb.StateRequest())
        for a in actions:
            add(step=pb.StepRequest(action=a.payload))
        add(state=pb.StateRequest())
    bad_at = len(items)
    add()  # no kind: INVALID_ARGUMENT in its place
    nested = pb.SessionRequest(request_id=2000 + 7 * len(items))
    nested.pipelined.requests.add(request_id=1999, **read)
    items.append(nested)  # nested: INVALID_ARGUMENT in its place, its request not applied
    while len(items) < bad_at + 8:
        add(**read)
    answers: list[pb.SessionResponse] = []
    for first in range(0, len(items), limit):  # in messages of at most the server's limit
        chunk, mid = items[first : first + limit], 1800 + first
        msg = pb.SessionRequest(request_id=mid)
        msg.pipelined.requests.extend(chunk)
        if not s.send(msg):
            raise Violation("the stream did not accept a pipelined message")
        resp = expect_response(s.recv(), "pipelined", f"a pipelined message of {len(chunk)} requests")
        if resp.request_id != mid:
            raise Violation(f"the pipelined answer carries request_id {resp.request_id}, not the message's {mid}")
        answers += resp.pipelined.responses
    sent, got = [r.request_id for r in items], [r.request_id for r in answers]
    if got != sent:
        raise Violation(f"pipelined answers carry request ids {got}; the requests, in order, were {sent}")
    for i, (req, ans) in enumerate(zip(items, answers, strict=True)):
        k = ans.WhichOneof("kind")
        if i < bad_at and k not in (req.WhichOneof("kind"), "error"):
            raise Violation(f"pipelined request #{i} ({req.WhichOneof('kind')}) answered with a {k} answer")
    expect_error(answers[bad_at], "INVALID_ARGUMENT", "a pipelined request with no kind", fatal=False)
    expect_error(answers[bad_at + 1], "INVALID_ARGUMENT", "a pipelined message nested in another", fatal=False)
    for i in range(bad_at + 2, len(items)):
        expect_response(answers[i], next(iter(read)), f"pipelined request #{i} after the refused ones")
    if ctx.spec.sim:
        expect_ok(answers[0], "state", "state before reset (pipelined)")
        ts = expect_ok(answers[1], "reset", "reset (pipelined)").time_step
        st = expect_ok(answers[2], "state", "state after the reset (pipelined)")
        if st.episode_id != "pipelined-message-1" or st.step_count != 0:
            raise Violation(
                f"state after reset(episode_id='pipelined-message-1') in the same pipelined message shows "
                f"episode {st.episode_id!r}, step_count {st.step_count}: requests were not applied in order"
            )
        accepted, ended = 0, ts.terminated or ts.truncated
        for j in range(len(actions)):
            r = answers[3 + j]
            if r.WhichOneof("kind") == "step" and not ended:
                accepted += 1
                ended = r.step.time_step.terminated or r.step.time_step.truncated
        st2 = expect_ok(answers[3 + len(actions)], "state", "state after the steps (pipelined)")
        if st2.step_count != accepted:
            raise Violation(
                f"state after {accepted} accepted steps in the same pipelined message shows step_count "
                f"{st2.step_count}: requests were not applied in order"
            )
    # Refused whole, nothing lost: an empty message, and one over the limit (when it fits the size limit).
    if not s.send(pb.SessionRequest(request_id=1901, pipelined=pb.PipelinedRequests())):
        raise Violation("the stream did not accept an empty pipelined message")
    empty = s.recv()
    expect_error(empty, "INVALID_ARGUMENT", "an empty pipelined message", fatal=False)
    if isinstance(empty, pb.SessionResponse) and empty.request_id != 1901:
        raise Violation(f"the refusal of an empty pipelined message carries request_id {empty.request_id}, not 1901")
    note = None
    over = pb.SessionRequest(request_id=1902)
    for i in range(limit + 1):
        over.pipelined.requests.add(request_id=3000 + i, **read)
    if over.ByteSize() <= caps.max_message_bytes:
        s.send(over)
        refused = s.recv()
        expect_error(
            refused, "RESOURCE_EXHAUSTED", f"a pipelined message of {limit + 1} requests (limit {limit})", fatal=False
        )
        if isinstance(refused, pb.SessionResponse) and refused.request_id != 1902:
            raise Violation(f"the refusal of an oversized pipelined message carries request_id {refused.request_id}")
    else:
        note = f"max_pipelined_requests + 1 requests exceed the message size limit: the limit of {limit} not probed"
    s.send(pb.SessionRequest(request_id=1903, **read))
    after = expect_response(s.recv(), next(iter(read)), "a request after the refused pipelined messages")
    if after.request_id != 1903:
        raise Violation(
            f"after the refused pipelined messages the next answer carries request_id {after.request_id}, not 1903: "
            "a refused message's requests were answered"
        )
    return note


@check(
    "protocol.health",
    'grpc.health.v1 reports SERVING for the server ("") and for openenv.v1.EnvironmentService',
    f"{_SPEC} §1.1",
    requires=(GRPC,),
    why="gRPC only: grpc.health.v1 (over HTTP, protocol.http_endpoints checks GET /health)",
)
def health(ctx: Context) -> None:
    for service in ("", SERVICE):
        status = ctx.wire.health(service)
        if status != "SERVING":
            raise Violation(f"health of {service or 'the server'!r} is {status}, expected SERVING")


@check(
    "protocol.reflection",
    "Server reflection lists openenv.v1.EnvironmentService and serves the file that defines it",
    f"{_SPEC} §1.1",
    requires=(GRPC,),
    why="gRPC only: server reflection is a gRPC service",
)
def reflection(ctx: Context) -> None:
    try:
        names, files = ctx.grpc_wire().reflection(SERVICE)
    except grpc.aio.AioRpcError as e:
        raise Violation(f"server reflection failed: {e.code().name}: {e.details()}") from None
    if SERVICE not in names:
        raise Violation(f"server reflection lists {names}, without {SERVICE}")
    found = False
    for raw in files:
        fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        if fd.package == "openenv.v1" and any(sv.name == "EnvironmentService" for sv in fd.service):
            found = True
    if not found:
        raise Violation(f"reflection's file_containing_symbol({SERVICE}) returned no file defining the service")


@check(
    "protocol.get_info",
    "GetInfo returns the same EnvironmentInfo as the handshake, without opening a session",
    f"{_SPEC} §1.1, §1.2",
    requires=(GRPC,),
    why=(
        "gRPC only: GetInfo is a unary gRPC call (over HTTP, protocol.http_endpoints compares GET "
        "/openenv/info with the session's info)"
    ),
)
def get_info(ctx: Context) -> None:
    unary = ctx.wire.get_info()
    hs = ctx.session().info
    differing = differing_descriptions(unary, hs, ctx.spec)
    if differing:
        raise Violation(
            f"GetInfo and the handshake describe the environment differently (fields: {', '.join(differing)})"
        )


@check(
    "protocol.load",
    "GetLoad reports the advertised capacity and counts the sessions open (when load_reporting is set)",
    "docs/rfcs/0005-server-load.md; proto/openenv/v1/load.proto",
    requires=(GRPC,),
    why="gRPC only: GetLoad is a unary gRPC call (the HTTP side's GET /load is its JSON twin)",
)
def load(ctx: Context) -> None:
    info = ctx.session().info
    if info is None:
        raise Violation("the handshake answered no EnvironmentInfo")
    caps = info.capabilities
    if not caps.load_reporting:
        raise CheckSkipped("the server does not report its load (Capabilities.load_reporting is unset)")
    if caps.max_sessions >= 2:
        ctx.session()  # two sessions of ours are open now
    ours = 2 if caps.max_sessions >= 2 else 1
    try:
        ld = ctx.grpc_wire().get_load()
    except grpc.aio.AioRpcError as e:
        raise Violation(f"load_reporting is set but GetLoad failed: {e.code().name}: {e.details()}") from None
    if ld.max_sessions != caps.max_sessions:
        raise Violation(f"GetLoad's max_sessions is {ld.max_sessions}, Capabilities.max_sessions {caps.max_sessions}")
    if not ours <= ld.sessions_open <= ld.max_sessions:
        raise Violation(
            f"GetLoad counts {ld.sessions_open} session(s) open while {ours} of this check are "
            f"(capacity {ld.max_sessions})"
        )
    if ld.queued_handshakes > ld.sessions_open:
        raise Violation(f"queued_handshakes {ld.queued_handshakes} exceeds sessions_open {ld.sessions_open}")
    if ld.sessions_opened_total < ours:
        raise Violation(f"sessions_opened_total is {ld.sessions_opened_total} with {ours} session(s) opened")
    if ld.step_latency_p99.ToNanoseconds() < ld.step_latency_p50.ToNanoseconds():
        raise Violation("GetLoad's step_latency_p99 is below its p50")
    if ld.draining:
        raise Violation("GetLoad says the server drains while it accepts sessions")


@check(
    "protocol.first_request",
    "A first request that is not a handshake (or has no kind) is FAILED_PRECONDITION (fatal); the stream ends",
    f"{_SPEC} §3.2; error table: FAILED_PRECONDITION (request before the handshake)",
    requires=(GRPC,),
    why=(
        "gRPC only: over OpenEnv's WebSocket protocol the connection is the handshake, so no request can come before it"
    ),
)
def first_request(ctx: Context) -> None:
    for kind in ({"state": pb.StateRequest()}, {"reset": pb.ResetRequest()}, {"close": pb.CloseRequest()}, {}):
        s = ctx.session(handshake=False)
        name = next(iter(kind), "no kind")
        what = f"a first request with {name}"
        expect_error(s.exchange(s.request(**kind)), "FAILED_PRECONDITION", what, fatal=True)
        end = _ends(s, what, ctx)
        if end.code != grpc.StatusCode.OK:
            raise Violation(f"{what}: after the in-band fatal error the {end}; expected status OK")


@check(
    "protocol.second_handshake",
    "A second handshake is FAILED_PRECONDITION, not fatal; the session stays usable",
    f"{_SPEC} §3.2; error table: FAILED_PRECONDITION (second handshake)",
    requires=(GRPC,),
    why="gRPC only: OpenEnv's WebSocket protocol has no handshake request",
)
def second_handshake(ctx: Context) -> None:
    s = ctx.session()
    expect_error(s.handshake(), "FAILED_PRECONDITION", "a second handshake", fatal=False)
    if ctx.spec.sim:
        expect_ok(s.state(), "state", "state after a refused second handshake")
    else:
        expect_ok(s.list_tools(), "list_tools", "list_tools after a refused second handshake")


@check(
    "protocol.unset_kind",
    "A request with no kind is INVALID_ARGUMENT, not fatal; the session stays usable",
    f"{_SPEC} §3.2; error table: INVALID_ARGUMENT (unset request kind)",
    requires=(GRPC,),
    why=(
        "gRPC only: a request with no kind is a gRPC message; a frame with no type is covered by "
        "lifecycle.state_never_fails over HTTP"
    ),
)
def unset_kind(ctx: Context) -> None:
    s = ctx.session()
    expect_error(s.exchange(s.request()), "INVALID_ARGUMENT", "a request with no kind", fatal=False)
    if ctx.spec.sim:
        expect_ok(s.state(), "state", "state after a request with no kind")
    else:
        expect_ok(s.list_tools(), "list_tools", "list_tools after a request with no kind")


@check(
    "protocol.half_close",
    "After the client half-closes, every request already sent is answered, then the stream ends with OK",
    f"{_SPEC} §3.7",
    requires=(GRPC,),
    why="gRPC only: a WebSocket cannot be half-closed",
)
def half_close(ctx: Context) -> None:
    s = ctx.session()
    kind = {"state": pb.StateRequest()} if ctx.spec.sim else {"list_tools": tool_pb2.ListToolsRequest()}
    sent = [s.request(**kind) for _ in range(5)]
    for r in sent:
        s.send(r)
    s.half_close()
    end, answers = s.wait_end()
    if [a.request_id for a in answers] != [r.request_id for r in sent]:
        raise Violation(
            f"after half-close, {len(answers)} of {len(sent)} requests were answered "
            f"(ids {[a.request_id for a in answers]})"
        )
    if end.code != grpc.StatusCode.OK:
        raise Violation(f"after half-close the {end}; expected status OK")


@check(
    "protocol.http_endpoints",
    'Over HTTP: GET /health answers 200 {"status": "healthy"}; /metadata names the environment; /schema holds '
    "valid JSON Schemas of action, observation (the declared one) and state; an openenv server's sessions report "
    "(openenv.hello) the EnvironmentInfo of GET /openenv/info, under distinct session ids",
    "docs/bridge.md (Endpoints, /ws frames)",
    requires=(FRAMES,),
)
def http_endpoints(ctx: Context) -> str | None:
    wire = ctx.http_wire()
    status, body = wire.get("/health")
    if status != 200 or body != {"status": "healthy"}:
        raise Violation(f'GET /health answered {status} {body!r}, expected 200 {{"status": "healthy"}}')
    status, md = wire.get("/metadata")
    if status != 200 or not isinstance(md, dict):
        raise Violation(f"GET /metadata answered {status} {md!r}, expected a JSON object")
    if md.get("name") != ctx.info.name:
        raise Violation(f"GET /metadata names {md.get('name')!r}; the environment is {ctx.info.name!r}")
    status, schema = wire.get("/schema")
    if status != 200 or not isinstance(schema, dict):
        raise Violation(f"GET /schema answered {status} {schema!r}, expected a JSON object")
    for part in ("action", "observation", "state"):
        doc = schema.get(part)
        if not isinstance(doc, dict):
            raise Violation(f"GET /schema has no {part!r} JSON Schema object")
        try:
            jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator).check_schema(doc)
        except jsonschema.SchemaError as e:
            raise Violation(f"GET /schema: the {part} schema is not a valid JSON Schema: {e.message}") from None
    declared = from_struct(ctx.info.observation.json_schema) if ctx.info.observation.HasField("json_schema") else None
    if declared and schema["observation"] != declared:
        raise Violation("GET /schema's observation schema differs from the declared observation json_schema")
    if EPISODE_FIELDS not in ctx.features:
        return "a stock OpenEnv server: described by /metadata and /schema"
    ids = set()
    for _ in range(2):
        s = ctx.session()
        differing = differing_descriptions(ctx.info, s.info, ctx.spec)
        if differing:
            raise Violation(
                "openenv.hello and GET /openenv/info describe the environment differently "
                f"(fields: {', '.join(differing)})"
            )
        if not s.session_id:
            raise Violation("openenv.hello carries no session id")
        ids.add(s.session_id)
        s.shutdown()
    if len(ids) != 2:
        raise Violation("two sessions got the same session id")
    return None


_RFC3 = "docs/rfcs/0003-hardened-listeners.md"


@check(
    "protocol.handshake_deadline",
    "A Session stream that sends nothing is ended with DEADLINE_EXCEEDED once Capabilities.handshake_timeout "
    "elapses, and the server serves on",
    f"{_RFC3}; environment.proto Capabilities.handshake_timeout",
    requires=(GRPC,),
    why="gRPC only: the deadline bounds silent Session streams (the HTTP side bounds request heads instead)",
)
def handshake_deadline(ctx: Context) -> None:
    caps = ctx.spec.caps
    if not caps.HasField("handshake_timeout"):
        raise CheckSkipped("the server advertises no handshake_timeout")
    deadline = caps.handshake_timeout.ToNanoseconds() / 1e9
    if deadline <= 0 or deadline > 60:
        raise CheckSkipped(f"handshake_timeout {deadline:g} s is outside what the suite waits for (0, 60]")
    s = ctx.session(handshake=False)
    end, extra = s.wait_end(deadline + max(ctx.options.timeout, 30.0))
    if extra:
        raise Violation(f"a stream that sent nothing was answered: {describe(extra[0])}")
    if end.code is not grpc.StatusCode.DEADLINE_EXCEEDED:
        raise Violation(f"a stream that sent nothing ended with {end.code.name}, not DEADLINE_EXCEEDED")
    ctx.fresh_session_works("a stream ended at the handshake deadline")


@check(
    "protocol.unauthenticated",
    "When Capabilities.auth_required is set, a Session stream without the bearer token is ended with "
    "UNAUTHENTICATED before any answer, and no session is opened",
    f"{_RFC3}; error table UNAUTHENTICATED",
    requires=(GRPC,),
    why="gRPC only: the HTTP side answers 401 before the WebSocket opens (no frame to check)",
)
def unauthenticated(ctx: Context) -> None:
    if not ctx.spec.caps.auth_required:
        raise CheckSkipped("the server requires no token (Capabilities.auth_required is false)")
    wire = ctx.wire
    if not isinstance(wire, Wire):
        raise CheckSkipped("the transport cannot open an anonymous channel")
    s = ctx.session(handshake=False, channel=wire.new_channel(anonymous=True))
    answer = s.handshake()
    if not isinstance(answer, StreamEnd):
        raise Violation(f"an anonymous handshake was answered: {describe(answer)}")
    if answer.code is not grpc.StatusCode.UNAUTHENTICATED:
        raise Violation(f"an anonymous handshake ended with {answer.code.name}, not UNAUTHENTICATED")
    ctx.fresh_session_works("an anonymous stream")


# --------------------------------------------------------------------------- binding declarations


def _probe_vectorised(ctx: Context) -> str:
    if ctx.capacity < 2:
        return "not probed (capacity 1)"
    s = ctx.wire.session()
    try:
        expect_ok(s.handshake(num_envs=2), "handshake", "a handshake with num_envs 2 (max_num_envs >= 2)")
    finally:
        s.shutdown()
    return "a vectorised session of 2 opened"


def _probe_tasks(ctx: Context) -> str:
    s = ctx.session()
    try:
        expect_ok(s.exchange(s.request(list_tasks=task_pb2.ListTasksRequest(limit=1))), "list_tasks", "list_tasks")
    finally:
        s.shutdown()
    return "list_tasks answered"


def _probe_load(ctx: Context) -> str:
    try:
        ctx.grpc_wire().get_load()
    except grpc.aio.AioRpcError as e:
        raise Violation(f"load_reporting is set but GetLoad failed: {e.code().name}: {e.details()}") from None
    return "GetLoad answered"


def _probe_resume(ctx: Context) -> str:
    s = ctx.wire.session()
    try:
        hs = pb.HandshakeRequest(protocol_version=PROTOCOL_VERSION, client_name="openenv-certify", resumable=True)
        answer = expect_ok(s.exchange(s.request(handshake=hs)), "handshake", "a resumable handshake")
        s.opened = True
        if not answer.resume_token:
            raise Violation("resume_grace is advertised but a resumable handshake returned no resume_token")
    finally:
        s.shutdown()
    return "a resumable handshake returned a resume token"


def _probe_snapshots(ctx: Context) -> str:
    if not ctx.spec.sim:
        return "not probed (tools-only: no episode to snapshot)"
    s, _ = ctx.episode()
    try:
        expect_ok(s.exchange(s.request(snapshot=pb.SnapshotRequest())), "snapshot", "a snapshot after reset")
    finally:
        s.shutdown()
    return "a snapshot answered"


def _probe_pipelined(ctx: Context) -> str:
    s = ctx.session()
    try:
        read = {"state": pb.StateRequest()} if ctx.spec.sim else {"list_tools": tool_pb2.ListToolsRequest()}
        msg = pb.SessionRequest(request_id=4100)
        msg.pipelined.requests.add(request_id=4101, **read)
        if not s.send(msg):
            raise Violation("the stream did not accept a pipelined message")
        resp = expect_response(s.recv(), "pipelined", "a pipelined message of one request")
        if [r.request_id for r in resp.pipelined.responses] != [4101]:
            raise Violation(f"a pipelined message of one request was answered with {describe(resp)}")
    finally:
        s.shutdown()
    return "a pipelined message answered"


#: The request each advertised feature is probed with ("does", beyond "advertises"); the level
#: checks of the feature (protocol.load, protocol.pipelined_messages, vector.*, sessions.*)
#: hold it to its rules.
_PROBES: dict[str, Any] = {
    "vectorised_sessions": _probe_vectorised,
    "tasks": _probe_tasks,
    "server_load": _probe_load,
    "resume": _probe_resume,
    "snapshots": _probe_snapshots,
    "pipelined_messages": _probe_pipelined,
}


@check(
    "protocol.declaration",
    "The binding's declaration (--declaration FILE) matches the server: the same protocol version; every "
    "feature the server advertises is declared and answers its request; the transport is declared",
    "docs/bindings.md (What each binding implements); docs/protocol.md §10 (features by minor version)",
    requires=(GRPC,),
    why="gRPC only: the features are probed with requests of the gRPC stream",
)
def declaration(ctx: Context) -> str:
    decl = ctx.options.declaration
    if decl is None:
        raise CheckSkipped("no binding declaration given (openenv certify --declaration FILE)")
    judged = compare(ctx.info, decl, ctx.transport)
    if judged.problems:
        raise Violation("; ".join(judged.problems))
    probe_notes = []
    for f in judged.advertised:
        probe = _PROBES.get(f)
        probe_notes.append(f"{f}: {probe(ctx) if probe else 'advertised'}")
    note = "; ".join(probe_notes)
    if judged.silent:
        note += f"; declared, not offered by this server or environment (not verified): {', '.join(judged.silent)}"
    note += "; TLS is not verified (the certifier speaks plaintext)"
    if judged.ahead:
        raise CheckWarning(
            f"protocol {decl.protocol_version} advertises features of later minors ({', '.join(judged.ahead)}): a "
            f"client following docs/protocol.md §10 does not use them; {note}"
        )
    return note
