"""``openenv harness``: agent harnesses against environments, every model call captured
(the ``harness`` extra; docs/harnesses.md)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import click

from openenv.cli.common import allow_text_option, check_export_path, check_port_free
from openenv.client import EnvClient

__all__ = ["SCRIPTED_MODEL_PORT", "harness_command"]

SCRIPTED_MODEL_PORT = 8200
"""The scripted model's default port: clear of `openenv serve`'s HTTP side (8000) and of the
capture proxy's (8100), so the quick start's processes can all run at once."""


def _require() -> Any:
    try:
        import openenv.harness as harness
    except ImportError as e:
        raise click.ClickException(f"{e}: pip install 'protoenv[harness]'") from e
    return harness


@click.group("harness")
def harness_command() -> None:
    """Run coding agents (mini-swe-agent, Codex CLI, OpenCode, any command) on an environment's tasks
    and record every model call as a training trace."""


async def _split_tasks(target: str, split: str, limit: int | None) -> list[str]:
    async with EnvClient(target) as env:
        tasks = await env.list_tasks(split)
    ids = [t.id for t in tasks]
    return ids[:limit] if limit else ids


@harness_command.command("run")
@click.argument("target")
@click.option(
    "--agent", "agent_spec", required=True, help="mini-swe-agent, codex, opencode, claude-code or command:CMD."
)
@click.option("--agent-bin", default=None, help="The agent's program (default: found on PATH).")
@click.option("--task", "task_ids", multiple=True, help="A task id (RFC 0004); repeat for several.")
@click.option("--split", default=None, help="Every task of this split (with --limit: the first N).")
@click.option("--limit", type=click.IntRange(min=1), default=None)
@click.option("--model-url", required=True, help="The OpenAI-compatible endpoint's base URL (…/v1).")
@click.option("--model", default="default", show_default=True, help="The model name the agent asks for.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The run directory (trace, workspaces).")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Episodes at once.")
@click.option(
    "--time-budget", type=click.FloatRange(min=1), default=900.0, show_default=True, help="Seconds per episode."
)
@click.option(
    "--request-tokens/--no-request-tokens",
    default=False,
    show_default=True,
    help="Ask the upstream for token ids and logprobs (vLLM; a hosted API may refuse return_token_ids).",
)
@click.option("--upstream-api-key", envvar="OPENENV_UPSTREAM_API_KEY", default=None, help="The upstream's key.")
@click.option(
    "--hide",
    "hide",
    multiple=True,
    type=click.Path(exists=True),
    help="A file or directory the agent's jail hides besides the environments' own (e.g. $HARBOR_TASKS); repeatable.",
)
@click.option("--pass-env", "pass_env", multiple=True, help="An inherited environment variable the agent keeps.")
@click.option(
    "--share-net", is_flag=True, help="Keep the host's network in the jail (the environment server needs a token)."
)
@click.option(
    "--no-jail",
    is_flag=True,
    help="Run the agent unconfined: it can read the environment's tasks and solutions. Unsafe for training.",
)
@click.option(
    "--export-training",
    "export_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="Also write the run's episodes as training traces (RFC 0017) to this .jsonl or .parquet file.",
)
@allow_text_option
def run_command(
    target: str,
    agent_spec: str,
    agent_bin: str | None,
    task_ids: tuple[str, ...],
    split: str | None,
    limit: int | None,
    model_url: str,
    model: str,
    out: str,
    concurrency: int,
    time_budget: float,
    request_tokens: bool,
    upstream_api_key: str | None,
    hide: tuple[str, ...],
    pass_env: tuple[str, ...],
    share_net: bool,
    no_jail: bool,
    export_path: str | None,
    allow_text: bool,
) -> None:
    """Run an agent on tasks of the environment at TARGET (grpc://, http(s)://, docker:IMAGE)
    through the capture proxy; write the trace (runs, calls, steps, episodes .jsonl) to --out.
    Every agent runs in a bubblewrap jail (docs/harnesses.md, "The agent's jail")."""
    harness = _require()
    if export_path is not None:
        check_export_path(export_path)
    if allow_text and export_path is None:
        raise click.UsageError("--allow-text applies to --export-training")
    if no_jail and (hide or pass_env or share_net):
        raise click.UsageError("--no-jail runs no jail: --hide, --pass-env and --share-net configure one")
    jail = None if no_jail else harness.Jail(hide=hide, pass_env=pass_env, share_net=share_net)
    try:
        agent = harness.agent_from_spec(agent_spec, agent_bin)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--agent") from None
    tasks: list[str | None] = list(task_ids)
    if split is not None:
        tasks += asyncio.run(_split_tasks(target, split, limit))
    if not tasks:
        tasks = [None]
    done = [0]

    def progress(row: dict[str, Any]) -> None:
        done[0] += 1
        click.echo(
            f"[{done[0]}/{len(tasks)}] {row['task_id'] or '-'} {row['status']} reward={row['reward']:.3f} "
            f"solved={row['solved']} calls={row['calls']} {row['duration_s']:.1f}s"
            + (f" error={row['error']}" if row["error"] else ""),
            err=True,
        )

    try:
        rows = asyncio.run(
            harness.run_harness(
                target,
                agent,
                tasks,
                model_url,
                out,
                model=model,
                concurrency=concurrency,
                time_budget_s=time_budget,
                request_tokens=request_tokens,
                upstream_api_key=upstream_api_key,
                on_episode=progress,
                jail=jail,
            )
        )
    except (harness.AgentUnavailable, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    solved = sum(1 for r in rows if r["solved"])
    mean = sum(r["reward"] for r in rows) / len(rows)
    summary: dict[str, Any] = {"episodes": len(rows), "solved": solved, "mean_reward": mean, "out": out}
    if export_path is not None:
        try:
            summary["training_traces"] = str(harness.export_training(out, export_path, allow_text=allow_text))
        except ValueError as e:  # the trace stays in --out: only the export is refused
            click.echo(json.dumps(summary))
            raise click.ClickException(f"--export-training: {e}") from None
    click.echo(json.dumps(summary))
    if any(r["status"] == "error" for r in rows):
        sys.exit(1)


@harness_command.command("export")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--allow-text", is_flag=True, help="Export episodes without token ids as text-only traces.")
def export_command(run_dir: str, path: str, allow_text: bool) -> None:
    """Write the episodes of the harness run directory RUN_DIR as training traces (RFC 0017) to
    PATH (.jsonl: one openenv.v1.TrainingTrace per line; .parquet: one row per episode)."""
    harness = _require()
    try:
        traces = harness.training_traces(run_dir, allow_text=allow_text)
        harness.write_training_traces(traces, path)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    turns = sum(len(t.turns) for t in traces)
    click.echo(json.dumps({"episodes": len(traces), "turns": turns, "out": path}))


@harness_command.command("scripted-model")
@click.option("--script", "script_path", required=True, type=click.Path(dir_okay=False, exists=True))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    type=int,
    default=SCRIPTED_MODEL_PORT,
    show_default=True,
    help="0: a free port. Not 8000, where `openenv serve` puts its HTTP side.",
)
def scripted_model_command(script_path: str, host: str, port: int) -> None:
    """Serve a scripted OpenAI-compatible model (chat completions and responses) playing SCRIPT."""
    harness = _require()
    try:
        script = harness.load_script(script_path)
    except (ValueError, OSError) as e:
        raise click.ClickException(f"{script_path}: {e}") from None
    check_port_free(host, port, "the scripted model", "--port")
    server = _start(harness, harness.ScriptedModel(script), host, port, "the scripted model")
    click.echo(f"scripted model on {server.url}/v1 ({len(script.steps)} steps)", err=True)
    _wait_forever(server)


@harness_command.command("proxy")
@click.option("--upstream", required=True, help="The real endpoint's base URL (…/v1).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Where calls.jsonl goes.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8100, show_default=True)
@click.option("--request-tokens/--no-request-tokens", default=False, show_default=True)
@click.option("--upstream-api-key", envvar="OPENENV_UPSTREAM_API_KEY", default=None)
@click.option("--tag", default="", help="The episode id every call is tagged with.")
def proxy_command(
    upstream: str, out: str, host: str, port: int, request_tokens: bool, upstream_api_key: str | None, tag: str
) -> None:
    """Serve the capture proxy alone: point any harness at http://HOST:PORT/v1."""
    harness = _require()
    writer = harness.TraceWriter(out)
    tags = harness.EpisodeTags(writer.add_call, episode_id=tag, agent="external")
    app = harness.CaptureProxy(upstream, api_key=upstream_api_key, request_tokens=request_tokens, default=tags)
    check_port_free(host, port, "the capture proxy", "--port")
    server = _start(harness, app, host, port, "the capture proxy")
    click.echo(f"capture proxy on {server.url}/v1 -> {upstream}, recording to {out}/calls.jsonl", err=True)
    _wait_forever(server)


def _start(harness: Any, app: Any, host: str, port: int, what: str) -> Any:
    try:
        return harness.serve_in_thread(app, host, port)
    except RuntimeError as e:  # the port was taken after the check, or the host is not ours
        raise click.ClickException(f"{what} cannot start: {e.__cause__ or e}") from None


def _wait_forever(server: Any) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully (calls in flight finish and are
    recorded)."""
    import signal
    import threading

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
