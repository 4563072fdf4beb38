"""``openenv collect TARGET``: record rollouts of a policy to JSONL or Parquet (the ``collect`` extra)."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import click

__all__ = ["collect_command"]


@click.command("collect")
@click.argument("target")
@click.option(
    "--policy",
    "policy_spec",
    default="random",
    show_default=True,
    help="random, openai:MODEL (an OpenAI-compatible endpoint with function calling) or module:callable.",
)
@click.option("--episodes", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Sessions played at once."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Episode i is reset with seed SEED + i.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="Stop an episode after this many steps.")
@click.option("--split", default=None, help="Play the tasks of this split in turn (RFC 0004).")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="runs.jsonl or runs.parquet; an existing file of the same run (target, policy, seed) is resumed: "
    "its finished episodes are skipped.",
)
@click.option(
    "--append",
    is_flag=True,
    help="Add this run to an --out that holds another run's episodes (refused otherwise).",
)
@click.option(
    "--openai-base-url",
    default=None,
    envvar="OPENAI_BASE_URL",
    help="Base URL of the OpenAI-compatible endpoint (openai: policies).",
)
@click.option("--push-to-hub", "repo_id", default=None, help="Upload the file as this Hugging Face dataset.")
@click.option("--dry-run", is_flag=True, help="With --push-to-hub: show what would be uploaded, send nothing.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def collect_command(
    target: str,
    policy_spec: str,
    episodes: int,
    concurrency: int,
    seed: int,
    max_steps: int | None,
    split: str | None,
    out: str,
    append: bool,
    openai_base_url: str | None,
    repo_id: str | None,
    dry_run: bool,
    no_progress: bool,
) -> None:
    """Play EPISODES episodes of the environment at TARGET (grpc://host:port, http(s)://...,
    or docker:IMAGE) with a policy and record every time step to --out."""
    try:
        from openenv.record import collect, load_policy, push_to_hub
    except ImportError as e:
        raise click.ClickException(f"{e}: pip install 'protoenv[collect]'") from e
    sys.path.insert(0, os.getcwd())  # module:callable policies next to the caller
    try:
        kwargs = {"base_url": openai_base_url} if policy_spec.startswith("openai:") else {}
        policy = load_policy(policy_spec, **kwargs)
        stats = asyncio.run(
            collect(
                target,
                policy,
                out,
                episodes=episodes,
                concurrency=concurrency,
                seed=seed,
                max_steps=max_steps,
                split=split,
                policy_name=policy_spec,
                progress=not no_progress,
                append=append,
            )
        )
    except (ValueError, ImportError, OSError) as e:
        raise click.ClickException(str(e)) from e
    summary = {
        "out": out,
        "episodes": stats.episodes,
        "skipped": stats.skipped,
        "steps": stats.steps,
        "mean_return": None if not stats.returns else round(stats.mean_return, 6),
    }
    click.echo(json.dumps(summary))
    if repo_id:
        plan = push_to_hub(out, repo_id, dry_run=dry_run)
        verb = "would upload" if dry_run else "uploaded"
        for dest, src in plan.files.items():
            click.echo(f"{verb} {src} -> {plan.repo_id}:{dest} (dataset)")
