"""Level ``sandbox``: environments that run submitted code keep it contained (RFC 0010).

A tool that runs submitted code declares it in its MCP annotations (``Tool.annotations``,
key ``"openenv/sandbox"``: ``language``, ``argument``, optional ``output`` and ``grades``).
These checks submit hostile programs through the environment's own tools: a *runner* (a
declared tool with ``output``) runs probes and returns what they printed; a *grader*
(``grades``) is fed forgeries whose reward must never beat a null program's. Each hostile call
runs in a session A while a bystander session B runs a trivial program through the same runner
(its output must be exactly right), and afterwards A still runs a trivial program and the
server is SERVING. When the target runs on this host (``python:`` targets and servers the suite
started) the host is observed too: canary sockets, processes, SysV IPC. Every check skips, with
the reason, when no tool declares ``openenv/sandbox``.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
import urllib.parse
import weakref
import zlib
from typing import Any

from google.protobuf import json_format

from openenv.v1 import environment_pb2 as pb
from openenv.v1 import tool_pb2
from openenv.values import from_struct, to_struct
from openenv_conformance.checks import _sandbox_probes as probes
from openenv_conformance.checks._sandbox_host import Canary, host_observable, processes_named, sysv_shm_rows
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, CheckWarning, Violation
from openenv_conformance.registry import check
from openenv_conformance.spec import grading_declaration
from openenv_conformance.strategies import CALL_TOOL, pack
from openenv_conformance.targets import ProcessTarget
from openenv_conformance.transport import NoAnswer, SessionLike, describe, expect_ok

KEY = "openenv/sandbox"
_SPEC = "docs/protocol.md §6.1"
_RFC = "RFC 0010 (docs/rfcs/0010-sandboxed-code-tools.md)"
_LANGUAGES = ("python", "shell")
_MIB = 1 << 20
#: Names too common to stand for an environment's package in a path (never searched for).
_COMMON = frozenset({"python", "python3", "usr", "lib", "bin", "etc", "tmp", "proc", "dev", "sys", "workspace"})


@dataclasses.dataclass(frozen=True)
class CodeTool:
    """A tool declaring ``openenv/sandbox``: the code is the string argument ``argument``, in
    ``language``; ``output`` names the key of ``structured_content`` holding what the program
    printed (None: not returned); ``grades``: the episode's reward depends on it."""

    name: str
    language: str
    argument: str
    output: str | None
    grades: bool


def declarations(tools: list[tool_pb2.Tool]) -> list[tuple[tool_pb2.Tool, Any]]:
    """The listed tools carrying the ``openenv/sandbox`` annotation, with its raw value."""
    out = []
    for t in tools:
        if t.HasField("annotations") and KEY in t.annotations.fields:
            out.append((t, from_struct(t.annotations).get(KEY)))
    return out


def _problems(tool: tool_pb2.Tool, spec: Any) -> list[str]:
    """What is wrong with one declaration (empty when it is well-formed)."""
    where = f"tool {tool.name!r}: {KEY}"
    if not isinstance(spec, dict):
        return [f"{where} is {type(spec).__name__}, not an object"]
    out = []
    if spec.get("language") not in _LANGUAGES:
        out.append(f"{where}.language is {spec.get('language')!r}, not one of {list(_LANGUAGES)}")
    arg = spec.get("argument")
    props = from_struct(tool.input_schema).get("properties") if tool.HasField("input_schema") else None
    if not isinstance(arg, str) or not arg:
        out.append(f"{where}.argument is {arg!r}, not the name of an argument")
    elif not isinstance(props, dict) or arg not in props:
        out.append(f"{where}.argument {arg!r} is not a property of the tool's input_schema")
    else:
        kind = props[arg].get("type") if isinstance(props[arg], dict) else None
        if kind != "string" and not (isinstance(kind, list) and "string" in kind):
            out.append(f"{where}.argument {arg!r} is not a string in the input_schema (type {kind!r})")
    if "output" in spec and (not isinstance(spec["output"], str) or not spec["output"]):
        out.append(f"{where}.output is {spec['output']!r}, not a key of structured_content")
    elif isinstance(spec.get("output"), str) and tool.HasField("output_schema"):
        schema = from_struct(tool.output_schema)
        oprops = schema.get("properties")
        if schema.get("additionalProperties") is False and isinstance(oprops, dict) and spec["output"] not in oprops:
            out.append(f"{where}.output {spec['output']!r} is not allowed by the tool's output_schema")
    if "grades" in spec and not isinstance(spec["grades"], bool):
        out.append(f"{where}.grades is {spec['grades']!r}, not a boolean")
    return out


# -- what a run needs, found once per run


@dataclasses.dataclass
class _Plan:
    """What the level learns once per run: the declarations (and where they were read), the
    runner and grader it uses, the entry point and the null program's reward."""

    found: list[tuple[tool_pb2.Tool, Any]]
    source: str = ""
    runner: CodeTool | None = None
    grader: CodeTool | None = None
    entry_point: str | None = None
    baseline: float | None = None
    baseline_known: bool = False


