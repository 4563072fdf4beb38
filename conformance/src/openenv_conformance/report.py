"""The certificate: every check's outcome, and its JSON, JUnit XML and Markdown forms.

JSON (``Report.to_dict``) is the stable, machine-readable form (``format`` names its
version). A failing check carries its reason, the minimal failing example Hypothesis
found, and the seed that reproduces it (``reproduce`` is the command line).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import xml.etree.ElementTree as ET
from typing import Any

__all__ = ["CAUSES", "EXIT_CERTIFIED", "EXIT_FAILED", "EXIT_UNUSABLE", "STATUSES", "CheckResult", "Cause", "Report"]

EXIT_CERTIFIED = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2
REPORT_FORMAT = "openenv-certify-report/1"
_LOG_TAIL = 20_000

#: Every status a check can end with. ``not_exercised``: the check applies, but nothing its
#: rule is about happened in the run (no step outlived its timeout, no episode ended), so the
#: rule was not verified; it is not a pass. It certifies by default, named in the verdict
#: (``CERTIFIED (grpc, 52 checks; 2 not exercised)``); ``--require-exercised`` makes it a failure.
STATUSES = ("pass", "fail", "skip", "error", "warn", "not_exercised")


@dataclasses.dataclass(frozen=True)
class Cause:
    """An observed defect that more than one check can see: ``check`` is the one whose rule
    it breaks (the group's head in the report), ``title`` says it in one line."""

    check: str
    title: str


#: The defects the suite recognises by name (``Violation(cause=...)``): the report groups the
#: failures of one cause under it, headed by the check whose rule it breaks.
CAUSES: dict[str, Cause] = {
    "step_count": Cause("lifecycle.step_count", "step_count does not follow the accepted steps"),
    "episode_id": Cause("lifecycle.episode_ids", "episode ids are not the current episode's"),
    "episode_status": Cause("lifecycle.state_machine", "the episode status does not follow its steps"),
    "step_after_end": Cause(
        "lifecycle.step_after_end", "a step after the end of an episode is accepted (no auto_reset declared)"
    ),
    "state_fails": Cause("lifecycle.state_never_fails", "state answers an error"),
    "fatal_refusal": Cause("schema.invalid_actions", "a refused request ends the session (fatal)"),
    "refusal_code": Cause("lifecycle.state_machine", "a request is refused with a code the error table does not allow"),
    "nondeterministic": Cause("determinism.same_seed", "the same seed and actions give different episodes"),
    "event_loop_blocked": Cause(
        "concurrency.event_loop_live", "a hook blocks the server's event loop (other sessions stall, timeouts are late)"
    ),
    "target_exited": Cause("robustness.still_serving", "the target exited during the run"),
}


@dataclasses.dataclass
class CheckResult:
    """One check's outcome. ``status`` is ``pass``, ``fail``, ``skip``, ``warn``,
    ``not_exercised`` (see :data:`STATUSES`) or ``error`` (the check itself could not run to
    completion, e.g. the target died). ``cause`` (a key of :data:`CAUSES`, or "") names the
    observed defect behind a failure when the suite recognises it."""

    id: str
    level: str
    title: str
    rule: str
    status: str
    reason: str = ""
    example: str | None = None
    seed: int | None = None
    duration_s: float = 0.0
    note: str = ""
    reproduce: str = ""
    examples: int | None = None
    cause: str = ""

    @property
    def ok(self) -> bool:
        """Not a failure (``not_exercised`` included: :attr:`Report.certified` decides about it)."""
        return self.status in ("pass", "skip", "warn", "not_exercised")


@dataclasses.dataclass
class Report:
    """A certification run."""

    target: str
    suite_version: str
    suite_protocol_version: str
    seed: int
    max_examples: int
    levels: list[str]
    started_at: str = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    )
    target_url: str = ""
    #: ``grpc`` or ``http``: the transport the checks spoke.
    transport: str = ""
    #: The target's other transport, compared by the parity check ("" when it has none).
    parity_url: str = ""
    protocol_version: str = ""
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    capabilities: dict[str, Any] = dataclasses.field(default_factory=dict)
    declared_nondeterministic: bool = False
    results: list[CheckResult] = dataclasses.field(default_factory=list)
    unusable: str | None = None
    logs: str | None = None
    duration_s: float = 0.0
    #: The checks skipped because the transport cannot express them (a subset certification).
    transport_skipped: list[str] = dataclasses.field(default_factory=list)
    #: ``--require-transport``: the transport the certificate must cover in full ("" for any).
    required_transport: str = ""
    #: A docker: target's image digest (``openenv_conformance.certificate.content_digest``: its
    #: layers, run configuration and labels), read before the container started ("" for other
    #: targets); ``image_id`` is the engine's id of the image the container started from.
    image_digest: str = ""
    image_id: str = ""
    #: The run's options that bound what the checks accept (the ``sandbox`` level's bounds,
    #: when it ran: ``sandbox_memory_bound``, ``sandbox_disk_bound``, ``sandbox_files_bound``,
    #: ``sandbox_timeout``, ``sandbox_secrets``; the ``grading`` level's ``grading_probes`` and
    #: ``grading_timeout``).
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: ``--require-exercised``: a check that was not exercised is a failure.
    require_exercised: bool = False

    # -- verdict

    @property
    def coverage(self) -> str:
        """What the verdict covers: ``grpc, 42 checks`` or ``http subset, 24 checks`` (the
        checks that ran; a subset when some could not be expressed over the transport), then
        ``; 2 not exercised`` when some checks applied but saw nothing of their rule."""
        ran = sum(1 for r in self.results if r.status not in ("skip", "not_exercised"))
        subset = " subset" if self.transport_skipped else ""
        idle = self.not_exercised()
        return f"{self.transport or '?'}{subset}, {ran} checks" + (f"; {len(idle)} not exercised" if idle else "")

    def not_exercised(self) -> list[str]:
        """The checks that applied but saw nothing of their rule."""
        return [r.id for r in self.results if r.status == "not_exercised"]

    @property
    def requirement_unmet(self) -> str | None:
        """Why ``required_transport`` is not met (None when it is, or when none is required)."""
        req = self.required_transport
        if not req:
            return None
        if self.transport != req:
            return f"--require-transport {req}: the target was certified over {self.transport or 'nothing'}"
        if self.transport_skipped:
            return (
                f"--require-transport {req}: {len(self.transport_skipped)} checks could not run over {req} "
                f"({', '.join(self.transport_skipped[:3])}{', ...' if len(self.transport_skipped) > 3 else ''})"
            )
        return None

    @property
    def exercise_unmet(self) -> str | None:
        """Why ``require_exercised`` is not met (None when it is, or when it is not required)."""
        idle = self.not_exercised()
        if not self.require_exercised or not idle:
            return None
        return f"--require-exercised: {len(idle)} checks were not exercised ({', '.join(idle)})"

    @property
    def certified(self) -> bool:
        return (
            self.unusable is None
            and bool(self.results)
            and all(r.ok for r in self.results)
            and self.requirement_unmet is None
            and self.exercise_unmet is None
        )

    @property
    def verdict(self) -> str:
        """``CERTIFIED (grpc, 42 checks)``, ``NOT CERTIFIED (http subset, 24 checks)`` or
        ``UNUSABLE``: the verdict names the transport and the coverage."""
        if self.unusable is not None:
            return "UNUSABLE"
        return f"{'CERTIFIED' if self.certified else 'NOT CERTIFIED'} ({self.coverage})"

    @property
    def exit_code(self) -> int:
        """0 certified, 1 a check failed, 2 the target was unusable."""
        if self.unusable is not None:
            return EXIT_UNUSABLE
        return EXIT_CERTIFIED if self.certified else EXIT_FAILED

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def result(self, check_id: str) -> CheckResult:
        """The result of ``check_id`` (KeyError when it did not run)."""
        for r in self.results:
            if r.id == check_id:
                return r
        raise KeyError(check_id)

    def failed_ids(self) -> list[str]:
        return [r.id for r in self.results if r.status in ("fail", "error")]

    def causes(self) -> list[tuple[str, list[CheckResult]]]:
        """The failures grouped by the defect behind them, most seen first: (headline, the
        failing results, the group's head first). Failures of one recognised cause
        (:data:`CAUSES`) form one group headed by the check whose rule the defect breaks (or
        the first that saw it); every other failure is a group of its own, under its reason."""
        failed = [r for r in self.results if r.status in ("fail", "error")]
        groups: dict[str, list[CheckResult]] = {}
        for r in failed:
            groups.setdefault(r.cause if r.cause in CAUSES else f"check:{r.id}", []).append(r)
        out: list[tuple[str, list[CheckResult]]] = []
        for key, members in groups.items():
            cause = CAUSES.get(key)
            if cause is not None:
                members.sort(key=lambda r: r.id != cause.check)  # stable: the head first
                head = members[0]
                title = f"{cause.title} ({head.id}: {_first_line(head.reason)})"
            else:
                title = f"{members[0].id}: {_first_line(members[0].reason)}"
            out.append((title, members))
        out.sort(key=lambda g: -len(g[1]))  # stable: run order among groups of one size
        return out

    def headline(self) -> str:
        """The first line a user reads: the verdict, then the defects behind the failures."""
        if self.unusable is not None:
            return f"UNUSABLE: {self.unusable}"
        causes = self.causes()
        if not causes:
            return self.verdict
        n = sum(len(m) for _, m in causes)
        lead = f"{len(causes)} defect{'s' if len(causes) != 1 else ''} behind {n} failing check{'s' if n != 1 else ''}"
        return f"{self.verdict}: {lead}; first: {causes[0][0]}"

    # -- forms

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d = {
            "format": REPORT_FORMAT,
            **d,
            "certified": self.certified,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "not_exercised": self.not_exercised(),
            "headline": self.headline(),
            "causes": [{"cause": t, "checks": [r.id for r in m]} for t, m in self.causes()],
        }
        if d.get("logs") and len(d["logs"]) > _LOG_TAIL:
            d["logs"] = "...\n" + d["logs"][-_LOG_TAIL:]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def to_junit(self) -> str:
        """JUnit XML: one testsuite per level, one testcase per check (classname = level)."""
        root = ET.Element("testsuites", name=f"openenv certify {self.target}")
        if self.unusable is not None:
            suite = ET.SubElement(root, "testsuite", name="target", tests="1", failures="0", errors="1", skipped="0")
            case = ET.SubElement(suite, "testcase", classname="openenv.certify.target", name="usable")
            err = ET.SubElement(case, "error", message=self.unusable)
            err.text = self.logs or self.unusable
        by_level: dict[str, list[CheckResult]] = {}
        for r in self.results:
            by_level.setdefault(r.level, []).append(r)
        total_time = 0.0
        for level, results in by_level.items():
            suite = ET.SubElement(
                root,
                "testsuite",
                name=f"openenv.certify.{level}",
                tests=str(len(results)),
                failures=str(sum(r.status == "fail" for r in results)),
                errors=str(sum(r.status == "error" for r in results)),
                skipped=str(sum(r.status in ("skip", "not_exercised") for r in results)),
                time=f"{sum(r.duration_s for r in results):.3f}",
            )
            for r in results:
                total_time += r.duration_s
                case = ET.SubElement(
                    suite, "testcase", classname=f"openenv.certify.{level}", name=r.id, time=f"{r.duration_s:.3f}"
                )
                if r.status in ("fail", "error"):
                    el = ET.SubElement(case, "failure" if r.status == "fail" else "error", message=r.reason[:500])
                    el.text = _details(r)
                elif r.status == "skip":
                    ET.SubElement(case, "skipped", message=r.reason[:500])
                elif r.status == "not_exercised":
                    ET.SubElement(case, "skipped", type="not_exercised", message=f"not exercised: {r.reason}"[:500])
                elif r.status == "warn":
                    ET.SubElement(case, "system-out").text = f"warning: {r.reason}"
        root.set("tests", str(len(self.results)))
        root.set("failures", str(self.counts()["fail"]))
        root.set("errors", str(self.counts()["error"] + (self.unusable is not None)))
        root.set("time", f"{total_time:.3f}")
        ET.indent(root)
        return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

    def to_markdown(self) -> str:
        """A human summary (e.g. for a CI job summary)."""
        env = self.environment
        name = f"{env.get('name', '?')} {env.get('version', '')}".strip()
        lines = [f"# openenv certify: {name or self.target}", "", f"**{self.headline()}**", ""]
        if self.unusable is not None:
            verdict = "**target unusable** (exit 2)"
        elif self.certified:
            verdict = "**certified** (exit 0)"
        else:
            verdict = "**not certified** (exit 1)"
        c = self.counts()
        lines += [
            f"- Verdict: {verdict}",
            f"- Target: `{self.target}`"
            + (f" ({self.target_url})" if self.target_url else "")
            + (f", parity with {self.parity_url}" if self.parity_url else ""),
            f"- Protocol: server {self.protocol_version or '?'}, suite {self.suite_protocol_version}; "
            f"suite version {self.suite_version}",
            f"- Checks: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skip']} skipped, "
            f"{c['not_exercised']} not exercised "
            f"in {self.duration_s:.1f} s (seed {self.seed}, max examples {self.max_examples})",
        ]
        if self.exercise_unmet:
            lines.append(f"- {self.exercise_unmet}")
        if self.declared_nondeterministic:
            lines.append("- The environment declares itself **nondeterministic**: determinism was not certified.")
        if self.options:
            lines.append("- Options: " + ", ".join(f"{k} {v}" for k, v in self.options.items()))
        if self.unusable is not None:
            lines += ["", "## Why the target is unusable", "", "```", self.unusable, "```"]
        if self.results:
            lines += ["", "| Check | Level | Result | Reason |", "| --- | --- | --- | --- |"]
            icons = {
                "pass": "pass",
                "fail": "**FAIL**",
                "skip": "skip",
                "error": "**ERROR**",
                "warn": "warn",
                "not_exercised": "*not exercised*",
            }
            for r in self.results:
                reason = (r.reason or r.note).replace("|", "\\|").replace("\n", " ")
                lines.append(f"| `{r.id}` | {r.level} | {icons[r.status]} | {reason[:200]} |")
        failures = [r for r in self.results if r.status in ("fail", "error")]
        causes = self.causes()
        if causes:
            lines += ["", "## Defects", ""]
            for title, members in causes:
                echoes = [m.id for m in members[1:]]
                also = f" (also failing from it: {', '.join(f'`{i}`' for i in echoes)})" if echoes else ""
                lines.append(f"- {title.replace('|', '/')}{also}")
        for r in failures:
            lines += ["", f"## `{r.id}`: {r.title}", "", f"Rule: {r.rule}", "", r.reason]
            if r.example:
                lines += ["", "Minimal failing example:", "", "```", r.example, "```"]
            if r.reproduce:
                lines += ["", f"Reproduce: `{r.reproduce}`"]
        if self.logs and (failures or self.unusable):
            tail = self.logs[-4000:]
            lines += ["", "## Target logs (tail)", "", "```", tail, "```"]
        return "\n".join(lines) + "\n"


def _first_line(text: str, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _details(r: CheckResult) -> str:
    parts = [r.reason]
    if r.example:
        parts += ["", "Minimal failing example:", r.example]
    if r.seed is not None:
        parts += ["", f"Seed: {r.seed}"]
    if r.reproduce:
        parts += [f"Reproduce: {r.reproduce}"]
    return "\n".join(parts)
