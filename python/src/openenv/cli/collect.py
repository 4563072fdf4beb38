"""``openenv collect TARGET``: record rollouts of a policy to JSONL or Parquet (the ``collect`` extra)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from openenv.cli.common import allow_text_option, check_export_path

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
@click.option(
    "--export-training",
    "export_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="openai: policies: route the model calls through the capture proxy and write the episodes as training "
    "traces (RFC 0017) to this .jsonl or .parquet file.",
)
@allow_text_option
@click.option(
    "--trace-dir",
    default=None,
    type=click.Path(file_okay=False),
    help="With --export-training: the run directory of the captured calls (default: beside --out, OUT-trace/).",
)
@click.option(
    "--request-tokens/--no-request-tokens",
    default=True,
    show_default=True,
    help="With --export-training: ask the endpoint for token ids and logprobs (vLLM's return_token_ids).",
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
    export_path: str | None,
    allow_text: bool,
    trace_dir: str | None,
    request_tokens: bool,
    repo_id: str | None,
    dry_run: bool,
    no_progress: bool,
) -> None:
    """Play EPISODES episodes of the environment at TARGET (grpc://host:port, http(s)://...,
    or docker:IMAGE) with a policy and record every time step to --out.

    With --export-training (openai: policies), the model calls go through the harness's capture
    proxy, which keeps the token ids and logprobs the endpoint returns; the episodes are then
    written as training traces, validated as `openenv harness run --export-training` does."""
    try:
        from openenv.record import collect, load_policy, push_to_hub, run_id
    except ImportError as e:
        raise click.ClickException(f"{e}: pip install 'protoenv[collect]'") from e
    if export_path is not None:
        if not policy_spec.startswith("openai:"):
            raise click.UsageError("--export-training records model calls: it needs an openai:MODEL policy")
        check_export_path(export_path)
        if openai_base_url is None:
            raise click.UsageError("--export-training needs the endpoint: --openai-base-url (or OPENAI_BASE_URL)")
    elif allow_text or trace_dir is not None:
        raise click.UsageError("--allow-text and --trace-dir apply to --export-training")
    sys.path.insert(0, os.getcwd())  # module:callable policies next to the caller
    run_dir = Path(trace_dir) if trace_dir is not None else Path(out).with_name(Path(out).stem + "-trace")
    try:
        kwargs = {"base_url": openai_base_url} if policy_spec.startswith("openai:") else {}
        policy = load_policy(policy_spec, **kwargs)
        args: dict[str, Any] = dict(
            episodes=episodes, concurrency=concurrency, seed=seed, max_steps=max_steps, split=split,
            policy_name=policy_spec, progress=not no_progress, append=append,
        )  # fmt: skip

        async def run() -> Any:
            if export_path is None:
                return await collect(target, policy, out, **args)
            try:
                from openenv.harness import CollectCapture
            except ImportError as e:
                raise click.ClickException(f"{e}: --export-training needs pip install 'protoenv[harness]'") from e
            assert openai_base_url is not None
            capture = CollectCapture(
                openai_base_url, run_dir, run_id=run_id(target, policy_spec, seed), target=target,
                policy=policy_spec, model=policy_spec.removeprefix("openai:"), concurrency=concurrency,
                request_tokens=request_tokens, api_key=os.environ.get("OPENAI_API_KEY"),
            )  # fmt: skip
            async with capture:
                policy.route = capture.base_url  # type: ignore[attr-defined]
                return await collect(target, policy, out, hooks=capture, **args)

        stats = asyncio.run(run())
    except (ValueError, ImportError, OSError) as e:
        raise click.ClickException(str(e)) from e
    summary: dict[str, Any] = {
        "out": out,
        "episodes": stats.episodes,
        "skipped": stats.skipped,
        "steps": stats.steps,
        "mean_return": None if not stats.returns else round(stats.mean_return, 6),
    }
    if export_path is not None:
        from openenv.harness import export_training

        summary["trace_dir"] = str(run_dir)
        try:
            summary["training_traces"] = str(export_training(run_dir, export_path, allow_text=allow_text))
        except ValueError as e:  # the episodes stay in --out and the calls in the trace: only the export is refused
            click.echo(json.dumps(summary))
            raise click.ClickException(f"--export-training: {e}") from None
    click.echo(json.dumps(summary))
    if repo_id:
        plan = push_to_hub(out, repo_id, dry_run=dry_run)
        verb = "would upload" if dry_run else "uploaded"
        for dest, src in plan.files.items():
            click.echo(f"{verb} {src} -> {plan.repo_id}:{dest} (dataset)")