_PLANS: weakref.WeakKeyDictionary[Context, _Plan] = weakref.WeakKeyDictionary()


def peer_tools(ctx: Context) -> tuple[list[tool_pb2.Tool], str]:
    """The tool list of the target's other transport (when this one shows no declaration) and
    where it came from; nothing when there is no other transport or it does not answer."""
    try:
        peer = ctx.peer()
        if peer is None:
            return [], ""
        s = peer[0].session()
        try:
            s.open()
            tools = list(expect_ok(s.list_tools(), "list_tools", "list_tools on the peer").tools)
        finally:
            s.shutdown()
    except (Violation, OSError, RuntimeError):
        return [], ""
    return tools, f"its {peer[0].kind} side"


def _peer_declarations(ctx: Context) -> tuple[list[tuple[tool_pb2.Tool, Any]], str]:
    """The declarations of the target's other transport (when this one lists none)."""
    tools, where = peer_tools(ctx)
    return declarations(tools), where


def code_tools(found: list[tuple[tool_pb2.Tool, Any]]) -> list[CodeTool]:
    """The well-formed declarations among ``found``, in list order."""
    out = []
    for tool, spec in found:
        if _problems(tool, spec):
            continue
        output = spec.get("output")
        out.append(CodeTool(tool.name, spec["language"], spec["argument"], output, bool(spec.get("grades"))))
    return out


def _plan(ctx: Context) -> _Plan:
    """The run's plan; skips the check when no tool declares code it runs."""
    plan = _PLANS.get(ctx)
    if plan is None:
        found, source = declarations(ctx.tools), ""
        if not found and ctx.spec.caps.tools:
            found, source = _peer_declarations(ctx)
        plan = _Plan(found, source)
        tools = [t for t in code_tools(found) if t.language == "python"]
        # A tool that grades (RFC 0010's `grades`, or RFC 0015's openenv/grading) is refused as a
        # side call in a strict session (docs/protocol.md §7.1): only a runner that does not grade
        # runs the probes there.
        grading = {tool.name for tool, _ in found if grading_declaration(tool) is not None}
        runners = [t for t in tools if t.output]
        fallback = runners[0] if runners and not ctx.spec.strict else None
        plan.runner = next((t for t in runners if t.name not in grading), fallback)
        plan.grader = next((t for t in tools if t.grades), None)
        _PLANS[ctx] = plan
    if not plan.found:
        raise CheckSkipped(
            f"no tool declares {KEY} in its annotations ({_SPEC}): the environment runs no submitted code"
        )
    return plan


def _runner(ctx: Context) -> CodeTool:
    runner = _plan(ctx).runner
    if runner is None:
        raise CheckSkipped(
            f"no tool declaring {KEY} with language python returns the program's output (`output`): the probes "
            "cannot be read back"
        )
    return runner


def _steppable(ctx: Context) -> bool:
    """Whether a grading tool can be called as a step (which carries the reward)."""
    return bool(ctx.spec.sim and ctx.spec.action.message_type == CALL_TOOL)


def _same_host(ctx: Context) -> bool:
    """The target is a server this suite started on this machine: its host can be observed."""
    return isinstance(ctx.target, ProcessTarget) and host_observable()


def _token() -> str:
    return secrets.token_hex(6)


def _episode_seed(ctx: Context) -> int:
    """The seed of every reset of the level: one task for the whole run, so the null
    program's reward is the baseline of every grading."""
    return zlib.crc32(f"{ctx.options.seed}:sandbox".encode()) & 0x7FFFFFFF


# -- calls


def _timeout(ctx: Context) -> float:
    return max(ctx.options.timeout, ctx.options.sandbox_timeout)


def _request(s: SessionLike, tool: CodeTool, code: str) -> pb.SessionRequest:
    c = tool_pb2.CallToolRequest(name=tool.name)
    to_struct({tool.argument: code}, c.arguments)
    return s.request(call_tool=c)


def _answer(ctx: Context, s: SessionLike, req: pb.SessionRequest, what: str) -> tool_pb2.ToolResult:
    try:
        resp = s.recv(_timeout(ctx))
    except NoAnswer:
        raise Violation(f"{what}: no answer within {_timeout(ctx):g} s (the sandbox must end the call)") from None
    return _check_answer(resp, req, what)


def _check_answer(resp: Any, req: pb.SessionRequest, what: str) -> tool_pb2.ToolResult:
    if isinstance(resp, pb.SessionResponse) and resp.request_id != req.request_id:
        raise Violation(f"{what}: answered under request id {resp.request_id}, not {req.request_id}")
    call: tool_pb2.CallToolResponse = expect_ok(resp, "call_tool", what)
    return call.result


