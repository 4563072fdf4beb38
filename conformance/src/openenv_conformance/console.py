"""The terminal: live progress while checks run, then a summary table and the verdict."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from openenv_conformance.registry import Check
from openenv_conformance.report import CheckResult, Report
from openenv_conformance.runner import Progress as RunProgress

__all__ = ["ConsoleProgress", "print_durations", "print_summary"]

_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "skip": "yellow",
    "error": "bold magenta",
    "warn": "bold yellow",
    "not_exercised": "bold cyan",
}
_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERR ", "warn": "WARN", "not_exercised": "NOEX"}


class ConsoleProgress(RunProgress):
    """Shows each check as it runs and prints one line per finished check."""

    def __init__(self, console: Console | None = None, verbose: bool = False, durations: int | None = None) -> None:
        self.console = console or Console()
        self.verbose = verbose
        self.durations = durations
        self._progress: Progress | None = None
        self._task: Any = None

    def waiting(self, target: str, seconds: float) -> None:
        self.console.print(f"[dim]waiting for {escape(target)} (up to {seconds:g} s)[/]")

    def run_started(self, report: Report, checks: list[Check]) -> None:
        env = report.environment
        self.console.print(
            f"[bold]openenv certify[/] {escape(report.target)} -> {escape(report.target_url)}: "
            f"{escape(env.get('name', '?'))} {escape(env.get('version', ''))}, protocol "
            f"{escape(report.protocol_version)} (suite {report.suite_version}, seed {report.seed}, "
            f"max examples {report.max_examples})"
        )
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("starting", total=len(checks))

    def check_started(self, check: Check) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=check.id)

    def check_finished(self, result: CheckResult) -> None:
        line = f"[{_STYLE[result.status]}]{_MARK[result.status]}[/] {result.id:<36} [dim]{result.duration_s:6.2f}s[/]"
        detail = result.reason or (result.note if self.verbose else "")
        if detail:
            line += f"  {escape(detail if len(detail) < 160 or self.verbose else detail[:157] + '...')}"
        self.console.print(line)
        if result.status in ("fail", "error") and result.example:
            self.console.print(f"      [dim]minimal failing example:[/]\n{_indent(escape(result.example))}")
        if self._progress is not None:
            self._progress.advance(self._task)

    def run_finished(self, report: Report) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.durations is not None and report.results:
            print_durations(report, self.durations, self.console)
        print_summary(report, self.console)


def _indent(text: str, n: int = 8) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def print_summary(report: Report, console: Console | None = None) -> None:
    """The summary table (per level) and the verdict line."""
    console = console or Console()
    if report.unusable is not None:
        console.print(f"[bold red]target unusable[/]: {escape(report.unusable)}")
        if report.logs:
            console.print("[dim]target logs (tail):[/]")
            console.print(escape(report.logs[-3000:]), markup=False, highlight=False)
        console.print("[bold red]exit 2[/]")
        return
    table = Table(title="openenv certify summary", show_lines=False)
    for col in ("level", "pass", "fail", "error", "skip", "not exercised"):
        table.add_column(col, justify="right" if col != "level" else "left")
    levels: dict[str, dict[str, int]] = {}
    for r in report.results:
        levels.setdefault(r.level, dict.fromkeys(_MARK, 0))[r.status] += 1
    for level, c in levels.items():
        table.add_row(
            level,
            str(c["pass"]),
            f"[red]{c['fail']}[/]" if c["fail"] else "0",
            f"[magenta]{c['error']}[/]" if c["error"] else "0",
            str(c["skip"]),
            f"[cyan]{c['not_exercised']}[/]" if c["not_exercised"] else "0",
        )
    console.print(table)
    c = report.counts()
    if report.declared_nondeterministic:
        console.print("[yellow]note[/]: the environment declares itself nondeterministic; determinism not certified")
    verdict = (
        f"[bold green]{escape(report.verdict)}[/]" if report.certified else f"[bold red]{escape(report.verdict)}[/]"
    )
    for unmet in (report.requirement_unmet, report.exercise_unmet):
        if unmet:
            console.print(f"[red]{escape(unmet)}[/]")
    idle = report.not_exercised()
    if idle and not report.require_exercised:
        console.print(
            f"[cyan]not exercised[/] (applicable, but nothing their rule is about happened; "
            f"--require-exercised fails the run): {escape(', '.join(idle))}"
        )
    causes = report.causes()
    if causes:
        console.print(f"[bold red]{escape(report.headline())}[/]")
        for i, (title, members) in enumerate(causes, 1):
            echoes = [m.id for m in members[1:]]
            also = f" [dim](also failing from it: {escape(', '.join(echoes))})[/]" if echoes else ""
            console.print(f"  defect {i}: {escape(title)}{also}")
    warned = f", {c['warn']} warnings" if c["warn"] else ""
    console.print(
        f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skip']} skipped, "
        f"{c['not_exercised']} not exercised{warned} "
        f"in {report.duration_s:.1f} s (seed {report.seed}); exit {report.exit_code}"
    )
    failed = [r for r in report.results if r.status in ("fail", "error") and r.reproduce]
    for r in failed[:5]:
        console.print(f"  reproduce: [bold]{escape(r.reproduce)}[/]")


def print_durations(report: Report, n: int, console: Console | None = None) -> None:
    """Where the run's time went (``--durations N``): the ``n`` slowest checks (all with 0),
    the time per level, and what the checks' total leaves for starting the target."""
    console = console or Console()
    ranked = sorted(report.results, key=lambda r: -r.duration_s)
    shown = ranked if n <= 0 else ranked[:n]
    total = sum(r.duration_s for r in report.results)
    table = Table(title=f"slowest checks (of {len(report.results)}; {total:.1f} s in checks)", show_lines=False)
    for col in ("s", "share", "check", "status", "examples"):
        table.add_column(col, justify="right" if col in ("s", "share", "examples") else "left")
    for r in shown:
        share = f"{100 * r.duration_s / total:.0f}%" if total else "-"
        table.add_row(f"{r.duration_s:.2f}", share, r.id, r.status, str(r.examples or ""))
    console.print(table)
    per_level: dict[str, float] = {}
    for r in report.results:
        per_level[r.level] = per_level.get(r.level, 0.0) + r.duration_s
    console.print(
        "per level: "
        + ", ".join(f"{lv} {t:.1f} s" for lv, t in sorted(per_level.items(), key=lambda x: -x[1]))
        + f"; outside the checks (target start, waits): {max(0.0, report.duration_s - total):.1f} s"
    )
