"""``openenv catalog`` (list, certify, markdown) and ``openenv import``; registered in the
``openenv.cli`` entry-point group by protoenv-catalog."""

from __future__ import annotations

import concurrent.futures
import datetime
import fnmatch
import json
import math
import os
import queue
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from openenv_catalog.registry import CERTIFIED_FILE, WORK_KINDS, Entry, entries, skipped_importers

__all__ = ["catalog_command", "import_command", "markdown", "plan", "type_json"]


def type_json(declared: Any) -> Any:
    """A declared action/observation type as JSON: a JSON Schema as it is, a tensor as
    ``{"tensor": {dtype, shape, minimum, maximum}}``, a Python or protobuf type as its name and
    JSON Schema (never a Python repr inside the JSON that ``openenv import`` prints)."""
    import numpy as np

    from openenv.runtime.codec import TensorSpec, codec_for

    def plain(v: Any) -> Any:
        if isinstance(v, (np.ndarray, np.generic)):
            return v.tolist()
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)

    if declared is None:
        return None
    if isinstance(declared, dict):
        return plain(declared)
    if isinstance(declared, TensorSpec):
        tensor: dict[str, Any] = {
            "dtype": str(np.dtype(declared.dtype)),
            "shape": [-1 if d is None else d for d in declared.shape],
        }
        for bound in ("minimum", "maximum"):
            if getattr(declared, bound) is not None:  # per element: a list, null where unbounded
                value = plain(getattr(declared, bound))
                finite = lambda x: x if isinstance(x, (int, float)) and math.isfinite(x) else None  # noqa: E731
                tensor[bound] = [finite(x) for x in value] if isinstance(value, list) else finite(value)
        if declared.categorical:
            tensor["categorical"] = True
        return {"tensor": tensor}
    descriptor = getattr(declared, "DESCRIPTOR", None)
    if descriptor is not None:
        label = descriptor.full_name
    else:
        label = f"{getattr(declared, '__module__', '')}.{getattr(declared, '__qualname__', declared)}"
    try:
        schema = plain(codec_for(declared).json_schema())
    except Exception:  # noqa: BLE001 - a type without a schema is still described by its name
        schema = None
    return {"type": label, "json_schema": schema}


def _matching(
    items: list[Entry], kinds: tuple[str, ...], search: str | None, works: tuple[str, ...] = ()
) -> list[Entry]:
    """The entries of one of ``kinds`` (any, when none) and of one of the kinds of work ``works``
    (any, when none) whose name, source, kind, description or tools contain ``search``
    (case-insensitive)."""
    wanted = {k.lower() for k in kinds}
    work = {w.lower() for w in works}
    out = [e for e in items if (not wanted or e.kind.lower() in wanted) and (not work or e.work in work)]
    if search:
        needle = search.lower()
        out = [
            e
            for e in out
            if any(needle in field.lower() for field in (e.name, e.source, e.kind, e.description, *e.tools))
        ]
    return out


def _by_work(items: list[Entry]) -> list[tuple[str, list[Entry]]]:
    """``items`` grouped by kind of work, in :data:`WORK_KINDS` order (the agentic sets first),
    each group ordered by kind, then as listed."""
    groups = []
    for work in WORK_KINDS:
        group = sorted((e for e in items if e.work == work), key=lambda e: e.kind)
        if group:
            groups.append((work, group))
    return groups


@click.group("catalog", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as JSON.")
@click.option("--kind", "kinds", multiple=True, metavar="KIND", help="Only this kind (repeatable), e.g. box2d.")
@click.option(
    "--work",
    "works",
    multiple=True,
    type=click.Choice(WORK_KINDS, case_sensitive=False),
    help="Only this kind of work (repeatable): agentic (multi-step, tools), reasoning (one answer), game, "
    "control, demo.",
)
@click.option("--search", default=None, metavar="TEXT", help="Only entries whose name, source or tools contain TEXT.")
@click.pass_context
def catalog_command(
    ctx: click.Context, as_json: bool, kinds: tuple[str, ...], works: tuple[str, ...], search: str | None
) -> None:
    """List every available environment, grouped by kind of work (agentic first), then kind: name,
    source, tools, tasks, certification."""
    if ctx.invoked_subcommand is not None:
        return
    every = entries()
    items = _matching(every, kinds, search, works)
    known = sorted({e.kind for e in every})
    unknown = [k for k in kinds if k.lower() not in {x.lower() for x in known}]
    if unknown:
        raise click.BadParameter(f"no kind {', '.join(unknown)}; kinds: {', '.join(known)}", param_hint="--kind")
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in items], indent=2))
        return
    for work, group in _by_work(items):
        click.echo(f"{work} ({len(group)})")
        for e in group:
            cert = f"certified {e.certified['date']}" if e.certified else "not certified"
            if e.certified and e.certified.get("certificate") == "entry":
                cert += " (entry)"
            tools = ",".join(e.tools) or "-"
            click.echo(f"  {e.name:<42} {e.kind:<16} {e.source:<40} tools={tools:<28} tasks={e.tasks or '-':<6} {cert}")
    if not kinds and not search and not works:
        for source, reason in sorted(skipped_importers().items()):
            click.echo(f"(importer {source} unavailable: {reason})")
    shown = f"{len(items)} of {len(every)}" if len(items) != len(every) else f"{len(items)}"
    click.echo(f"{shown} environments, {sum(1 for e in items if e.certified)} certified")