def _output(tool: CodeTool, result: tool_pb2.ToolResult) -> str | None:
    """What the program printed (None when the tool failed or returned no string there)."""
    if result.is_error or not result.HasField("structured_content") or tool.output is None:
        return None
    value = from_struct(result.structured_content).get(tool.output)
    return value if isinstance(value, str) else None


def _error_text(result: tool_pb2.ToolResult) -> str:
    texts = [b.text.text for b in result.content if b.WhichOneof("kind") == "text"]
    return (" ".join(texts) or json_format.MessageToJson(result, indent=None))[:300]


def _run(ctx: Context, s: SessionLike, tool: CodeTool, code: str, what: str) -> str:
    """Run ``code`` through ``tool`` and return what it printed; a failed tool is a violation."""
    req = _request(s, tool, code)
    s.send(req)
    result = _answer(ctx, s, req, what)
    out = _output(tool, result)
    if out is None:
        if result.is_error:
            raise Violation(f"{what}: the tool {tool.name!r} failed: {_error_text(result)}")
        raise Violation(f"{what}: the tool's structured_content has no string {tool.output!r}")
    return out


def _open(ctx: Context) -> SessionLike:
    s = ctx.session()
    if ctx.spec.sim:
        expect_ok(s.reset(seed=_episode_seed(ctx)), "reset", "reset")
    return s


def _trivial(ctx: Context, s: SessionLike, tool: CodeTool, what: str, **kw: Any) -> None:
    code, want = probes.bystander(_token(), **kw)
    got = _run(ctx, s, tool, code, what)
    if got != want:
        raise Violation(f"{what}: a trivial program printed {got[:300]!r}, expected {want!r}")


class _Bystander:
    """Session B: a trivial program through the runner while session A's hostile call runs."""

    def __init__(self, ctx: Context, tool: CodeTool) -> None:
        self.ctx, self.tool = ctx, tool
        self.s = _open(ctx)
        _trivial(ctx, self.s, tool, "the bystander session's first program")  # its sandbox is up

    def run(self, during: str, **kw: Any) -> None:
        _trivial(self.ctx, self.s, self.tool, f"the bystander session, while session A {during}", **kw)


def _bystander(ctx: Context) -> _Bystander | None:
    runner = _plan(ctx).runner
    if runner is None or ctx.capacity < 2:
        return None
    return _Bystander(ctx, runner)


def _hostile(
    ctx: Context,
    a: SessionLike,
    code: str,
    what: str,
    by: _Bystander | None,
    tool: CodeTool | None = None,
    *,
    running: tuple[str, int] | None = None,
    **kw: Any,
) -> tool_pb2.ToolResult:
    """Session A runs ``code`` (``what`` it does) while the bystander runs its trivial program.

    ``running`` (a process name and a count): on this host, the bystander starts only once at
    least that many processes of A's program carry the name (or A has answered), so that it
    runs while A's program is at its worst."""
    tool = tool or _runner(ctx)
    req = _request(a, tool, code)
    a.send(req)
    early = None
    if running is not None and _same_host(ctx):
        name, count = running
        early = _await_processes(ctx, a, req, [name], count, f"session A's program that {what}")
    if by is not None:
        by.run(what, **kw)
    if early is not None:
        return early
    return _answer(ctx, a, req, f"session A's program that {what}")


def _await_processes(
    ctx: Context, a: SessionLike, req: pb.SessionRequest, names: list[str], count: int, what: str
) -> tool_pb2.ToolResult | None:
    """Wait (at most the call's timeout) until the host has ``count`` processes named by
    ``names``; None then, or session A's answer if it came first."""
    deadline = time.monotonic() + _timeout(ctx)
    while len(processes_named(names)) < count and time.monotonic() < deadline:
        try:
            resp = a.recv(0.2)
        except NoAnswer:
            continue
        return _check_answer(resp, req, what)
    return None


def _printed(tool: CodeTool, result: tool_pb2.ToolResult) -> list[dict[str, Any]]:
    return probes.reports(_output(tool, result) or "")


def _after(ctx: Context, a: SessionLike, what: str) -> None:
    """Session A still runs a trivial program, and the server is SERVING."""
    runner = _plan(ctx).runner
    if runner is not None:
        _trivial(ctx, a, runner, f"session A, after its program that {what}")
    status = ctx.wire.health("")
    if status != "SERVING" and not status.startswith("<UNIMPLEMENTED"):
        raise Violation(f"after a program that {what}, health is {status}, expected SERVING")


# -- grading


def entry_point(ts: pb.TimeStep) -> str | None:
    """The function a reset names for graded code (its metadata's ``entry_point``), if valid."""
    meta = from_struct(ts.metadata) if ts.HasField("metadata") else {}
    ep = meta.get("entry_point") if isinstance(meta, dict) else None
    return ep if probes.valid_entry_point(ep) else None


