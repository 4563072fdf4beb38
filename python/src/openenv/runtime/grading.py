"""Grading environments (RFC 0015): what a graded step may tell the agent, in one place.

An environment that grades work an agent submits declares it with :class:`Grading` (the class
attribute ``Environment.grading``) and marks its grading tools (``@openenv.tool(grades=True)``,
or RFC 0010's ``{"openenv/sandbox": {..., "grades": true}}``). The session layer
(:mod:`openenv.runtime.session`) then enforces the episode's **feedback level**:

* ``"strict"`` (the default): a grading tool's result is replaced by the step's reward, every
  reward breakdown is its root only, metadata keeps only the keys the environment declares
  public, and a grading tool called outside the step loop is FAILED_PRECONDITION. So nothing
  derived from the grader's hidden data (cases, expected values, per-check verdicts, run times
  of hidden runs) reaches the agent but the reward.
* ``"rich"`` (offered by the environment, asked for at reset with ``options={"feedback":
  "rich"}``): the environment's own results pass unchanged, for curricula and evaluation.

:class:`GradingProbe` is the environment's trusted description of a task for the certifier's
``grading`` level: its reference solution, its null solutions, and literal answers of other
instances to replay. It is never served: ``python -m openenv.runtime.grading_probes
MODULE:CLASS`` prints it as JSON where the environment is installed (the certifier runs it in a
``docker:`` target's image).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from openenv.runtime.rubrics.base import Score
from openenv.runtime.tools import GRADING_ANNOTATION, GRADING_LANGUAGES, CallToolAction, ToolResult

__all__ = [
    "FEEDBACK_LEVELS",
    "GRADING_ANNOTATION",
    "GRADING_LANGUAGES",
    "OPTIONS_KEY",
    "Grading",
    "GradingProbe",
    "ProbeStep",
    "grading_spec",
    "probes_document",
    "strict_breakdown",
    "strict_result",
]

#: The feedback levels, weakest first.
FEEDBACK_LEVELS = ("strict", "rich")
#: RFC 0010's annotation key; ``{"grades": true}`` in it also declares a grading tool.
SANDBOX_ANNOTATION = "openenv/sandbox"
#: The reset options key choosing an episode's feedback level.
OPTIONS_KEY = "feedback"


@dataclasses.dataclass(frozen=True)
class Grading:
    """An environment's grading declaration (``Environment.grading``; RFC 0015).

    Attributes:
        feedback: the level of an episode whose reset does not ask for one.
        offers: the levels an episode may ask for at reset (``options["feedback"]``); always
            holds ``feedback``.
        public_metadata: the metadata keys of a step that pass in a strict episode: only keys
            whose values never derive from the grader's hidden data (a step counter, the task's
            id), since strict feedback drops every other key.
    """

    feedback: str = "strict"
    offers: tuple[str, ...] = ("strict",)
    public_metadata: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "offers", tuple(self.offers))
        object.__setattr__(self, "public_metadata", tuple(self.public_metadata))
        for level in (self.feedback, *self.offers):
            if level not in FEEDBACK_LEVELS:
                raise ValueError(f"unknown feedback level {level!r} (known: {', '.join(FEEDBACK_LEVELS)})")
        if self.feedback not in self.offers:
            raise ValueError(f"the default feedback level {self.feedback!r} must be among offers {self.offers}")

    def level(self, options: Mapping[str, Any] | None) -> str:
        """The episode's level from its reset options; ValueError (with the reason) if not offered."""
        asked = (options or {}).get(OPTIONS_KEY)
        if asked is None:
            return self.feedback
        if asked not in self.offers:
            raise ValueError(
                f"feedback level {asked!r} is not offered (options {OPTIONS_KEY!r}: one of {', '.join(self.offers)})"
            )
        return str(asked)


def grading_spec(annotations: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The grading declaration of a tool's annotations (``{"argument": ..., "language": ...}``,
    either key possibly absent), or None when the tool does not grade."""
    if not annotations:
        return None
    spec = annotations.get(GRADING_ANNOTATION)
    if isinstance(spec, Mapping):
        return {k: spec[k] for k in ("argument", "language") if k in spec}
    if spec is True:
        return {}
    sandbox = annotations.get(SANDBOX_ANNOTATION)
    if isinstance(sandbox, Mapping) and sandbox.get("grades") is True:
        return {k: sandbox[k] for k in ("argument", "language") if k in sandbox}
    return None


def _accepts_object(schema: Mapping[str, Any] | None) -> bool:
    if schema is None:
        return True
    props = schema.get("properties")
    return schema.get("type") == "object" and (not isinstance(props, Mapping) or "result" not in props)


def strict_result(reward: float | None, output_schema: Mapping[str, Any] | None) -> ToolResult:
    """A grading tool's result in a strict episode: the reward and nothing else."""
    text = "reward: " + ("none" if reward is None else f"{reward:g}")
    if _accepts_object(output_schema):
        return ToolResult([{"type": "text", "text": text}], {"reward": reward})
    return ToolResult([{"type": "text", "text": text}], {"result": text})


def strict_breakdown(score: Any) -> Any:
    """The root of a reward breakdown, without its reason and children (a copy)."""
    if score is None:
        return None
    if isinstance(score, Score):
        return Score(score.score, name=score.name, weight=score.weight)
    if hasattr(score, "CopyFrom"):  # a RubricScore message
        out = type(score)()
        out.name, out.score, out.weight = score.name, score.score, score.weight
        return out
    return score


