"""``openenv factory``: build, validate, list and export the repository-task factory's
instances (an ``openenv.cli`` entry point of repo-env, so the core never imports it)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from repo_env.factory.instances import SHIPPED, load_instances

_DIR = click.option(
    "--instances",
    "instances_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=SHIPPED,
    show_default="the shipped set",
    help="A directory of built instances (instances.jsonl and manifest.json).",
)
_CACHE = click.option(
    "--cache",
    default=None,
    help="Where sdists and trees are kept (default $REPO_FACTORY_CACHE or ~/.cache/openenv/repo-factory).",
)


def _log(msg: str) -> None:
    click.echo(f"{time.strftime('%H:%M:%S')} {msg}", err=True)


@click.group("factory")
def factory() -> None:
    """The repository-task factory: real packages, planted bugs validated by their own tests."""


@factory.command("packages")
@click.option("--fetch", "do_fetch", is_flag=True, help="Download (through pip) and check every sdist's sha256.")
@_CACHE
def packages_cmd(do_fetch: bool, cache: str | None) -> None:
    """The pinned input packages (name, version, sha256, kind)."""
    from repo_env.factory.sources import fetch, load_packages

    for p in load_packages():
        status = ""
        if do_fetch:
            try:
                fetch(p, cache)
                status = "  ok"
            except (RuntimeError, ValueError) as e:
                status = f"  FAILED: {e}"
        click.echo(f"{p.name:18} {p.version:10} {p.sha256[:16]}  {p.kind}{status}")


@factory.command("build")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write instances.jsonl and manifest.json.",
)
@click.option("--packages", default="", help="Comma-separated package names (default: every pinned one).")
@click.option(
    "--per-package", type=click.IntRange(1, 10_000), default=40, show_default=True, help="Candidates per package."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--workers", type=click.IntRange(1, 512), default=2, show_default=True, help="Worker processes on this machine."
)
@click.option(
    "--ray", "ray_address", default=None, help="Validate on this Ray cluster instead (an address, or 'auto')."
)
@_CACHE
def build_cmd(
    out: Path, packages: str, per_package: int, seed: int, workers: int, ray_address: str | None, cache: str | None
) -> None:
    """Baseline the packages, plant candidate bugs, validate each with the package's tests, write the instances."""
    from repo_env.factory.build import build

    names = [n.strip() for n in packages.split(",") if n.strip()] or None
    try:
        r = build(out, packages=names, per_package=per_package, seed=seed, workers=workers, ray_address=ray_address,
                  cache=cache, log=_log)  # fmt: skip
    except (KeyError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    run = r.manifest["run"]
    click.echo(
        f"{r.instances} instances from {r.candidates} candidates (validation rate {run['validation_rate']:.0%}) in "
        f"{r.seconds:.0f} s; {run['wall_seconds_per_instance']} s wall per instance -> {out}"
    )


@factory.command("validate")
@_DIR
@click.option(
    "--sample", type=click.IntRange(0), default=0, help="Validate this many instances (spread over packages; 0: all)."
)
@click.option("--seed", type=int, default=0)
@click.option("--workers", type=click.IntRange(1, 512), default=2, show_default=True)
@click.option("--ray", "ray_address", default=None, help="Validate on this Ray cluster instead.")
@_CACHE
def validate_cmd(
    instances_dir: Path, sample: int, seed: int, workers: int, ray_address: str | None, cache: str | None
) -> None:
    """Re-validate instances: fail_to_pass fails with the bug and passes with the reference
    patch; pass_to_pass passes both. Exits 1 when one does not."""
    from repo_env.factory.validate import revalidate

    try:
        insts = load_instances(instances_dir)
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    chosen = insts.sample(sample, seed) if sample else list(insts)
    results = revalidate(chosen, packages=insts, workers=workers, ray_address=ray_address, cache=cache, log=_log)
    bad = [r for r in results if not r["ok"]]
    for r in bad:
        click.echo(f"FAIL {r['id']}: {r['reason']}")
    secs = sum(r["seconds"] for r in results)
    click.echo(f"{len(results) - len(bad)}/{len(results)} instances valid ({secs / max(len(results), 1):.1f} s each)")
    if bad:
        sys.exit(1)


@factory.command("list")
@_DIR
@click.option("--split", type=click.Choice(["train", "validation", "test"]), default=None)
@click.option("--tier", type=click.Choice(["easy", "medium", "hard"]), default=None)
@click.option("--package", default=None)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per instance.")
def list_cmd(instances_dir: Path, split: str | None, tier: str | None, package: str | None, as_json: bool) -> None:
    """The instances (id, package, split, tier, operators, failing tests)."""
    try:
        insts = load_instances(instances_dir)
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    chosen = insts.select(split=split, tier=tier, package=package)
    for i in chosen:
        if as_json:
            click.echo(json.dumps(i.to_dict(), sort_keys=True))
        else:
            ops = "+".join(i.operators)
            click.echo(
                f"{i.id:34} {i.split:10} {i.tier:6} {ops:32} {len(i.fail_to_pass)} f2p {len(i.pass_to_pass)} p2p"
            )
    if not as_json:
        click.echo(f"{len(chosen)} instances", err=True)


@factory.command("export")
@_DIR
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--format", "fmt", type=click.Choice(["harbor", "jsonl"]), default="harbor", show_default=True)
@click.option("--id", "ids", multiple=True, help="Instances to export (repeatable; default: all, or --sample).")
@click.option("--sample", type=click.IntRange(0), default=0)
@click.option("--split", type=click.Choice(["train", "validation", "test"]), default=None)
@_CACHE
def export_cmd(
    instances_dir: Path, out: Path, fmt: str, ids: tuple[str, ...], sample: int, split: str | None, cache: str | None
) -> None:
    """Export instances: as Harbor tasks (task.toml, instruction.md, environment/, tests/,
    solution/; one directory per split) or as SWE-bench-style JSON lines."""
    from repo_env.factory.export import export_harbor, export_jsonl

    try:
        insts = load_instances(instances_dir)
        chosen = (
            [insts.by_id(i) for i in ids]
            if ids
            else (insts.sample(sample, split=split) if sample else insts.select(split=split))
        )
    except (FileNotFoundError, ValueError, KeyError) as e:
        raise click.ClickException(str(e)) from None
    n = export_harbor(chosen, out, cache=cache, packages=insts) if fmt == "harbor" else export_jsonl(chosen, out)
    click.echo(f"exported {n} instances ({fmt}) -> {out}")


@factory.command("images")
@click.option("--packages", default="", help="Comma-separated package names (default: those of the shipped instances).")
@click.option(
    "--base",
    default="openenv-repo-env:0.1.0",
    show_default=True,
    help="The repo_env image to build on (from a source tree, this repo-env is installed over its own).",
)
@click.option("--tag", default="0.1.0", show_default=True)
@_CACHE
def images_cmd(packages: str, base: str, tag: str, cache: str | None) -> None:
    """Build an image per package, ``factory-<package>:<tag>``: repo_env's image plus the package's
    tree and pytest (no network in the build), serving that package's instances."""
    from repo_env.factory.images import build_images

    names = [n.strip() for n in packages.split(",") if n.strip()] or sorted({i.package for i in load_instances()})
    for name, ref in build_images(names, base=base, tag=tag, cache=cache, log=_log):
        click.echo(f"{name}: {ref}")


@factory.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--gzip", "gz", is_flag=True, help="Write instances.jsonl.gz (what the package ships) instead.")
@_CACHE
def merge_cmd(sources: tuple[Path, ...], out: Path, gz: bool, cache: str | None) -> None:
    """Merge built sets (other packages, more candidates) into one, with its manifest."""
    import gzip

    from repo_env.factory.build import merge

    try:
        m = merge(list(sources), out, cache=cache)
    except (FileNotFoundError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    if gz:
        data = (out / "instances.jsonl").read_bytes()
        (out / "instances.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        (out / "instances.jsonl").unlink()
    click.echo(f"{m['instances']} instances of {len(m['instances_per_package'])} packages -> {out}")


@factory.command("baseline")
@_DIR
@click.option("--sample", type=click.IntRange(1), default=6, show_default=True)
@click.option("--seed", type=int, default=0)
@click.option("--split", type=click.Choice(["train", "validation", "test"]), default=None)
def baseline_cmd(instances_dir: Path, sample: int, seed: int, split: str | None) -> None:
    """The null agent, the reference and a scripted search-and-edit agent on a sample, through
    the tools over gRPC: reward and wall seconds per instance."""
    from repo_env.factory.baseline import run_baselines
    from repo_env.factory.env import FactoryEnvironment, factory_tasks

    class Served(FactoryEnvironment):
        _tasks = factory_tasks(instances_dir)

    chosen = load_instances(instances_dir).sample(sample, seed, split=split)
    rows = run_baselines(Served, [i.id for i in chosen])
    for r in rows:
        click.echo(json.dumps(r, sort_keys=True))
    n = len(rows)
    for agent in ("null", "reference", "scripted"):
        mean = sum(r[agent] for r in rows) / n
        secs = sum(r[f"{agent}_s"] for r in rows) / n
        click.echo(f"{agent:10} reward {mean:.2f}  {secs:.1f} s per instance  ({n} instances)")