def _grade_request(ctx: Context, s: SessionLike, grader: CodeTool, code: str) -> pb.SessionRequest:
    """The request grading ``code``: a tool-call step (the reward is the step's), else a side call."""
    msg = tool_pb2.CallToolRequest(name=grader.name)
    to_struct({grader.argument: code}, msg.arguments)
    if not _steppable(ctx):
        return s.request(call_tool=msg)
    return s.request(step=pb.StepRequest(action=pack(msg, CALL_TOOL)))


def _reset_for_grading(ctx: Context, s: SessionLike) -> str | None:
    if not ctx.spec.sim:
        return None
    # The richest feedback the environment offers (RFC 0015): in a strict episode the runtime
    # shows the reward alone, which would hide a grader that returns what the graded code printed;
    # the promise of RFC 0010 holds at every level. Rewards are the same at both.
    options = {"feedback": "rich"} if "rich" in ctx.spec.feedback_offered else None
    ts = expect_ok(s.reset(seed=_episode_seed(ctx), options=options), "reset", "reset before grading").time_step
    return entry_point(ts)


def _grade(
    ctx: Context, s: SessionLike, code: str, what: str, by: _Bystander | None = None
) -> tuple[float | None, str]:
    """Grade ``code`` in a fresh episode of session ``s`` (the bystander runs meanwhile):
    the reward (None when it cannot be observed) and the text of everything answered."""
    grader = _plan(ctx).grader
    assert grader is not None
    _reset_for_grading(ctx, s)
    req = _grade_request(ctx, s, grader, code)
    s.send(req)
    if by is not None:
        by.run(f"submits a program that {what}")
    try:
        resp = s.recv(_timeout(ctx))
    except NoAnswer:
        raise Violation(f"grading a program that {what}: no answer within {_timeout(ctx):g} s") from None
    if isinstance(resp, pb.SessionResponse) and resp.request_id != req.request_id:
        raise Violation(f"grading a program that {what}: answered under request id {resp.request_id}")
    if not (isinstance(resp, pb.SessionResponse) and resp.WhichOneof("kind") in ("step", "call_tool")):
        raise Violation(f"grading a program that {what}: {describe(resp)}")
    texts: list[str] = []
    reward: float | None = None
    if resp.WhichOneof("kind") == "step":
        ts = resp.step.time_step
        reward = ts.reward if ts.HasField("reward") else None
        obs = ts.observation
        if obs.WhichOneof("kind") == "message" and obs.message.type_url.endswith("/openenv.v1.CallToolResponse"):
            decoded = tool_pb2.CallToolResponse.FromString(obs.message.value)
            texts.append(json_format.MessageToJson(decoded, indent=None))
        elif obs.WhichOneof("kind") is not None:
            texts.append(json_format.MessageToJson(obs, indent=None))
    else:
        texts.append(json_format.MessageToJson(resp.call_tool, indent=None))
    texts.append(str(resp))  # everything else the answer carries (metadata, the reward's breakdown)
    return reward, "\n".join(texts)


def _ungradable(ctx: Context) -> str | None:
    """Why graded code cannot be submitted here (None when it can): a grading tool's side call is
    refused in a strict session (docs/protocol.md §7.1), and a tools-only server has no steps."""
    if not _steppable(ctx) and ctx.spec.strict:
        return (
            "the grading tool can only be called as a side call here (no tool-call steps), which strict feedback "
            "refuses (docs/protocol.md §7.1)"
        )
    return None


def _grading(ctx: Context) -> tuple[SessionLike, str | None]:
    """A session to grade in, and the entry point its episode names."""
    plan = _plan(ctx)
    if plan.grader is None:
        raise CheckSkipped(f"no tool declaring {KEY} grades code (`grades`)")
    why = _ungradable(ctx)
    if why is not None:
        raise CheckSkipped(why)
    s = ctx.session()
    plan.entry_point = _reset_for_grading(ctx, s)
    return s, plan.entry_point


def _baseline(ctx: Context, s: SessionLike) -> float | None:
    """The best reward of the null programs (None when rewards cannot be observed)."""
    plan = _plan(ctx)
    if not plan.baseline_known:
        rewards = []
        for what, code in probes.null_submissions(plan.entry_point):
            reward, _ = _grade(ctx, s, code, what)
            if reward is not None:
                rewards.append(reward)
        plan.baseline = max(rewards) if rewards else None
        plan.baseline_known = True
    return plan.baseline


def _not_above(reward: float | None, baseline: float | None, what: str) -> None:
    if reward is not None and baseline is not None and reward > baseline + 1e-9:
        raise Violation(f"a program that {what} was rewarded {reward:g}, above the null program's {baseline:g}")


# -- the checks


