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

__all__ = ["ConsoleProgress", "print_summary"]

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow", "error": "bold magenta", "warn": "bold yellow"}
_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERR ", "warn": "WARN"}


class ConsoleProgress(RunProgress):
    """Shows each check as it runs and prints one line per finished check."""

    def __init__(self, console: Console | None = None, verbose: bool = False) -> None:
        self.console = console or Console()
        self.verbose = verbose
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
    for col in ("level", "pass", "fail", "error", "skip"):
        table.add_column(col, justify="right" if col != "level" else "left")
    levels: dict[str, dict[str, int]] = {}
    for r in report.results:
        levels.setdefault(r.level, {"pass": 0, "fail": 0, "error": 0, "skip": 0, "warn": 0})[r.status] += 1
    for level, c in levels.items():
        table.add_row(
            level,
            str(c["pass"]),
            f"[red]{c['fail']}[/]" if c["fail"] else "0",
            f"[magenta]{c['error']}[/]" if c["error"] else "0",
            str(c["skip"]),
        )
    console.print(table)
    c = report.counts()
    if report.declared_nondeterministic:
        console.print("[yellow]note[/]: the environment declares itself nondeterministic; determinism not certified")
    verdict = (
        f"[bold green]{escape(report.verdict)}[/]" if report.certified else f"[bold red]{escape(report.verdict)}[/]"
    )
    unmet = report.requirement_unmet
    if unmet:
        console.print(f"[red]{escape(unmet)}[/]")
    warned = f", {c['warn']} warnings" if c["warn"] else ""
    console.print(
        f"{verdict}: {c['pass']} passed, {c['fail']} failed, {c['error']} errors, {c['skip']} skipped{warned} "
        f"in {report.duration_s:.1f} s (seed {report.seed}); exit {report.exit_code}"
    )
    failed = [r for r in report.results if r.status in ("fail", "error") and r.reproduce]
    for r in failed[:5]:
        console.print(f"  reproduce: [bold]{escape(r.reproduce)}[/]")
