"""``openenv catalog`` (list, certify, markdown) and ``openenv import``; registered in the
``openenv.cli`` entry-point group by protoenv-catalog."""

from __future__ import annotations

import concurrent.futures
import datetime
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from openenv_catalog.registry import CERTIFIED_FILE, Entry, entries, skipped_importers

__all__ = ["catalog_command", "import_command", "markdown", "type_json"]


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
        tensor = {"dtype": str(np.dtype(declared.dtype)), "shape": [-1 if d is None else d for d in declared.shape]}
        for bound in ("minimum", "maximum"):
            if getattr(declared, bound) is not None:
                tensor[bound] = plain(getattr(declared, bound))
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


@click.group("catalog", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the catalog as JSON.")
@click.pass_context
def catalog_command(ctx: click.Context, as_json: bool) -> None:
    """List every available environment: name, kind, source, tools, tasks, certification."""
    if ctx.invoked_subcommand is not None:
        return
    items = entries()
    if as_json:
        click.echo(json.dumps([e.to_dict() for e in items], indent=2))
        return
    for e in items:
        cert = f"certified {e.certified['date']}" if e.certified else "not certified"
        tools = ",".join(e.tools) or "-"
        click.echo(f"{e.name:<44} {e.kind:<12} {e.source:<40} tools={tools:<28} tasks={e.tasks or '-':<6} {cert}")
    for source, reason in sorted(skipped_importers().items()):
        click.echo(f"(importer {source} unavailable: {reason})")
    click.echo(f"{len(items)} environments, {sum(1 for e in items if e.certified)} certified")


def _certify_one(
    e: Entry, max_examples: int, timeout: float, handshake_timeout: float, seed: int | None
) -> tuple[Entry, int, str, dict[str, Any]]:
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


@catalog_command.command("certify")
@click.option("--jobs", "-j", type=click.IntRange(1), default=2, show_default=True, help="Certifications at once.")
@click.option("--max-examples", type=click.IntRange(1), default=10, show_default=True, help="Examples per search.")
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
@click.option("--write", is_flag=True, help="Record the results in the catalog's certified.json.")
def certify_command(
    jobs: int,
    max_examples: int,
    timeout: float,
    handshake_timeout: float,
    seed: int | None,
    patterns: tuple[str, ...],
    skips: tuple[str, ...],
    write: bool,
) -> None:
    """Certify every catalog environment (python: targets, servers on loopback), in parallel.

    Exit status 1 when any environment is not certified; the count is printed last."""
    selected = [e for e in entries() if not patterns or any(fnmatch.fnmatch(e.name, p) for p in patterns)]
    items = [e for e in selected if not any(fnmatch.fnmatch(e.name, p) for p in skips)]
    if skips:
        click.echo(f"catalog: skipping {len(selected) - len(items)} environments matching {' '.join(skips)}")
    if not items:
        raise click.ClickException("no catalog environment matches")
    records: dict[str, Any] = json.loads(CERTIFIED_FILE.read_text()) if CERTIFIED_FILE.exists() else {}
    failed: list[str] = []
    today = datetime.datetime.now(datetime.UTC).date().isoformat()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = [pool.submit(_certify_one, e, max_examples, timeout, handshake_timeout, seed) for e in items]
        for fut in concurrent.futures.as_completed(futures):
            e, rc, line, data = fut.result()
            click.echo(f"{'ok  ' if rc == 0 else 'FAIL'} {e.name:<44} {line}")
            if rc != 0:
                # What failed and why, from the report, so a CI log alone is enough to act on.
                for r in data.get("results", []):
                    if r.get("status") in ("fail", "error"):
                        click.echo(f"     {r.get('id')}: {r.get('status')}: {r.get('reason', '')}"[:2000])
                failed.append(e.name)
                records.pop(e.name, None)
                continue
            counts = data.get("counts", {})
            records[e.name] = {
                "date": today,
                "target": f"python:{e.target}",
                "suite": data.get("suite_version", ""),
                "max_examples": max_examples,
                "passed": counts.get("pass", 0),
                "skipped": counts.get("skip", 0),
                "nondeterministic": bool(data.get("declared_nondeterministic", False)),
            }
    if write:
        CERTIFIED_FILE.write_text(json.dumps(dict(sorted(records.items())), indent=2) + "\n")
    click.echo(f"catalog: {len(items) - len(failed)} of {len(items)} environments certified")
    if failed:
        raise click.ClickException(f"not certified: {', '.join(sorted(failed))}")


def markdown(items: list[Entry]) -> str:
    """docs/catalog.md: the catalog as a Markdown table (generated; do not edit by hand)."""
    lines = [
        "# Environment catalog",
        "",
        "Generated by `openenv catalog markdown` from the installed packages' entry points; do not",
        "edit by hand. Every entry is certified in CI: the native environments (envs/) as their",
        "images (`openenv certify docker:IMAGE`, with their certify-args), the others by",
        "`openenv catalog certify` (python: targets, 10 examples per property). Serve any of them",
        "with `openenv serve TARGET`. The simulators (`mujoco-*`, `ale-*`) and `finance-portfolio`:",
        "[simulators.md](simulators.md) (options, frames, data, and what CI certifies of them).",
        "",
        f"{len(items)} environments.",
        "",
        "| Name | Kind | Source | Serve target | Tools | Tasks | Certified |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in items:
        cert = e.certified["date"] if e.certified else "no"
        tools = ", ".join(f"`{t}`" for t in e.tools) or "-"
        lines.append(f"| {e.name} | {e.kind} | {e.source} | `{e.target}` | {tools} | {e.tasks or '-'} | {cert} |")
    for source, reason in sorted(skipped_importers().items()):
        lines += ["", f"Importer `{source}` is not available: {reason}."]
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
    """Import SPEC (gymnasium:ENV_ID, reasoning_gym:DATASET, textarena:GAME, verifiers:MODULE)
    and describe it: name, types, tools, and the one-liner that serves it."""
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
    if serve_args is None:
        click.echo(json.dumps(info, indent=2))
        return
    os.execv(sys.executable, [sys.executable, "-m", "openenv.cli", "serve", target, *serve_args.split()])