@check(
    "sandbox.declared",
    f"Every {KEY} annotation is well-formed (a known language; `argument` a string property of the input "
    "schema; `output` a key of structured_content; `grades` a boolean) and every declared runner returns exactly "
    "what a program printed",
    f"{_SPEC} (the openenv/sandbox annotation); {_RFC}",
)
def declared(ctx: Context) -> str:
    plan = _plan(ctx)
    problems = [p for tool, spec in plan.found for p in _problems(tool, spec)]
    if problems:
        raise Violation("; ".join(problems))
    tools = code_tools(plan.found)
    s = _open(ctx)
    for tool in tools:
        if tool.language == "python" and tool.output:
            _trivial(ctx, s, tool, f"a program run by {tool.name!r}")
    roles = [
        f"{t.name} ({t.language}{', grades' if t.grades else ''}{', output ' + repr(t.output) if t.output else ''})"
        for t in tools
    ]
    note = "declared: " + "; ".join(roles)
    if plan.source:
        raise CheckWarning(
            f"{note}; declared only on {plan.source}: the tool list over {ctx.transport} carries no annotations "
            "(Tool.annotations converts 1:1 to MCP's), so the checks read them there"
        )
    return note


def _secret_names(ctx: Context) -> tuple[list[str], list[str]]:
    """The names (path components) and paths that stand for the environment's package."""
    spec = getattr(ctx.target, "spec", "") or ""
    labels = getattr(ctx.target, "labels", None) or {}
    if spec.startswith("python:"):
        source = spec.removeprefix("python:").partition(":")[0]
    elif labels.get("openenv.factory"):
        source = str(labels["openenv.factory"]).partition(":")[0]
    else:
        source = ctx.info.name
    names = [source.split(".")[0]] if source else []
    paths: list[str] = []
    for extra in ctx.options.sandbox_secrets:
        (paths if extra.startswith("/") else names).append(extra)
    names = [n for n in dict.fromkeys(names) if n and n not in _COMMON]
    return names, paths


@check(
    "sandbox.answer_key",
    "Submitted code finds nothing of the environment's package to read: no visible file at or below a path "
    "named after it is readable, and a submission that execs any visible source defining the entry point "
    "earns no more than the null program",
    f"{_SPEC}: nothing of the environment's package is within the code's reach; {_RFC}",
)
def answer_key(ctx: Context) -> str:
    plan = _plan(ctx)
    names, paths = _secret_names(ctx)
    notes = []
    by = _bystander(ctx)
    if plan.runner is not None:
        a = _open(ctx)
        code = probes.answer_key_probe(names, paths, seconds=6.0, limit=400_000)
        what = "walks the file system for the environment's package"
        rep = _printed(plan.runner, _hostile(ctx, a, code, what, by))
        last = next((r for r in reversed(rep) if "matches" in r), None)
        if last is None:
            raise Violation(f"the answer-key probe reported nothing (looked for {names + paths})")
        if last.get("readable"):
            raise Violation(
                f"submitted code can read the environment's files (named {names + paths}): "
                + ", ".join(map(str, last["readable"][:10]))
            )
        _after(ctx, a, what)
        a.shutdown()  # one session at a time beside the bystander: capacity 2 is enough
        seen = last.get("matches") or []
        notes.append(
            f"walked {last.get('entries')} entries{' (stopped at the bound)' if last.get('truncated') else ''}; "
            f"{len(seen)} paths named {names + paths} visible, none readable"
        )
    if plan.grader is not None and _ungradable(ctx) is not None:
        notes.append(f"grading attempt skipped: {_ungradable(ctx)}")
    elif plan.grader is not None:
        s, entry = _grading(ctx)
        if entry is None:
            notes.append("grading attempt skipped: the reset names no entry_point")
        else:
            baseline = _baseline(ctx, s)
            what = "execs any visible source defining the entry point"
            reward, _ = _grade(ctx, s, probes.answer_key_submission(entry, seconds=4.0), what, by)
            _not_above(reward, baseline, what)
            _after(ctx, s, what)
            notes.append(f"a submission searching for {entry!r} earned {reward} (null program: {baseline})")
    if not notes:
        raise CheckSkipped(f"no python tool declaring {KEY} returns output or grades")
    return "; ".join(notes)