# -- probes: the certifier's trusted view of tasks -----------------------------------------------


#: One step of a probe: a tool call, or ``{"action": A}`` (the environment's own JSON action, for
#: an environment whose actions are not tool calls).
ProbeStep = CallToolAction | dict[str, Any]


def _calls(seq: Sequence[Any]) -> tuple[ProbeStep, ...]:
    out: list[ProbeStep] = []
    for c in seq:
        if isinstance(c, CallToolAction):
            out.append(c)
        elif isinstance(c, Mapping) and isinstance(c.get("tool"), str):
            out.append(CallToolAction(c["tool"], dict(c.get("arguments") or {})))
        elif isinstance(c, Mapping) and set(c) == {"action"}:
            out.append({"action": c["action"]})
        else:
            raise ValueError(
                "a probe's step is a CallToolAction, {'tool': ..., 'arguments': ...} or {'action': A} "
                f"(an environment whose actions are not tool calls), got {c!r}"
            )
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class GradingProbe:
    """One task as the certifier's ``grading`` level plays it (never served to agents).

    Each sequence is the steps of one episode after its reset, the last one grading: tool calls
    (:class:`openenv.CallToolAction` or ``{"tool": ..., "arguments": ...}``), or, for an
    environment whose actions are not tool calls, ``{"action": A}`` with its JSON action.

    Attributes:
        task_id: the task to reset into (RFC 0004), or None (the seed picks).
        seed: the reset's seed.
        options: more reset options (``feedback`` is the certifier's).
        reference: a solution: it must earn the top reward.
        null: solutions that do nothing useful (submitting the untouched work): the baseline.
        replay: literal answers of another instance of the task (another seed), played on this
            one: they must earn no more than the baseline where task contents vary.
    """

    task_id: str | None = None
    seed: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    reference: Sequence[Any] | None = None
    null: Sequence[Sequence[Any]] = ()
    replay: Sequence[Sequence[Any]] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))
        object.__setattr__(self, "reference", None if self.reference is None else _calls(self.reference))
        object.__setattr__(self, "null", tuple(_calls(s) for s in self.null))
        object.__setattr__(self, "replay", tuple(_calls(s) for s in self.replay))

    def to_json(self) -> dict[str, Any]:
        def seq(s: Sequence[ProbeStep]) -> list[dict[str, Any]]:
            return [
                {"tool": c.tool_name, "arguments": dict(c.arguments)} if isinstance(c, CallToolAction) else dict(c)
                for c in s
            ]

        return {
            "task_id": self.task_id,
            "seed": self.seed,
            "options": dict(self.options),
            "reference": None if self.reference is None else seq(self.reference),
            "null": [seq(s) for s in self.null],
            "replay": [seq(s) for s in self.replay],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GradingProbe:
        return cls(
            task_id=data.get("task_id"),
            seed=data.get("seed"),
            options=data.get("options") or {},
            reference=data.get("reference"),
            null=data.get("null") or (),
            replay=data.get("replay") or (),
        )


def _load(factory: str) -> Any:
    if factory.startswith("import:"):  # an imported environment (`openenv serve import:SOURCE:ID`)
        source, _, ident = factory[len("import:") :].partition(":")
        # importlib.metadata only here: importing the runtime must stay cheap (test_lazy_imports.py).
        from importlib.metadata import entry_points

        importers = {ep.name: ep for ep in entry_points(group="openenv.importers")}
        if source not in importers or not ident:
            raise ValueError(f"no importer for {factory!r} (installed: {', '.join(sorted(importers)) or 'none'})")
        return importers[source].load()(ident)
    module, _, attr = factory.partition(":")
    if not module or not attr:
        raise ValueError(f"a factory is MODULE:CLASS, got {factory!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def probes_document(factory: Any) -> dict[str, Any]:
    """The probes of an environment class (or ``MODULE:CLASS``) as the JSON the certifier reads."""
    cls = _load(factory) if isinstance(factory, str) else factory
    get = getattr(cls, "grading_probes", None)
    probes = list(get()) if callable(get) else []
    for p in probes:
        if not isinstance(p, GradingProbe):
            raise TypeError(f"{cls.__name__}.grading_probes() must return GradingProbe objects, got {p!r}")
    doc = {"environment": getattr(cls, "name", "") or cls.__name__, "probes": [p.to_json() for p in probes]}
    json.dumps(doc, allow_nan=False)  # a probe must be JSON (the certifier reads it from a process)
    return doc


def reward_is_top(reward: float | None, top: float | None, tol: float = 1e-6) -> bool:
    """Whether ``reward`` is the top of the range (``top``; 1.0 when the range is unbounded)."""
    if reward is None or not math.isfinite(reward):
        return False
    return reward >= (1.0 if top is None else top) - tol


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m openenv.runtime.grading_probes MODULE:CLASS``: the probes as JSON on stdout."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m openenv.runtime.grading_probes MODULE:CLASS", file=sys.stderr)
        return 2
    try:
        doc = probes_document(args[0])
    except Exception as e:  # noqa: BLE001 - reported to the certifier, which names the target
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
    return 0