def _certify_one(
    e: Entry, max_examples: int, timeout: float, handshake_timeout: float, seed: int | None
) -> tuple[Entry, int, str, dict[str, Any]]:
    if e.max_examples is not None:
        max_examples = min(max_examples, e.max_examples)
    if e.timeout is not None:
        timeout = max(timeout, e.timeout)
    with tempfile.TemporaryDirectory(prefix="openenv-catalog-") as tmp:
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "openenv.cli", "certify", f"python:{e.target}", "--max-examples"]
        argv += [str(max_examples), "--report", str(report), "--timeout", str(timeout)]
        argv += [f"--serve-arg=--handshake-timeout={handshake_timeout:g}"]
        if seed is not None:
            argv += ["--seed", str(seed)]
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
        data = json.loads(report.read_text()) if report.exists() else {}
    tail = [line for line in proc.stdout.splitlines() if "CERTIFIED" in line]
    return e, proc.returncode, (tail[-1] if tail else proc.stdout[-2000:] + proc.stderr[-2000:]), data


class _Worker:
    """A worker process giving entry certificates (openenv_catalog.certify), one entry at a
    time on its stdin: its imports are paid once, its entries come as it finishes them."""

    def __init__(self, max_examples: int, timeout: float, seed: int | None, entry_timeout: float = 600.0) -> None:
        self.entry_timeout = entry_timeout
        argv = [sys.executable, "-m", "openenv_catalog.certify", "--max-examples", str(max_examples)]
        argv += ["--timeout", str(timeout)]
        if seed is not None:
            argv += ["--seed", str(seed)]
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, bufsize=1
        )

    def certify(self, e: Entry) -> tuple[Entry, int, str, dict[str, Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(e.target + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.entry_timeout)
            if not ready:  # a hang guard: this entry fails, the next one gets a new worker
                self.proc.kill()
                self.proc.wait()
                return e, 2, f"no entry certificate within {self.entry_timeout:g} s (the worker was stopped)", {}
            line = self.proc.stdout.readline()
            rec = json.loads(line)
        except (OSError, ValueError):
            self.stderr.seek(0)
            tail = self.stderr.read()[-1500:]
            return e, 2, f"no entry certificate (the worker ended: {self.proc.poll()}): {tail}", {}
        return e, int(rec["exit_code"]), str(rec["line"]), rec

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def plan(
    every: list[Entry], items: list[Entry], *, full_all: bool = False
) -> tuple[list[Entry], list[Entry], dict[str, list[str]]]:
    """What certifying ``items`` takes: the entries certified in full (natives, importers'
    representatives; all with ``full_all``), those given an entry certificate, and the
    representatives each importer's entry certificates stand on (``importer -> names``).

    An entry certificate stands on its importer's full ones: a representative is certified
    in full in the same run even when the selection left it out."""
    full = [e for e in items if full_all or e.representative]
    light = [e for e in items if not (full_all or e.representative)]
    covered_by: dict[str, list[str]] = {}
    for importer in sorted({e.importer for e in light}):
        reps = [r for r in every if r.importer == importer and r.representative]
        if not reps:
            raise click.ClickException(f"importer {importer} has no representative to certify in full")
        covered_by[importer] = sorted(r.name for r in reps)
        full += [r for r in reps if r not in full]
    return full, light, covered_by


@catalog_command.command("certify")
@click.option("--jobs", "-j", type=click.IntRange(1), default=2, show_default=True, help="Certifications at once.")
@click.option(
    "--max-examples", type=click.IntRange(1), default=10, show_default=True, help="Examples per search (full)."
)
@click.option(
    "--entry-examples",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="Examples per search of an entry certificate.",
)
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds to wait for any one answer.")
@click.option(
    "--handshake-timeout",
    type=click.FloatRange(1.0, 60.0),
    default=3.0,
    show_default=True,
    # The deadline is the runtime's, not the environment's: protocol.handshake_deadline checks
    # that the server keeps the one it advertises, and waits for it (10 s at the default).
    help="The servers' handshake deadline (`openenv serve --handshake-timeout`), which one check waits out.",
)
@click.option(
    "--seed",
    type=click.IntRange(0),
    default=None,
    help="The suite's seed for every environment (CI fixes one, so that a run is repeatable); random by default.",
)
@click.option("--only", "patterns", multiple=True, metavar="PATTERN", help="Names to certify (shell pattern).")
@click.option(
    "--skip",
    "skips",
    multiple=True,
    metavar="PATTERN",
    # CI certifies the native environments as their images in the same run (.ci/run).
    help="Names not to certify (shell pattern), e.g. environments certified otherwise in the same run.",
)
@click.option(
    "--full",
    "full_all",
    is_flag=True,
    help="Certify every entry in full (every check, its own server), not only natives and representatives.",
)
@click.option("--write", is_flag=True, help="Record the results in the catalog's certified.json.")
def certify_command(
    jobs: int,
    max_examples: int,
    entry_examples: int,
    timeout: float,
    handshake_timeout: float,
    seed: int | None,
    patterns: tuple[str, ...],
    skips: tuple[str, ...],
    full_all: bool,
    write: bool,
) -> None:
    """Certify every catalog environment (servers on loopback), in parallel.

    Natives and each importer's representatives get a full certificate (every check, the
    environment served in a subprocess); every other imported entry an entry certificate
    (the checks that differ between entries of one importer, openenv_catalog.certify), many
    entries per worker process. docs/catalog.md says what each covers. Exit status 1 when
    any environment is not certified; the counts and the time are printed last."""
    t0 = time.monotonic()
    every = entries()
    selected = [e for e in every if not patterns or any(fnmatch.fnmatch(e.name, p) for p in patterns)]
    items = [e for e in selected if not any(fnmatch.fnmatch(e.name, p) for p in skips)]
    if skips:
        click.echo(f"catalog: skipping {len(selected) - len(items)} environments matching {' '.join(skips)}")
    if not items:
        raise click.ClickException("no catalog environment matches")
    full, light, covered_by = plan(every, items, full_all=full_all)
    click.echo(
        f"catalog: {len(full)} full certifications (natives, importers' representatives), "
        f"{len(light)} entry certificates, {jobs} at once"
    )
    records: dict[str, Any] = json.loads(CERTIFIED_FILE.read_text()) if CERTIFIED_FILE.exists() else {}
    failed: list[str] = []
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    # One queue, longest first: the full certifications, then the entries. Each job takes the
    # next task when it is done with one; a job's entries go to its own worker process.
    tasks: queue.SimpleQueue[tuple[str, Entry]] = queue.SimpleQueue()
    for e in full:
        tasks.put(("full", e))
    for e in light:
        tasks.put(("entry", e))
    results: queue.SimpleQueue[tuple[str, tuple[Entry, int, str, dict[str, Any]]]] = queue.SimpleQueue()

    def job() -> None:
        worker: _Worker | None = None
        try:
            while True:
                try:
                    kind, e = tasks.get_nowait()
                except queue.Empty:
                    return
                try:
                    if kind == "full":
                        results.put((kind, _certify_one(e, max_examples, timeout, handshake_timeout, seed)))
                        continue
                    if worker is None or worker.proc.poll() is not None:
                        worker = _Worker(entry_examples, timeout, seed)
                    results.put((kind, worker.certify(e)))
                except Exception as ex:  # noqa: BLE001 - a certification that broke is a failed one
                    results.put((kind, (e, 2, f"the certification broke: {type(ex).__name__}: {ex}", {})))
        finally:
            if worker is not None:
                worker.close()

    def record(e: Entry, rc: int, line: str, data: dict[str, Any], kind: str) -> None:
        click.echo(f"{'ok  ' if rc == 0 else 'FAIL'} {e.name:<44} {line}")
        if rc != 0:
            # What failed and why, from the report, so a CI log alone is enough to act on.
            for r in data.get("results", []):
                if r.get("status") in ("fail", "error"):
                    click.echo(f"     {r.get('id')}: {r.get('status')}: {r.get('reason', '')}"[:2000])
            failed.append(e.name)
            records.pop(e.name, None)
            return
        counts = data.get("counts", {})
        rec: dict[str, Any] = {
            "date": today,
            "target": f"python:{e.target}",
            "suite": data.get("suite_version", ""),
            "certificate": kind,
            "max_examples": max_examples if kind == "full" else entry_examples,
            "passed": counts.get("pass", 0),
            "skipped": counts.get("skip", 0),
            "nondeterministic": bool(data.get("declared_nondeterministic", data.get("nondeterministic", False))),
        }
        if kind == "entry":
            rec["covered_by"] = covered_by.get(e.importer, [])
        records[e.name] = rec

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        running = [pool.submit(job) for _ in range(jobs)]
        for _ in range(len(full) + len(light)):
            kind, (e, rc, line, data) = results.get()
            record(e, rc, line, data, kind)
        for fut in running:
            fut.result()
    failed_reps = [e.name for e in full if e.name in failed and e.importer]
    if failed_reps:  # an entry certificate without its importer's full one certifies nothing
        for e in light:
            if e.name not in failed and any(r in failed_reps for r in covered_by.get(e.importer, [])):
                click.echo(f"FAIL {e.name:<44} its importer's representative is not certified")
                failed.append(e.name)
                records.pop(e.name, None)
    if write:
        CERTIFIED_FILE.write_text(json.dumps(dict(sorted(records.items())), indent=2) + "\n")
    n = len(full) + len(light)
    click.echo(
        f"catalog: {n - len(set(failed))} of {n} environments certified "
        f"({len(full)} full, {len(light)} entry) in {time.monotonic() - t0:.0f} s"
    )
    if failed:
        raise click.ClickException(f"not certified: {', '.join(sorted(set(failed)))}")


_WORK_TITLES = {
    "agentic": "Agentic, multi-step",
    "reasoning": "Single-turn reasoning",
    "game": "Games",
    "control": "Control",
    "demo": "Protocol demos",
}
_WORK_TEXT = {
    "agentic": (
        "Multi-step work with tools on a state the agent changes (a shell, a repository, a browser, a database), "
        "graded at the end by checks out of the agent's reach (RFC 0015). The environments to train coding and "
        "terminal agents on. Baselines: the null agent, the reference solutions and a scripted agent, where the "
        "Baselines column links them."
    ),
    "reasoning": "A question answered in one submission, scored by the dataset's own scorer.",
    "game": "Games against the rules or against other players (multi-agent: docs/multiagent.md).",
    "control": "Observation-action loops over simulators (docs/simulators.md).",
    "demo": "Protocol examples: they exercise the framework and train nothing.",
}


def _link(url: str) -> str:
    """A Markdown link from docs/ to ``url`` (a repository path, with an anchor, or a URL)."""
    if not url:
        return "-"
    target = url if "://" in url else f"../{url}"
    return f"[baselines]({target})"


def markdown(items: list[Entry]) -> str:
    """docs/catalog.md: the catalog as Markdown, a section per kind of work, the agentic sets first
    (generated; do not edit by hand)."""
    kinds = sorted({e.kind for e in items})
    full = sum(1 for e in items if e.certified and e.certified.get("certificate", "full") == "full")
    entry = sum(1 for e in items if e.certified and e.certified.get("certificate") == "entry")
    groups = _by_work(items)
    counts = ", ".join(f"{len(g)} {w}" for w, g in groups)
    lines = [
        "# Environment catalog",
        "",
        "Generated by `openenv catalog markdown` from the installed packages' entry points; do not",
        "edit by hand. Serve any entry with `openenv serve TARGET`; list them with `openenv catalog`",
        "(`--work WORK`, `--kind KIND`, `--search TEXT`); Gymnasium entries open with `openenv.gym.make` with the",
        "original's spaces exactly (docs/training.md, Spaces). The simulators (`mujoco-*`, `ale-*`) and",
        "`finance-portfolio`: [simulators.md](simulators.md) (options, frames, data).",
        "",
        "Each entry says the kind of work it is, so you can pick: **agentic** (multi-step, tools, a state",
        "the agent changes, graded at the end), **reasoning** (one answer to one question), **game**,",
        "**control** (a simulator's observation-action loop), **demo** (a protocol example). The agentic",
        "sets come first.",
        "",
        "Every entry is certified in CI. The native environments (envs/) are certified in full as their",
        "images (`openenv certify docker:IMAGE`, with their certify-args). An imported entry's",
        "certificate is one of two, named in the Certificate column:",
        "",
        "- **full**: every check of `openenv certify python:TARGET` (10 examples per property), the",
        "  environment served in its own process. Each importer's representatives get one: it covers",
        "  the importer's generic code (protocol, engine, sessions, vectors, concurrency, robustness,",
        "  the adapter's translation), the same for all its entries.",
        "- **entry**: what differs between two entries of one importer, over gRPC on loopback",
        "  (5 examples per property): the advertised types and the entry's example actions (they",
        "  validate; Gymnasium spaces come back exactly), observations against the types, invalid",
        "  actions refused, step and state before the first reset, step counts, episode ids, close,",
        "  the same seed giving the same episode whatever the episode id, finite and in-range",
        "  rewards, its tools (valid and invalid arguments). It stands on its importer's full",
        "  certificates (named by `covered_by` in certified.json): an entry is not certified when",
        "  they are not. Many entries share a worker process (the imports are paid once), every",
        "  entry on its own server; `openenv catalog certify --full` certifies every entry in full.",
        "",
        f"{len(items)} environments ({counts}) in {len(kinds)} kinds ({full} full certificates, "
        f"{entry} entry certificates).",
    ]
    for work, group in groups:
        lines += ["", f"## {_WORK_TITLES.get(work, work)} ({len(group)})", "", _WORK_TEXT.get(work, ""), ""]
        if work == "agentic":
            lines += [
                "| Name | Kind | Source | Serve target | Tools | Tasks | Baselines | Certified | Certificate |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
        else:
            lines += [
                "| Name | Kind | Source | Serve target | Tools | Tasks | Certified | Certificate |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
        for e in group:
            cert = e.certified["date"] if e.certified else "no"
            scope = (e.certified or {}).get("certificate", "full") if e.certified else "-"
            tools = ", ".join(f"`{t}`" for t in e.tools) or "-"
            base = f" {_link(e.baselines)} |" if work == "agentic" else ""
            row = f"| {e.name} | {e.kind} | {e.source} | `{e.target}` | {tools} | {e.tasks or '-'} |"
            lines.append(f"{row}{base} {cert} | {scope} |")
    skipped = sorted(skipped_importers().items())
    if skipped:
        lines += ["", "## Not available here", ""]
        for source, reason in skipped:
            lines.append(f"- `{source}`: {reason}.")
    return "\n".join(lines) + "\n"


@catalog_command.command("markdown")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write here (default: stdout).")
def markdown_command(output: str | None) -> None:
    """The catalog as Markdown (docs/catalog.md is this output)."""
    text = markdown(entries())
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)


@click.command("import")
@click.argument("spec")
@click.option(
    "--serve", "serve_args", is_flag=False, flag_value="", default=None, help="Serve it (`openenv serve import:SPEC`)."
)
def import_command(spec: str, serve_args: str | None) -> None:
    """Import SPEC (gymnasium:ENV_ID, reasoning_gym:DATASET, textarena:GAME, openspiel:GAME,
    pettingzoo:ID, verifiers:MODULE) and describe it: name, types, tools, its agents when it is a
    multi-agent environment, and the one-liner that serves it."""
    from openenv.cli.common import load_factory

    target = spec if spec.startswith("import:") else f"import:{spec}"
    cls = load_factory(target)
    info: dict[str, Any] = {
        "name": cls.name,
        "description": cls.description,
        "target": target,
        "action_type": type_json(cls.action_type),
        "observation_type": type_json(cls.observation_type),
        "tools": sorted(getattr(cls, "__openenv_tools__", {}) or {}),
        "deterministic": cls.deterministic,
        "max_episode_steps": cls.max_episode_steps,
        "serve": f"openenv serve {target}",
        "certify": f"openenv certify python:{target}",
    }
    from openenv import MultiAgentEnvironment

    if isinstance(cls, type) and issubclass(cls, MultiAgentEnvironment):
        info["agents"] = cls.agent_roles()
        info["mode"] = "simultaneous" if cls.simultaneous else "turn-based"
        info["hidden_information"] = cls.hidden_information
    if serve_args is None:
        click.echo(json.dumps(info, indent=2))
        return
    os.execv(sys.executable, [sys.executable, "-m", "openenv.cli", "serve", target, *serve_args.split()])
