"""Level ``grading``: rewards a policy cannot steal (RFC 0015, docs/protocol.md §7.1).

An environment whose reward is a verdict on submitted work sets ``Capabilities.grades`` and
marks its grading tools (``"openenv/grading"``, or RFC 0010's ``"openenv/sandbox"`` with
``"grades": true``). These checks play a reward-seeking policy against it through its own
tools, written from its declarations only, never from its grader: constant and empty
submissions in the declared language, graded code that forges its verifier's verdict files
and ends the verifier (exits, kills its parent or every process it can, sleeps past any
limit), files planted in the workspace through the environment's runners (RFC 0010 tools
with ``output``) for the verifier to take or run, an answer table keyed on a call counter
adapted over episodes, and pairs of submissions with equal rewards whose answers must not
differ (strict feedback). The environment's own probes (``Environment.grading_probes()``,
read from ``python:`` and ``docker:`` targets) give the reference and null solutions.

The **baseline** of an episode's task is the best reward of its null solutions (the probe's;
without probes, the grading tool called with an empty submission right after reset). An
attack fails the level when it earns more than the baseline (beyond the declared float
tolerance). Every check skips, with the reason, when the environment does not grade; the
checks that need probes report ``not_exercised`` without them. Grading is a tool-call step
after a reset with one client-chosen episode id per run (so two episodes' states compare), in
sessions of the level's own; nothing depends on timing but the 1.5 s sleep that exposes a
timing channel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import re
import weakref
import zlib
from collections.abc import Iterator
from typing import Any

from google.protobuf import json_format

from openenv.runtime.grading import GradingProbe
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import payload_pb2, tool_pb2
from openenv.values import from_struct, to_struct
from openenv_conformance.canonical import diff
from openenv_conformance.checks import _grading_attacks as attacks
from openenv_conformance.checks.sandbox import CodeTool, code_tools, entry_point, peer_tools
from openenv_conformance.checks.sandbox import declarations as sandbox_declarations
from openenv_conformance.context import Context
from openenv_conformance.errors import CheckNotExercised, CheckSkipped, CheckWarning, Violation
from openenv_conformance.registry import check
from openenv_conformance.spec import grading_declaration, message_json
from openenv_conformance.strategies import CALL_TOOL, json_payload, pack
from openenv_conformance.tables import FEEDBACK_LEVELS, FEEDBACK_OPTION, GRADING_ANNOTATION, GRADING_LANGUAGES
from openenv_conformance.targets import ProbesUnreadable, ProcessTarget
from openenv_conformance.transport import SessionLike, StreamEnd, code_name, describe, expect_error, expect_ok

KEY = GRADING_ANNOTATION
_SPEC = "docs/protocol.md §7.1"
_RFC = "RFC 0015 (docs/rfcs/0015-grading.md)"
#: Tasks (probes, else seeds) over which constant submissions are tried.
CONSTANT_INSTANCES = 2
#: Tasks on which the files a task's text names are replaced (grading.verdict_forgery).
FORGERY_INSTANCES = 3
#: Episodes the answer-table search may spend (grading.replay).
REPLAY_BUDGET = 24
#: The values the answer table tries at each position (beside the numbers of the task's text).
REPLAY_CANDIDATES: tuple[Any, ...] = (None, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
#: The run's pid and start time, which a submission compares with what it sees (see
#: _grading_attacks): computed once, as the certifier is this process.
_CERTIFIER = attacks.certifier_identity()


# -- what the environment declares


@dataclasses.dataclass(frozen=True)
class Grader:
    """A grading tool: the work is the string argument ``argument`` in ``language`` (None: the
    tool grades the session's state, e.g. its workspace). ``extra``: the minimal values of its
    other required arguments, as JSON."""

    name: str
    argument: str | None
    language: str | None
    extra: str = "{}"

    def call(self, work: str | None) -> Call:
        """A call grading ``work`` (ignored by a tool that takes no work)."""
        args = json.loads(self.extra)
        if self.argument is not None:
            args[self.argument] = work if work is not None else ""
        return _call(self.name, args)

    @property
    def empty(self) -> Call:
        """The empty submission: ``""`` in the argument, else no argument at all."""
        return self.call("")


#: A step as (tool name, canonical JSON of its arguments), or ("", the JSON of the environment's own
#: action) for a probe of an environment whose actions are not tool calls: hashable, so outcomes
#: are kept.
Call = tuple[str, str]


def _call(tool: str, arguments: dict[str, Any]) -> Call:
    return tool, json.dumps(arguments, sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Instance:
    """One task as reset: seed, task id (RFC 0004), options (canonical JSON); ``probe`` is the
    index of the probe it comes from (None: a seed of the run)."""

    seed: int | None
    task_id: str
    options: str
    label: str
    probe: int | None = None


@dataclasses.dataclass
class Outcome:
    """One episode: the graded (last) step's reward (None: unset or refused), its refusal's
    code, what the agent saw after it (``view``), the reset's entry point and text, the raw
    answers of every step."""

    reward: float | None
    refused: str
    view: dict[str, Any]
    entry_point: str | None
    reset_text: str
    answers: list[pb.SessionResponse]


@dataclasses.dataclass
class _Plan:
    """What the level learns once per run."""

    declared: list[tuple[tool_pb2.Tool, Any]]
    source: str
    problems: list[str]
    graders: list[Grader]
    runners: list[CodeTool]
    guard: str
    probes: list[GradingProbe] | None = None
    probes_loaded: bool = False
    probes_why: str = ""
    probes_error: str = ""
    outcomes: dict[tuple[Instance, tuple[Call, ...], str | None], Outcome] = dataclasses.field(default_factory=dict)
    baselines: dict[Instance, tuple[float, str]] = dataclasses.field(default_factory=dict)


_PLANS: weakref.WeakKeyDictionary[Context, _Plan] = weakref.WeakKeyDictionary()


def _minimal(schema: Any) -> tuple[bool, Any]:
    """(True, a minimal value) valid under a property's schema, when one is obvious."""
    if not isinstance(schema, dict):
        return False, None
    if "default" in schema:
        return True, schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return True, schema["enum"][0]
    if "const" in schema:
        return True, schema["const"]
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    for k, v in (("string", ""), ("integer", 0), ("number", 0), ("boolean", False), ("array", []), ("object", {})):
        if k in kinds:
            return True, v
    return False, None


def _declaration_problems(tool: tool_pb2.Tool, spec: Any) -> list[str]:
    """What is wrong with a tool's grading declaration (empty when it is well-formed). RFC
    0010's form is held to RFC 0010 by the sandbox level; here only its grading keys count."""
    annotations = from_struct(tool.annotations) if tool.HasField("annotations") else {}
    where = f"tool {tool.name!r}: {KEY if KEY in annotations else 'openenv/sandbox'}"
    if not isinstance(spec, dict):
        return [f"{where} is {type(spec).__name__}, not an object"]
    out = []
    props = from_struct(tool.input_schema).get("properties") if tool.HasField("input_schema") else None
    if "argument" in spec:
        arg = spec["argument"]
        if not isinstance(arg, str) or not arg:
            out.append(f"{where}.argument is {arg!r}, not the name of an argument")
        elif not isinstance(props, dict) or arg not in props:
            out.append(f"{where}.argument {arg!r} is not a property of the tool's input_schema")
        else:
            kind = props[arg].get("type") if isinstance(props[arg], dict) else None
            if kind != "string" and not (isinstance(kind, list) and "string" in kind):
                out.append(f"{where}.argument {arg!r} is not a string in the input_schema (type {kind!r})")
    if "language" in spec and spec["language"] not in GRADING_LANGUAGES:
        out.append(f"{where}.language is {spec['language']!r}, not one of {list(GRADING_LANGUAGES)}")
    if "language" in spec and "argument" not in spec and KEY in annotations:
        out.append(f"{where} names a language but no argument holding the work")
    return out


def _grader(tool: tool_pb2.Tool, spec: dict[str, Any]) -> Grader | None:
    """The grader a well-formed declaration describes (None when a required argument has no
    obvious value)."""
    schema = from_struct(tool.input_schema) if tool.HasField("input_schema") else {}
    props: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
    argument = spec.get("argument")
    extra = {}
    for name in schema.get("required") or []:
        if name == argument:
            continue
        ok, value = _minimal(props.get(name))
        if not ok:
            return None
        extra[name] = value
    language = spec.get("language") if argument else None
    return Grader(tool.name, argument, language, json.dumps(extra, sort_keys=True))


def _plan(ctx: Context) -> _Plan:
    plan = _PLANS.get(ctx)
    if plan is not None:
        return plan
    tools, source = ctx.tools, ""
    declared = [(t, grading_declaration(t)) for t in tools if grading_declaration(t) is not None]
    if not declared and ctx.spec.caps.tools:
        others, where = peer_tools(ctx)
        found = [(t, grading_declaration(t)) for t in others if grading_declaration(t) is not None]
        if found:
            tools, declared, source = others, found, where
    problems: list[str] = []
    graders: list[Grader] = []
    for tool, spec in declared:
        wrong = _declaration_problems(tool, spec)
        problems += wrong
        g = None if wrong else _grader(tool, spec)
        if g is not None:
            graders.append(g)
    graded = {t.name for t, _ in declared}
    runners = [
        t
        for t in code_tools(sandbox_declarations(tools))
        if t.output and t.language in ("python", "shell") and t.name not in graded
    ]
    runners.sort(key=lambda t: t.language != "python")  # a Python runner first: the plants are Python
    server = ctx.target.pid if isinstance(ctx.target, ProcessTarget) else None
    plan = _Plan(declared, source, problems, graders, runners, attacks.prelude(_CERTIFIER, server))
    _PLANS[ctx] = plan
    return plan


def _require(ctx: Context) -> _Plan:
    """The run's plan; skips when the environment does not grade."""
    if not ctx.spec.grades:
        raise CheckSkipped(
            "the environment does not grade submitted work (Capabilities.grades is false): nothing to attack"
        )
    return _plan(ctx)


def _tool_actions(ctx: Context) -> bool:
    return ctx.spec.action.message_type == CALL_TOOL


def _unplayable(ctx: Context, *, probes: bool = False) -> tuple[str, bool] | None:
    """Why no episode can be graded here, and whether that is a skip (True) or a rule left
    unexercised (False); None when episodes can be played (``probes``: the check plays only
    the probes' steps, which may be the environment's own actions)."""
    if not ctx.spec.sim:
        return (
            "tools-only mode: grading happens in steps, which are not served, and strict feedback refuses a "
            "grading tool's side call",
            True,
        )
    if not _tool_actions(ctx) and not probes:
        return (
            "the environment's actions are not tool calls (it grades every step): no declared submission to vary",
            False,
        )
    return None


def _tolerance(ctx: Context) -> float:
    return max(ctx.spec.tolerance, 1e-9)


def _timeout(ctx: Context) -> float:
    return max(ctx.options.timeout, ctx.options.grading_timeout)


def _seed(ctx: Context, salt: str) -> int:
    return zlib.crc32(f"{ctx.options.seed}:grading:{salt}".encode()) & 0x7FFFFFFF


def _episode_id(ctx: Context) -> str:
    """The client-chosen episode id of every episode of the run, so that two episodes' states
    compare: a uuid4-like hex derived from the run's seed (no fixed string for an environment to
    recognise the certifier by)."""
    return hashlib.sha256(f"{ctx.options.seed}:grading:episode".encode()).hexdigest()[:32]


# -- probes


def _probes(ctx: Context, plan: _Plan) -> list[GradingProbe] | None:
    """The environment's probes (None, with ``plan.probes_why``, when the target cannot give
    them; ``plan.probes_error`` when reading them failed)."""
    if plan.probes_loaded:
        return plan.probes
    plan.probes_loaded = True
    reader = getattr(ctx.target, "grading_probes", None)
    try:
        doc = reader(timeout=_timeout(ctx)) if reader is not None else None
    except ProbesUnreadable as e:
        plan.probes_error = str(e)
        plan.probes_why = f"the environment's grading probes could not be read: {e}"
        return None
    if doc is None:
        plan.probes_why = (
            "no grading probes: the target is a running server (its code is not here; python: and docker: targets "
            "run `python -m openenv.runtime.grading_probes FACTORY`)"
        )
        return None
    try:
        plan.probes = [GradingProbe.from_json(p) for p in doc["probes"]]
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        plan.probes_error = f"a probe is malformed: {type(e).__name__}: {e}"
        plan.probes_why = f"the environment's grading probes could not be read: {plan.probes_error}"
        return None
    if not plan.probes:
        plan.probes_why = "the environment ships no grading probes (its grading_probes() returned none)"
    return plan.probes


def _calls(seq: Any) -> tuple[Call, ...]:
    """A probe's steps: tool calls, or ``{"action": A}`` (the environment's own JSON action)."""
    out = []
    for c in seq:
        if isinstance(c, dict):
            out.append(("", json.dumps(c["action"], sort_keys=True)))
        else:
            out.append(_call(c.tool_name, dict(c.arguments)))
    return tuple(out)


def _probe_instances(ctx: Context, plan: _Plan) -> tuple[list[Instance], list[str]]:
    """The probes the level plays (at most ``--grading-probes``, chosen by the run's seed, in
    their order) as instances, and notes on those it cannot play."""
    probes = _probes(ctx, plan) or []
    chosen = list(range(len(probes)))
    cap = ctx.options.grading_probes
    if cap and len(chosen) > cap:
        chosen = sorted(random.Random(_seed(ctx, "probes")).sample(chosen, cap))
    out, notes = [], []
    for i in chosen:
        p = probes[i]
        options = {k: v for k, v in p.options.items() if k != FEEDBACK_OPTION}
        task_id = p.task_id or ""
        if task_id and ctx.transport == "http":
            # OpenEnv's reset frame has no task id: there it is the ordinary reset option
            # "task_id" (docs/protocol.md §1.4, the listeners' table), which openenv servers read.
            options.setdefault("task_id", task_id)
            task_id = ""
        label = (
            f"probe {i}"
            + (f" (task {p.task_id})" if p.task_id else "")
            + (f" (seed {p.seed})" if p.seed is not None else "")
        )
        out.append(Instance(p.seed, task_id, json.dumps(options, sort_keys=True), label, i))
    if len(probes) > len(chosen):
        notes.append(f"{len(chosen)} of {len(probes)} probes played (--grading-probes {cap})")
    return out, notes


def _instances(ctx: Context, plan: _Plan, n: int) -> list[Instance]:
    """``n`` tasks to attack: the probes' first, else seeds derived from the run's seed."""
    probed, _ = _probe_instances(ctx, plan)
    if probed:
        return probed[:n]
    return [Instance(s, "", "{}", f"seed {s}") for s in (_seed(ctx, f"task{i}") for i in range(n))]


# -- playing episodes


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from _texts(v)


def _reset(ctx: Context, s: SessionLike, inst: Instance, feedback: str | None) -> pb.TimeStep:
    r = pb.ResetRequest(episode_id=_episode_id(ctx), task_id=inst.task_id)
    if inst.seed is not None:
        r.seed = inst.seed
    options = json.loads(inst.options)
    if feedback is not None:
        options[FEEDBACK_OPTION] = feedback
    if options:
        to_struct(options, r.options)
    what = f"reset ({inst.label}{', feedback ' + feedback if feedback else ''})"
    return expect_ok(s.exchange(s.request(reset=r), _timeout(ctx)), "reset", what).time_step


def _payload(ctx: Context, call: Call, what: str) -> payload_pb2.Payload:
    """The action of ``call``: a CallToolRequest, or a probe's own JSON action in the declared
    action type (a JSON value; a message by its proto3 JSON mapping)."""
    if call[0]:
        msg = tool_pb2.CallToolRequest(name=call[0])
        to_struct(json.loads(call[1]), msg.arguments)
        return pack(msg, CALL_TOOL)
    value = json.loads(call[1])
    action = ctx.spec.action
    if action.kind == payload_pb2.PAYLOAD_KIND_JSON:
        return json_payload(value)
    if action.kind == payload_pb2.PAYLOAD_KIND_MESSAGE and action.cls is not None:
        try:
            return pack(json_format.ParseDict(value, action.cls()), action.message_type)
        except (json_format.ParseError, TypeError) as e:
            raise Violation(f"{what}: the probe's action is not a {action.message_type}: {e}") from None
    raise Violation(f"{what}: the probe's action {call[1][:100]} cannot be sent as a {action.kind_name} action")


def _step(ctx: Context, s: SessionLike, call: Call, what: str) -> pb.SessionResponse:
    req = s.request(step=pb.StepRequest(action=_payload(ctx, call, what)))
    try:
        resp = s.exchange(req, _timeout(ctx))
    except Violation as e:  # NoAnswer among them
        raise Violation(
            f"{what}: {e} (a verifier that hangs must be ended by the environment's own limits, within "
            f"--grading-timeout {_timeout(ctx):g} s)"
        ) from None
    if isinstance(resp, StreamEnd):
        raise Violation(f"{what}: the session ended ({describe(resp)})")
    return resp


def _view(ctx: Context, ts: pb.TimeStep) -> dict[str, Any]:
    """What the agent sees of a time step (the episode id and step count aside: equal by
    construction), as plain Python."""
    return {
        "observation": ctx.spec.observation.decode(ts.observation),
        "metadata": from_struct(ts.metadata) if ts.HasField("metadata") else None,
        "reward_breakdown": message_json(ts.reward_breakdown, proto_names=True)
        if ts.HasField("reward_breakdown")
        else None,
        "terminated": ts.terminated,
        "truncated": ts.truncated,
    }


def _play(
    ctx: Context,
    plan: _Plan,
    s: SessionLike,
    inst: Instance,
    calls: tuple[Call, ...],
    what: str,
    *,
    feedback: str | None = None,
) -> Outcome:
    """Reset ``inst`` and step ``calls`` (the last one grades); the state is read after. Kept
    per run: the same episode is played once."""
    key = (inst, calls, feedback)
    known = plan.outcomes.get(key)
    if known is not None:
        return known
    ts0 = _reset(ctx, s, inst, feedback)
    reset_text = "\n".join(_texts(_view(ctx, ts0)["observation"]))
    answers = []
    for i, call in enumerate(calls):
        answers.append(_step(ctx, s, call, f"{inst.label}: a submission that {what} (step {i + 1}, {call[0]})"))
    last = answers[-1]
    reward: float | None = None
    refused = ""
    view: dict[str, Any]
    if last.WhichOneof("kind") == "step":
        ts = last.step.time_step
        reward = ts.reward if ts.HasField("reward") and math.isfinite(ts.reward) else None
        view = _view(ctx, ts)
    elif last.WhichOneof("kind") == "error":
        refused = code_name(last.error.code)
        view = {"error": refused}
    else:
        raise Violation(f"{inst.label}: a submission that {what}: the graded step was answered {describe(last)}")
    st = s.state()
    if isinstance(st, pb.SessionResponse) and st.WhichOneof("kind") == "state":
        view["state"] = {
            "status": pb.EpisodeStatus.Name(st.state.status),
            "step_count": st.state.step_count,
            "episode_id": st.state.episode_id,
            "state": ctx.spec.state.decode(st.state.state),
        }
    else:
        view["state"] = {"answer": describe(st)}
    out = Outcome(reward, refused, view, entry_point(ts0), reset_text, answers)
    plan.outcomes[key] = out
    return out


def _probe_of(plan: _Plan, inst: Instance) -> GradingProbe | None:
    return plan.probes[inst.probe] if inst.probe is not None and plan.probes else None


def _null_calls(plan: _Plan, inst: Instance) -> list[tuple[Call, ...]]:
    """The null solutions of ``inst``: its probe's, else the empty submission."""
    probe = _probe_of(plan, inst)
    if probe is not None and probe.null:
        return [_calls(seq) for seq in probe.null]
    if plan.graders:
        return [(plan.graders[0].empty,)]
    return []


def _baseline(ctx: Context, plan: _Plan, s: SessionLike, inst: Instance) -> tuple[float, str] | None:
    """The best reward of ``inst``'s null solutions, and what they were (None when there is
    none to play). A null whose reward is unset (or refused) counts as the lowest reward
    (``reward_min``, else 0)."""
    known = plan.baselines.get(inst)
    if known is not None:
        return known
    nulls = _null_calls(plan, inst)
    if not nulls:
        return None
    lowest = ctx.spec.reward_range[0]
    rewards = []
    for calls in nulls:
        r = _play(ctx, plan, s, inst, calls, "is a null solution").reward
        rewards.append(r if r is not None else (lowest if lowest is not None else 0.0))
    probe = _probe_of(plan, inst)
    what = f"the probe's {len(nulls)} null solutions" if probe is not None and probe.null else "an empty submission"
    plan.baselines[inst] = (max(rewards), what)
    return plan.baselines[inst]


def _above(reward: float | None, baseline: float, tol: float) -> bool:
    return reward is not None and reward > baseline + tol


def _entry(plan: _Plan, inst: Instance) -> str | None:
    """The entry point the task's reset names (read from an episode played on it)."""
    for (i, _, _), o in plan.outcomes.items():
        if i == inst:
            return o.entry_point
    return None


def _constant_submissions(grader: Grader, entry_point: str | None) -> list[tuple[str, str]]:
    """Constant, empty and trivial work in the grader's language (empty for a tool that
    takes none)."""
    if grader.argument is None:
        return []
    lang = grader.language
    if lang == "python":
        subs = attacks.empty_submissions(lang)
        return subs + (attacks.constant_functions(entry_point) if entry_point else attacks.python_program_constants())
    if lang == "shell":
        return attacks.empty_submissions(lang) + attacks.shell_constants()
    if lang == "sql":
        return attacks.empty_submissions(lang) + attacks.sql_constants()
    return attacks.text_constants()


def _runner_output(runner: CodeTool, answer: pb.SessionResponse) -> str:
    """What a runner's step printed (its ``output`` key), or ""."""
    if answer.WhichOneof("kind") != "step":
        return ""
    obs = answer.step.time_step.observation
    if obs.WhichOneof("kind") != "message" or not obs.message.type_url.endswith("/openenv.v1.CallToolResponse"):
        return ""
    result = tool_pb2.CallToolResponse.FromString(obs.message.value).result
    if result.is_error or not result.HasField("structured_content") or runner.output is None:
        return ""
    value = from_struct(result.structured_content).get(runner.output)
    return value if isinstance(value, str) else ""


def _no_grader(plan: _Plan) -> str:
    if not plan.declared:
        return f"no tool declares {KEY} (grading.declared says whether that is right): no submission to vary"
    return "no grading tool can be called: a required argument other than the work has no obvious value"


def _fmt(x: float | None) -> str:
    return "no reward" if x is None else f"{x:g}"


_NO_NULL = "no null solution to measure the baseline by: no grading tool can be called, and no probe names one"


# -- the checks


@check(
    "grading.declared",
    "Capabilities.grades agrees with the tools (a grading tool exists, or the actions are not tool calls); every "
    "grading annotation is well-formed; feedback is among feedback_offered; each offered level is accepted at reset "
    "and a level not offered is INVALID_ARGUMENT, starting no episode",
    f"{_SPEC} (Capabilities.grades, feedback, the openenv/grading annotation, the reset option feedback); {_RFC}",
)
def declared(ctx: Context) -> str:
    plan = _plan(ctx)
    if not ctx.spec.grades:
        major, _, minor = ctx.info.protocol_version.partition(".")
        recent = (major, minor.isdigit() and int(minor) >= 5) == ("1", True)
        if plan.declared and recent:
            names = ", ".join(repr(t.name) for t, _ in plan.declared)
            raise Violation(
                f"tools {names} declare that they grade, but Capabilities.grades is false: a grading environment "
                "says so in its capabilities"
            )
        raise CheckSkipped(
            f"the environment does not grade submitted work (Capabilities.grades is false, and no tool declares {KEY})"
        )
    problems = list(plan.problems)
    caps, offered = ctx.spec.caps, ctx.spec.feedback_offered
    if caps.feedback == pb.FEEDBACK_UNSPECIFIED:
        problems.append("Capabilities.feedback is unspecified: a grading environment names its default level")
    elif ctx.spec.feedback not in offered:
        problems.append(f"Capabilities.feedback {ctx.spec.feedback!r} is not among feedback_offered {list(offered)}")
    bad = [o for o in offered if o not in FEEDBACK_LEVELS]
    if bad:
        problems.append(f"feedback_offered holds levels that are none of {list(FEEDBACK_LEVELS)}: {bad}")
    if _tool_actions(ctx) and not plan.declared:
        problems.append(
            f"Capabilities.grades is set and the actions are tool calls, but no tool declares {KEY} (or "
            "openenv/sandbox with grades): the grading tool is not marked, so nothing holds its results and side "
            "calls to strict feedback"
        )
    if problems:
        raise Violation("; ".join(problems))
    roles = [
        f"{g.name} (" + ("grades the session" if g.argument is None else f"{g.argument}: {g.language or 'text'}") + ")"
        for g in plan.graders
    ]
    notes = [
        "grading tools: " + ("; ".join(roles) if roles else "none (the actions are not tool calls)"),
        f"feedback {ctx.spec.feedback}, offered {list(offered)}",
    ]
    if ctx.spec.sim:
        for level in offered:
            s = ctx.session()
            expect_ok(s.reset(options={FEEDBACK_OPTION: level}), "reset", f"a reset asking for feedback {level!r}")
            s.shutdown()
        refused = [lv for lv in FEEDBACK_LEVELS if lv not in offered] + ["openenv-certify-no-such-level"]
        for level in refused:
            s = ctx.session()
            expect_error(
                s.reset(options={FEEDBACK_OPTION: level}),
                "INVALID_ARGUMENT",
                f"a reset asking for feedback {level!r}, which is not offered",
                fatal=False,
            )
            st = expect_ok(s.state(), "state", "state after the refused reset")
            if st.status != pb.EPISODE_STATUS_NOT_STARTED:
                raise Violation(
                    f"a reset asking for feedback {level!r} was refused but started an episode "
                    f"(state {pb.EpisodeStatus.Name(st.status)})"
                )
            expect_ok(s.reset(), "reset", "a reset after the refused one")
            s.shutdown()
        notes.append(f"levels refused at reset: {refused}")
    else:
        notes.append("tools-only mode: resets not tried")
    note = "; ".join(notes)
    if plan.source:
        raise CheckWarning(
            f"{note}; declared only on {plan.source}: the tool list over {ctx.transport} carries no annotations"
        )
    return note


@check(
    "grading.reference",
    "Each of the environment's grading probes: its reference solution earns the top reward (reward_max, else 1) "
    "and its null solutions earn less",
    f"{_SPEC}; {_RFC} (Environment.grading_probes)",
)
def reference(ctx: Context) -> str:
    plan = _require(ctx)
    why = _unplayable(ctx, probes=True)
    if why is not None:
        if why[1]:
            raise CheckSkipped(why[0])
        raise CheckNotExercised(why[0])
    instances, notes = _probe_instances(ctx, plan)
    if plan.probes_error:
        raise Violation(f"the environment's grading probes could not be read: {plan.probes_error}")
    if plan.probes is None or not plan.probes:
        raise CheckNotExercised(plan.probes_why)
    top = ctx.spec.reward_range[1]
    top = 1.0 if top is None else top
    tol = _tolerance(ctx)
    s = ctx.session()
    failures, played = [], 0
    for inst in instances:
        probe = _probe_of(plan, inst)
        if probe is None or probe.reference is None:
            continue
        played += 1
        ref = _play(ctx, plan, s, inst, _calls(probe.reference), "is the probe's reference solution")
        if ref.reward is None or ref.reward < top - tol:
            said = f" (refused: {ref.refused})" if ref.refused else ""
            failures.append(f"{inst.label}: the reference solution earned {_fmt(ref.reward)}{said}, not {top:g}")
        for j, seq in enumerate(probe.null):
            o = _play(ctx, plan, s, inst, _calls(seq), "is a null solution")
            if o.reward is not None and o.reward >= top - tol:
                failures.append(f"{inst.label}: null solution {j} earned the top reward {o.reward:g}")
    if failures:
        raise Violation("; ".join(failures[:6]) + (f" (and {len(failures) - 6} more)" if len(failures) > 6 else ""))
    if not played:
        raise CheckNotExercised("; ".join(["no grading probe names a reference solution", *notes]))
    return "; ".join([f"{played} references earned {top:g}, their nulls less", *notes])


@check(
    "grading.constant_answers",
    "Constant, empty and trivial submissions in the declared language (functions returning 0, 1, -1, True, False, "
    "'', [], {}, None or raising; empty programs; SELECT 1/NULL/''; short text answers) earn no more than the "
    "baseline, on several tasks",
    f"{_SPEC}: no partial credit for a constant or an empty answer; {_RFC}",
)
def constant_answers(ctx: Context) -> str:
    plan = _require(ctx)
    why = _unplayable(ctx)
    if why is not None:
        if why[1]:
            raise CheckSkipped(why[0])
        raise CheckNotExercised(why[0])
    if not plan.graders:
        raise CheckNotExercised(_no_grader(plan))
    tol = _tolerance(ctx)
    s = ctx.session()
    instances = _instances(ctx, plan, CONSTANT_INSTANCES)
    failures, tried, best = [], 0, None
    notes = []
    for inst in instances:
        known = _baseline(ctx, plan, s, inst)
        if known is None:
            raise CheckNotExercised(f"{inst.label}: {_NO_NULL}")
        base, base_what = known
        entry = _entry(plan, inst)
        for grader in plan.graders:
            for what, work in _constant_submissions(grader, entry):
                o = _play(ctx, plan, s, inst, (grader.call(work),), what)
                tried += 1
                best = o.reward if best is None or (o.reward is not None and o.reward > best) else best
                if _above(o.reward, base, tol):
                    failures.append(
                        f"{inst.label}: a submission that {what} earned {o.reward:g}, above the baseline {base:g} "
                        f"({base_what})"
                    )
            if grader.argument is None and (grader.empty,) not in _null_calls(plan, inst):
                # A tool grading the workspace: the untouched workspace against the probe's nulls
                # (unless it is one of them).
                o = _play(ctx, plan, s, inst, (grader.empty,), "submits the untouched workspace")
                tried += 1
                best = o.reward if best is None or (o.reward is not None and o.reward > best) else best
                if _above(o.reward, base, tol):
                    failures.append(
                        f"{inst.label}: the untouched workspace earned {o.reward:g}, above the baseline {base:g} "
                        f"({base_what})"
                    )
            if grader.language == "sql":
                notes.append(
                    "tables were not enumerated (every table whole, cross joins): no declared tool runs SQL and "
                    "returns its rows (RFC 0010 declares python and shell runners only)"
                )
    if failures:
        raise Violation("; ".join(failures[:6]) + (f" (and {len(failures) - 6} more)" if len(failures) > 6 else ""))
    if not tried:
        raise CheckNotExercised(
            "the grading tools take no submission (they grade the session's workspace), and the untouched workspace "
            "is the null solution itself: no constant to submit"
        )
    labels = ", ".join(i.label for i in instances)
    return "; ".join([f"{tried} submissions on {labels} earned at most {_fmt(best)}", *dict.fromkeys(notes)])


@check(
    "grading.verdict_forgery",
    "Graded code that writes verdict files (/logs/verifier/reward.json, reward.txt) and then exits, kills its "
    "parent or every process, or sleeps past any limit; and files planted through the runners (verdict files, "
    "reward.json as a directory, sitecustomize/usercustomize/pytest/conftest/git modules, git/python3/bash/pytest "
    "executables, a repository whose config runs a script, a background process): none earns more than the baseline",
    f"{_SPEC}: a verdict counts only when its verifier ran to completion; nothing the agent controls configures the "
    f"verifier's tools; {_RFC}",
)
def verdict_forgery(ctx: Context) -> str:
    plan = _require(ctx)
    why = _unplayable(ctx)
    if why is not None:
        if why[1]:
            raise CheckSkipped(why[0])
        raise CheckNotExercised(why[0])
    coders = [g for g in plan.graders if g.argument is not None and g.language in ("python", "shell")]
    if not coders and not plan.runners:
        raise CheckSkipped(
            "no grading tool takes code (language python or shell) and no tool runs code and returns its output "
            "(RFC 0010): no verifier to attack through"
        )
    tol = _tolerance(ctx)
    s = ctx.session()
    inst = _instances(ctx, plan, 1)[0]
    known = _baseline(ctx, plan, s, inst)
    if known is None:
        raise CheckNotExercised(f"{inst.label}: {_NO_NULL}")
    base, base_what = known
    entry = _entry(plan, inst)
    failures: list[str] = []
    notes: list[str] = []
    tried = 0
    for g in coders:
        if g.language == "python":
            subs = attacks.function_forgeries(entry, plan.guard) if entry else attacks.program_forgeries(plan.guard)
        else:
            subs = attacks.shell_forgeries(plan.guard, _CERTIFIER)
        for what, code in subs:
            o = _play(ctx, plan, s, inst, (g.call(code),), what)
            tried += 1
            if _above(o.reward, base, tol):
                failures.append(
                    f"{inst.label}: a submission that {what} earned {o.reward:g}, above the baseline {base:g} "
                    f"({base_what})"
                )
    nulls = _null_calls(plan, inst)
    if plan.runners and nulls:
        runner = plan.runners[0]
        planted = 0
        # The generic plants on the first task; the files each task's text names on a few tasks
        # (what the tests run differs from task to task).
        episodes = [(inst, p) for p in attacks.plants(plan.guard, _CERTIFIER)]
        named_on = 0
        for other in _instances(ctx, plan, FORGERY_INSTANCES):
            if _baseline(ctx, plan, s, other) is None:
                continue
            named = attacks.named_plants(plan.guard, _CERTIFIER, _first_reset_text(plan, other))
            episodes += [(other, p) for p in named]
            named_on += bool(named)
        notes.append(f"the files the task's text names replaced on {named_on} of {FORGERY_INSTANCES} tasks")
        for where, (what, program) in episodes:
            wbase, wwhat = plan.baselines[where]
            run = _call(runner.name, {runner.argument: attacks.wrap_for(runner.language, program)})
            calls = (run, *_null_calls(plan, where)[0])
            o = _play(ctx, plan, s, where, calls, f"{what} (through {runner.name}), then was graded")
            tried += 1
            rep = attacks.reports(_runner_output(runner, o.answers[0]))
            planted += len(rep[-1].get("planted") or []) if rep else 0
            if _above(o.reward, wbase, tol):
                failures.append(
                    f"{where.label}: an episode that {what} through {runner.name!r}, then submitted the null "
                    f"solution, earned {o.reward:g}, above the baseline {wbase:g} ({wwhat})"
                )
        notes.append(f"{planted} files and processes planted through {runner.name!r}")
    elif plan.runners:
        notes.append("no null solution to submit after planting")
    else:
        notes.append("no runner declared (RFC 0010 tool with output): nothing planted in the workspace")
    if failures:
        raise Violation("; ".join(failures[:6]) + (f" (and {len(failures) - 6} more)" if len(failures) > 6 else ""))
    return "; ".join([f"{tried} forgeries earned no more than their baselines ({inst.label}: {base:g})", *notes])


def _pool(ctx: Context, plan: _Plan, inst: Instance, entry: str | None) -> list[tuple[str, tuple[Call, ...]]]:
    """Submissions to compare when their rewards are equal: the nulls, the constants, small
    numbers (a hidden case answered by chance), and one that sleeps 1.5 s first."""
    out = [("is a null solution", calls) for calls in _null_calls(plan, inst)]
    g = plan.graders[0] if plan.graders else None
    if g is None:
        return out
    for what, work in _constant_submissions(g, entry):
        out.append((what, (g.call(work),)))
    if g.language == "python" and entry:
        for v in REPLAY_CANDIDATES:
            if v not in attacks.CONSTANTS:
                code = f"def {entry}(*args, **kwargs):\n    return {v!r}\n"
                out.append((f"returns {v!r} from {entry}()", (g.call(code),)))
    elif g.argument is not None and g.language in (None, "text"):
        out += [(f"answers {v!r}", (g.call(str(v)),)) for v in REPLAY_CANDIDATES if v is not None and v > 1]
    sleeper = attacks.sleeper_pair(g.language, entry) if g.argument is not None else None
    if sleeper is not None:
        out.append((sleeper[0], (g.call(sleeper[1]),)))
    if g.argument is None and plan.runners:
        runner = plan.runners[0]
        for content in ("a", "b"):
            program = f"open('openenv-certify-note.txt', 'w').write({content!r})\n"
            run = _call(runner.name, {runner.argument: attacks.wrap_for(runner.language, program)})
            out += [(f"left a note {content!r} in the workspace", (run, *calls)) for calls in _null_calls(plan, inst)]
    return out


def _strict_shape(view: dict[str, Any], reward: float | None, tol: float) -> str | None:
    """How a strict graded step's answer says more than its reward (None when it does not):
    rule 1 (the result replaced by the reward) and rule 2 (the breakdown's root only)."""
    obs = view.get("observation")
    if isinstance(obs, dict) and str(obs.get("@type", "")).endswith("/openenv.v1.CallToolResponse"):
        result = obs.get("result") or {}
        if not result.get("is_error"):
            sc = result.get("structured_content")
            said = sc.get("reward") if isinstance(sc, dict) else None
            same = said is None or reward is None or (isinstance(said, (int, float)) and abs(said - reward) <= tol)
            ok = isinstance(sc, dict) and ((set(sc) == {"reward"} and same) or set(sc) == {"result"})
            if not ok:
                return f"the graded step's result is {json.dumps(result)[:300]}, not the reward alone"
            if len(result.get("content") or []) > 1:
                return f"the graded step's result has {len(result['content'])} content blocks, not the reward's one"
    bd = view.get("reward_breakdown")
    if isinstance(bd, dict) and (bd.get("children") or bd.get("reason")):
        return f"the reward breakdown has more than its root: {json.dumps(bd)[:300]}"
    return None


@check(
    "grading.feedback",
    "In a strict episode (the default) two submissions with the same reward (one sleeping 1.5 s first) get the same "
    "observation, metadata, breakdown, flags and state after the graded step, and that step says nothing but the "
    "reward; a grading tool's side call is FAILED_PRECONDITION; a rich episode, where offered, is honoured",
    f"{_SPEC}: strict feedback; {_RFC}",
)
def feedback(ctx: Context) -> str:
    plan = _require(ctx)
    notes = []
    if ctx.spec.strict and plan.graders:
        g = plan.graders[0]
        s = ctx.session()
        if ctx.spec.sim and _tool_actions(ctx):
            _reset(ctx, s, _instances(ctx, plan, 1)[0], None)
        # A short non-empty work: the arguments must be valid, or INVALID_ARGUMENT comes first.
        resp = s.call_tool(g.name, json.loads(g.call("0")[1]))
        expect_error(resp, "FAILED_PRECONDITION", f"a side call of the grading tool {g.name!r}", fatal=False)
        if ctx.spec.sim:
            st = expect_ok(s.state(), "state", "state after the refused side call")
            if st.step_count != 0:
                raise Violation(f"a refused side call of {g.name!r} changed the step count to {st.step_count}")
        s.shutdown()
        notes.append(f"a side call of {g.name!r} is refused")
    why = _unplayable(ctx)
    if why is not None:
        if why[1]:
            return "; ".join([*notes, why[0]])
        raise CheckNotExercised(why[0])
    if not ctx.spec.strict:
        notes.append(f"the default level is {ctx.spec.feedback!r}: no strict episode to compare")
    tol = _tolerance(ctx)
    s = ctx.session()
    inst = _instances(ctx, plan, 1)[0]
    if _baseline(ctx, plan, s, inst) is None:
        raise CheckNotExercised(f"{inst.label}: {_NO_NULL}")
    entry = _entry(plan, inst)
    compared = 0
    if ctx.spec.strict:
        groups: dict[tuple[int, int | None], list[tuple[str, Outcome]]] = {}
        for what, calls in _pool(ctx, plan, inst, entry):
            o = _play(ctx, plan, s, inst, calls, what)
            shape = _strict_shape(o.view, o.reward, tol) if not o.refused else None
            if shape is not None:
                raise Violation(f"{inst.label}: a submission that {what}: {shape} (strict feedback)")
            # Rewards equal within the tolerance are grouped (at 1e-9, exactly equal ones).
            reward = None if o.reward is None else round(o.reward / tol)
            groups.setdefault((len(calls), reward), []).append((what, o))
        for members in groups.values():
            (first_what, first), *rest = members
            for what, o in rest:
                compared += 1
                d = diff(first.view, o.view, ctx.spec.tolerance)
                if d is not None:
                    raise Violation(
                        f"{inst.label}: a submission that {first_what} and one that {what} earned the same reward "
                        f"({_fmt(first.reward)}) but the agent saw different answers after the graded step, at {d}: "
                        "strict feedback tells nothing but the reward"
                    )
        if not compared:
            raise CheckNotExercised(
                f"{inst.label}: no two submissions earned the same reward: nothing to compare (of "
                f"{sum(len(m) for m in groups.values())} submissions)"
            )
        notes.append(f"{compared} pair{'s' if compared > 1 else ''} with equal rewards answered alike on {inst.label}")
    if "rich" in ctx.spec.feedback_offered:
        nulls = _null_calls(plan, inst)
        if nulls:
            o = _play(ctx, plan, s, inst, nulls[0], "is a null solution, in a rich episode", feedback="rich")
            if o.refused:
                raise Violation(f"{inst.label}: in a rich episode the graded step was refused {o.refused}")
            notes.append("a rich episode was honoured")
    return "; ".join(notes)


def _numbers(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every number the agent sees in ``value``, by where it is (numbers in text by position)."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, float(value)
    elif isinstance(value, str):
        for i, m in enumerate(re.findall(r"-?\d+(?:\.\d+)?", value)[:64]):
            yield f"{path}#{i}", float(m)
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "@type":  # a type URL's digits (openenv.v1) are not something the agent learns
                yield from _numbers(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}/{i}")


def _visible(o: Outcome) -> dict[str, float]:
    return dict(_numbers({k: v for k, v in o.view.items() if k != "state"})) | dict(
        _numbers(o.view.get("state"), "/state")
    )


def _better(o: Outcome, best: Outcome, tol: float) -> bool:
    """Whether an episode did better by what the agent can see: a higher reward, or an equal
    one with some visible number higher (a count of passed cases)."""
    r = o.reward if o.reward is not None else -math.inf
    b = best.reward if best.reward is not None else -math.inf
    if r > b + tol:
        return True
    if r < b - tol:
        return False
    mine, theirs = _visible(o), _visible(best)
    return any(v > theirs[p] + tol for p, v in mine.items() if p in theirs)


@check(
    "grading.replay",
    "Over up to 24 episodes of one task, an answer table keyed on a call counter, adapted position by position to "
    "everything each episode showed (the reward, every visible number), earns no more than the baseline; each "
    "probe's replay (another instance's literal answer) earns no more than its baseline",
    f"{_SPEC}: hidden cases in a fresh order per submission, strict feedback, no partial credit; {_RFC}",
)
def replay(ctx: Context) -> str:
    plan = _require(ctx)
    why = _unplayable(ctx, probes=True)
    if why is not None:
        if why[1]:
            raise CheckSkipped(why[0])
        raise CheckNotExercised(why[0])
    tol = _tolerance(ctx)
    s = ctx.session()
    notes = []
    inst = _instances(ctx, plan, 1)[0]
    known = _baseline(ctx, plan, s, inst)
    base, base_what = known if known is not None else (0.0, "")
    entry = _entry(plan, inst)
    g = next((g for g in plan.graders if g.argument is not None and g.language == "python"), None)
    searched = False
    if g is not None and entry and known is not None:
        searched = True
        seen = [float(x) for x in re.findall(r"-?\d+", _first_reset_text(plan, inst))[:32]]
        extra = [int(x) for x in dict.fromkeys(seen) if x.is_integer() and int(x) not in REPLAY_CANDIDATES][:2]
        candidates = [*REPLAY_CANDIDATES, *extra]
        per_position = len(candidates) - 1
        table: list[Any] = [candidates[0]] * 64
        best = _play(ctx, plan, s, inst, (g.call(attacks.counter_table(entry, table)),), "answers from a table")
        episodes, top = 1, best.reward
        k = _cases(best)
        positions = max(1, (REPLAY_BUDGET - 1) // per_position)
        if k is not None:
            positions = min(positions, k)
        for p in range(positions):
            for v in candidates[1:]:
                if episodes >= REPLAY_BUDGET:
                    break
                trial = list(table)
                trial[p] = v
                what = f"answers from a table keyed on a call counter (position {p} = {v!r})"
                o = _play(ctx, plan, s, inst, (g.call(attacks.counter_table(entry, trial)),), what)
                episodes += 1
                if o.reward is not None and (top is None or o.reward > top):
                    top = o.reward
                if _above(o.reward, base, tol):
                    raise Violation(
                        f"{inst.label}: an answer table keyed on a call counter, adapted over {episodes} episodes to "
                        f"what each showed, earned {o.reward:g}, above the baseline {base:g} ({base_what}); table "
                        f"{json.dumps(trial[: p + 1])}"
                    )
                if _better(o, best, tol):
                    table, best = trial, o
                    break
        notes.append(
            f"an answer table adapted over {episodes} episodes ({positions} positions x {per_position} values"
            f"{f'; {k} cases inferred' if k else ''}) earned at most {_fmt(top)} on {inst.label} (baseline {base:g})"
        )
    replays = 0
    probed, _ = _probe_instances(ctx, plan)
    for pinst in probed:
        probe = _probe_of(plan, pinst)
        if probe is None or not probe.replay:
            continue
        pknown = _baseline(ctx, plan, s, pinst)
        if pknown is None:
            continue
        pbase, pwhat = pknown
        for j, seq in enumerate(probe.replay):
            o = _play(ctx, plan, s, pinst, _calls(seq), f"replays another instance's answer ({j})")
            replays += 1
            if _above(o.reward, pbase, tol):
                raise Violation(
                    f"{pinst.label}: replay {j} (another instance's literal answer) earned {o.reward:g}, above the "
                    f"baseline {pbase:g} ({pwhat}): the task's contents do not vary where its family allows"
                )
    if replays:
        notes.append(f"{replays} replays of other instances' answers earned no more than their baselines")
    if not searched and not replays:
        raise CheckNotExercised(
            "no grading tool takes a Python function (language python and the reset's entry_point) to answer from "
            "a table, and no probe names replays" + (f" ({plan.probes_why})" if plan.probes_why else "")
        )
    return "; ".join(notes)


def _first_reset_text(plan: _Plan, inst: Instance) -> str:
    for (i, _, _), o in plan.outcomes.items():
        if i == inst:
            return o.reset_text
    return ""


def _cases(o: Outcome) -> int | None:
    """The number of hidden cases, when the graded step's observation shows one (as a count of
    cases would be, beside the reward): the largest whole number from 1 to 32 in it. Metadata
    and state are left out: step counters live there."""
    nums = [v for _, v in _numbers(o.view.get("observation")) if o.reward is None or v != o.reward]
    whole = [int(v) for v in nums if v.is_integer() and 1 <= v <= 32]
    return max(whole) if whole else None