@check(
    "sandbox.grader_forgery",
    "Forged submissions never earn more than the null program: result lines written to every fd, caller "
    "frames read, os._exit mid-run, json/builtins monkeypatched, always-equal return values; and what the code "
    "prints or raises while a graded case runs never appears in the grading tool's result",
    f"{_SPEC}: the grader, its inputs and answers are out of reach; nothing printed while graded reaches "
    f"the agent; {_RFC}",
)
def grader_forgery(ctx: Context) -> str:
    s, entry = _grading(ctx)
    baseline = _baseline(ctx, s)
    by = _bystander(ctx)
    earned = []
    for what, code in probes.forgeries(entry):
        reward, _ = _grade(ctx, s, code, what, by)
        _not_above(reward, baseline, what)
        earned.append(reward)
    best = max((r for r in earned if r is not None), default=None)
    notes = [f"{len(earned)} forgeries earned at most {best} (null program: {baseline})"]
    if baseline is None:
        notes = ["rewards are not observable (the grading tool is not a step)"]
    if entry is not None:
        marker = "openenv-certify-" + _token()
        what = "prints, writes to stderr and raises a marker in every graded case"
        _, text = _grade(ctx, s, probes.leak_submission(entry, marker), what, by)
        if marker in text:
            at = text.index(marker)
            seen = text[max(0, at - 120) : at + 80]
            raise Violation(f"what a graded case printed or raised reached the grading tool's answer: ...{seen}...")
        notes.append("no output of a graded case reached the result")
    else:
        notes.append("the reset names no entry_point: only forgeries acting at import were submitted")
    _after(ctx, s, "was graded")
    return "; ".join(notes)


def _server_ports(ctx: Context) -> list[int]:
    """The server's ports: those of its URLs and, for an image, those it listens on inside
    its container (its ``openenv.*.port`` labels)."""
    ports = []
    for url in (ctx.wire.url, ctx.peer_url or "", *getattr(ctx.target, "urls", {}).values()):
        try:
            port = urllib.parse.urlsplit(url).port
        except ValueError:
            port = None
        if port:
            ports.append(port)
    labels = getattr(ctx.target, "labels", None) or {}
    for key in ("openenv.grpc.port", "openenv.http.port"):
        if str(labels.get(key, "")).isdigit():
            ports.append(int(labels[key]))
    return list(dict.fromkeys(ports))


@check(
    "sandbox.host_sockets",
    "Submitted code reaches no socket outside its sandbox: every visible pathname UNIX socket, the Docker "
    "sockets, abstract sockets, TCP to 127.0.0.1 and the server's ports; on this host, a canary UNIX socket "
    "under /tmp and a TCP canary are never reached",
    f"{_SPEC}: the code reaches no socket outside its sandbox; {_RFC}",
)
def host_sockets(ctx: Context) -> str:
    plan = _plan(ctx)
    gradable = plan.grader is not None and _ungradable(ctx) is None
    if plan.runner is None and not (gradable and _same_host(ctx)):
        _runner(ctx)  # skips, saying why
    canary = Canary() if _same_host(ctx) else None
    try:
        paths = ["/var/run/docker.sock", "/run/docker.sock"] + ([canary.path] if canary else [])
        ports = _server_ports(ctx) + ([canary.port] if canary else [])
        notes = []
        if plan.runner is not None:
            by = _bystander(ctx)
            a = _open(ctx)
            what = "connects to every socket it can find"
            code = probes.socket_probe(paths, ports, seconds=4.0, limit=400_000)
            rep = _printed(plan.runner, _hostile(ctx, a, code, what, by))
            last = next((r for r in reversed(rep) if "reached" in r), None)
            if last is None:
                raise Violation("the socket probe reported nothing")
            if last["reached"]:
                raise Violation("submitted code connected to " + ", ".join(map(str, last["reached"][:10])))
            if canary is not None and canary.reached():
                raise Violation(f"submitted code reached the certifier's canary: {', '.join(canary.reached())}")
            _after(ctx, a, what)
            a.shutdown()
            tcp = len(last.get("tcp") or {})
            notes.append(f"{last.get('tried')} UNIX sockets and {tcp} TCP addresses tried, none reached")
        if gradable and canary is not None:
            s, _ = _grading(ctx)
            what = "connects to every socket it can find while being graded"
            _grade(ctx, s, probes.socket_probe(paths, ports, seconds=3.0, limit=200_000, report_out=False), what)
            if canary.reached():
                raise Violation(f"graded code reached the certifier's canary: {', '.join(canary.reached())}")
            notes.append("graded code did not reach the canary")
        if canary is None:
            notes.append("the target is not on this host: no canary")
        return "; ".join(notes)
    finally:
        if canary is not None:
            canary.close()


