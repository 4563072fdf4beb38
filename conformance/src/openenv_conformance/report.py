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

__all__ = ["EXIT_CERTIFIED", "EXIT_FAILED", "EXIT_UNUSABLE", "CheckResult", "Report"]

EXIT_CERTIFIED = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2
REPORT_FORMAT = "openenv-certify-report/1"
_LOG_TAIL = 20_000


@dataclasses.dataclass
class CheckResult:
    """One check's outcome. ``status`` is ``pass``, ``fail``, ``skip`` or ``error`` (the
    check itself could not run to completion, e.g. the target died)."""

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

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip", "warn")


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
    #: ``sandbox_timeout``, ``sandbox_secrets``).
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    # -- verdict

    @property
    def coverage(self) -> str:
        """What the verdict covers: ``grpc, 42 checks`` or ``http subset, 24 checks`` (the
        checks that ran; a subset when some could not be expressed over the transport)."""
        ran = sum(1 for r in self.results if r.status != "skip")
        subset = " subset" if self.transport_skipped else ""
        return f"{self.transport or '?'}{subset}, {ran} checks"

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
    def certified(self) -> bool:
        return (
            self.unusable is None
            and bool(self.results)
            and all(r.ok for r in self.results)
            and self.requirement_unmet is None
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
        out = {"pass": 0, "fail": 0, "skip": 0, "error": 0, "warn": 0}
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
                skipped=str(sum(r.status == "skip" for r in results)),
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
        lines = [f"# openenv certify: {name or self.target}", ""]
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
            f"- Checks: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skip']} skipped "
            f"in {self.duration_s:.1f} s (seed {self.seed}, max examples {self.max_examples})",
        ]
        if self.declared_nondeterministic:
            lines.append("- The environment declares itself **nondeterministic**: determinism was not certified.")
        if self.options:
            lines.append("- Options: " + ", ".join(f"{k} {v}" for k, v in self.options.items()))
        if self.unusable is not None:
            lines += ["", "## Why the target is unusable", "", "```", self.unusable, "```"]
        if self.results:
            lines += ["", "| Check | Level | Result | Reason |", "| --- | --- | --- | --- |"]
            icons = {"pass": "pass", "fail": "**FAIL**", "skip": "skip", "error": "**ERROR**", "warn": "warn"}
            for r in self.results:
                reason = (r.reason or r.note).replace("|", "\\|").replace("\n", " ")
                lines.append(f"| `{r.id}` | {r.level} | {icons[r.status]} | {reason[:200]} |")
        failures = [r for r in self.results if r.status in ("fail", "error")]
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


def _details(r: CheckResult) -> str:
    parts = [r.reason]
    if r.example:
        parts += ["", "Minimal failing example:", r.example]
    if r.seed is not None:
        parts += ["", f"Seed: {r.seed}"]
    if r.reproduce:
        parts += [f"Reproduce: {r.reproduce}"]
    return "\n".join(parts)