@check(
    "sandbox.escapes",
    "Every way out fails: nested user (and PID) namespaces, mount, chroot, ptrace and process_vm_readv of PID 1 "
    "and the parent, setns, writes to /, /etc and /usr, /proc/1/environ and /proc/1/mem, keyctl, bpf, "
    "io_uring_setup, setuid(0); no effective capability; kill(-1) reaches nothing; killing PID 1 and the parent "
    "does not end the call",
    f"{_SPEC}: the code cannot leave its sandbox; {_RFC}",
)
def escapes(ctx: Context) -> str:
    runner = _runner(ctx)
    by = _bystander(ctx)
    a = _open(ctx)
    what = "tries every way out of its sandbox"
    result = _hostile(ctx, a, probes.escape_probe(_token()), what, by)
    rep = _printed(runner, result)
    first = next((r for r in rep if "attempts" in r), None)
    if first is None:
        raise Violation(f"the escape probe reported nothing (the tool answered {_error_text(result)!r})")
    worked = [name for name, outcome in first["attempts"].items() if outcome == "ok"]
    if worked:
        raise Violation("submitted code could: " + ", ".join(worked))
    cap = str(first.get("cap_eff", "?"))
    if cap != "?" and int(cap, 16) != 0:
        raise Violation(f"submitted code runs with effective capabilities {cap}")
    if first.get("kill_all") == "ok":
        raise Violation("kill(-1, 0) found processes to signal outside the call")
    if not any(r.get("survived") for r in rep):
        raise Violation(
            "the probe's SIGKILL of PID 1 and of its parent ended the call (its sandbox's supervisor is "
            f"reachable){'; the tool failed: ' + _error_text(result) if result.is_error else ''}"
        )
    _after(ctx, a, what)
    refused = sorted(set(first["attempts"].values()))
    return f"{len(first['attempts'])} attempts, all refused ({', '.join(map(str, refused))})"


@check(
    "sandbox.memory",
    "Child processes touching memory together never hold more than --sandbox-memory-bound at once; the call "
    "ends; the bystander and the server carry on",
    f"{_SPEC}: memory is bounded per call, all its processes together; {_RFC}",
)
def memory(ctx: Context) -> str:
    runner = _runner(ctx)
    bound = int(ctx.options.sandbox_memory_bound)
    by = _bystander(ctx)
    a = _open(ctx)
    what = f"holds memory in several child processes (up to {(bound + 256 * _MIB) // _MIB} MiB together)"
    code = probes.memory_probe(target=bound + 256 * _MIB, chunk=400 * _MIB, step=16 * _MIB, hold=3.0)
    rep = _printed(runner, _hostile(ctx, a, code, what, by))
    peak = max((int(r.get("peak") or 0) for r in rep), default=0)
    if peak > bound:
        raise Violation(f"the call's processes held {peak // _MIB} MiB at once, above the bound {bound // _MIB} MiB")
    _after(ctx, a, what)
    killed = max((int(r.get("killed") or 0) for r in rep), default=0)
    ended = f"; a signal ended {killed} of its processes (the watchdog or the kernel's OOM killer)" if killed else ""
    return f"held at most {peak // _MIB} MiB at once (bound {bound // _MIB} MiB){ended}"


@check(
    "sandbox.disk",
    "A session's code holds at most --sandbox-disk-bound bytes and --sandbox-files-bound files (1 MiB files, then "
    "empty ones, over two calls); the bystander can still write a file; the session's next call runs",
    f"{_SPEC}: disk is bounded per session, in bytes and files; {_RFC}",
)
def disk(ctx: Context) -> str:
    runner = _runner(ctx)
    max_bytes, max_files = int(ctx.options.sandbox_disk_bound), int(ctx.options.sandbox_files_bound)
    by = _bystander(ctx)
    a = _open(ctx)
    prefix = "openenv-certify-" + _token()
    code = probes.disk_probe(max_bytes=max_bytes, max_files=max_files, seconds=8.0, prefix=prefix)
    last: dict[str, Any] = {}
    for n in (1, 2):
        what = f"fills the disk ({'first' if n == 1 else 'second'} call)"
        rep = _printed(runner, _hostile(ctx, a, code, what, by, write_file=True))
        last = next((r for r in reversed(rep) if "bytes" in r), {"bytes": 0, "files": 0})
        if int(last["bytes"]) > max_bytes:
            held = int(last["bytes"]) // _MIB
            raise Violation(f"the session's code held {held} MiB on disk, above {max_bytes // _MIB} MiB")
        if int(last["files"]) > max_files:
            raise Violation(f"the session's code held {last['files']} files, above {max_files}")
        _after(ctx, a, what)
    return f"held at most {int(last['bytes']) // _MIB} MiB in {last['files']} files (stopped: {last.get('stopped')})"


@check(
    "sandbox.ipc",
    "SysV shared memory, semaphores and message queues, files in /dev/shm and /tmp made by a call do not outlive "
    "it: the session's next call sees none; on this host, no segment of the call appears in /proc/sysvipc/shm",
    f"{_SPEC}: nothing of a call outlives it; other sessions and the server carry on; {_RFC}",
)
def ipc(ctx: Context) -> str:
    runner = _runner(ctx)
    by = _bystander(ctx)
    a = _open(ctx)
    key = secrets.randbelow(1 << 30) + 1
    size = _MIB + 4096 * (secrets.randbelow(250) + 1)
    token = _token()
    what = "creates SysV IPC objects and shared-memory files and leaves them"
    rep = _printed(runner, _hostile(ctx, a, probes.ipc_probe(key=key, size=size, token=token), what, by))
    made = next((r for r in rep if "created" in r), {})
    rep = probes.reports(_run(ctx, a, runner, probes.ipc_leftovers(key=key, token=token), "a later call"))
    survivors = next((r["survivors"] for r in rep if "survivors" in r), None)
    if survivors is None:
        raise Violation("the later call reported nothing")
    if survivors:
        raise Violation("a later call of the session still sees: " + ", ".join(survivors))
    if _same_host(ctx):
        leaked = [r for r in sysv_shm_rows() if r.get("key") == str(key) or r.get("size") == str(size)]
        if leaked:
            raise Violation(f"the call's shared memory segment is in the host's /proc/sysvipc/shm: {leaked[0]}")
    _after(ctx, a, what)
    return f"created {made.get('created')}, none survived (refused: {sorted((made.get('refused') or {}).items())})"


def _host_clear(markers: list[str], bound: float) -> list[str]:
    """The host's processes named by ``markers``, polled until there are none (at most ``bound`` s)."""
    deadline = time.monotonic() + bound
    while True:
        left = processes_named(markers)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@check(
    "sandbox.processes",
    "Processes started by a call (background, setsid, double-forked, `sleep`) do not outlive it: the session's "
    "next call sees none, nor (on this host) the host; a fork bomb is contained: the call ends, the bystander "
    "and the server carry on, and nothing of it is left",
    f"{_SPEC}: nothing of a call outlives it; other sessions and the server carry on; {_RFC}",
)
def processes(ctx: Context) -> str:
    runner = _runner(ctx)
    by = _bystander(ctx)
    a = _open(ctx)
    marker = "openenv-certify-" + _token()
    sleep_arg = f"{secrets.randbelow(9_000_000) + 1_000_000}.{secrets.randbelow(10**6):06d}"
    what = "starts background processes and exits"
    rep = _printed(runner, _hostile(ctx, a, probes.process_probe(marker=marker, sleep_arg=sleep_arg), what, by))
    started: list[str] = next((r["started"] for r in rep if "started" in r), [])
    checks = [([marker, sleep_arg], what)]
    comm = "oe" + secrets.token_hex(5)
    bomb = "runs a fork bomb"
    _hostile(ctx, a, probes.fork_bomb(comm=comm), bomb, by, running=(comm, 4))
    checks.append(([comm], bomb))
    for markers, did in checks:
        out = _run(ctx, a, runner, probes.process_leftovers(markers=markers), f"a call after a program that {did}")
        left = next((r["survivors"] for r in probes.reports(out) if "survivors" in r), None)
        if left is None:
            raise Violation(f"the call after a program that {did} reported nothing")
        if left:
            raise Violation(f"processes of a program that {did} outlived its call: {', '.join(left[:5])}")
        if _same_host(ctx):
            host = _host_clear(markers, 5.0)
            if host:
                raise Violation(f"processes of a program that {did} are alive on the host: {', '.join(host[:5])}")
    _after(ctx, a, bomb)
    return f"started {started}, none outlived the call; the fork bomb ended with its call"


@check(
    "sandbox.process_isolation",
    "While session A holds as many processes as its sandbox lets it, session B's program still forks: the "
    "process limit counts no other session",
    f"{_SPEC}: processes are bounded per session, never counting another session's; {_RFC}",
)
def process_isolation(ctx: Context) -> str:
    runner = _runner(ctx)
    if ctx.capacity < 2:
        raise CheckSkipped("the environment serves one session at a time")
    a, b = _open(ctx), _open(ctx)
    _trivial(ctx, a, runner, "session A's first program")
    _trivial(ctx, b, runner, "session B's first program")
    host = _same_host(ctx)
    held: Any = None
    overlap = False
    for _attempt in range(3):
        ready = "oe" + secrets.token_hex(5)
        req = _request(a, runner, probes.holder(ready=ready, cap=256, hold=4.0))
        a.send(req)
        answer: tool_pb2.ToolResult | None = None
        if host:
            answer = _await_processes(ctx, a, req, [ready], 1, "session A's program holding processes")
        for _ in range(1 if host else 3):
            code, want = probes.forker(_token(), 4)
            got = _run(ctx, b, runner, code, "session B's program forking 4 children while session A holds processes")
            if got != want:
                raise Violation(
                    f"session B could not fork while session A held its processes: printed {got[:200]!r}, "
                    f"expected {want!r}"
                )
        overlap = host and answer is None and bool(processes_named([ready]))
        if answer is None:
            answer = _answer(ctx, a, req, "session A's program holding processes")
        rep = _printed(runner, answer)
        held = next((r.get("held") for r in rep if "held" in r), held)
        if overlap or not host:
            break
    _after(ctx, a, "held processes")
    if host and not overlap:
        raise CheckNotExercised(
            f"session A held {held} processes, but B's runs never overlapped A's hold in 3 attempts: "
            "whether the process limit is per session was not observed"
        )
    return f"session A held {held} processes while B forked 4" + ("" if host else " (overlap not observable)")
