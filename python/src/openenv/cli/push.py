"""``openenv push ENV_DIR``: the environment as a Hugging Face Space (docs/bridge.md)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from openenv.deploy.space import SPACE_PORT, prepare_space, upload_space

__all__ = ["push_command"]


@click.command("push")
@click.argument("env_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repo-id", "-r", required=True, help="The Space, OWNER/NAME.")
@click.option("--target", default=None, help="module:Class to serve (default: the one Environment subclass found).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the Space folder (default: ENV_DIR/build/hf-space).",
)
@click.option("--port", type=int, default=SPACE_PORT, show_default=True, help="The Space's app_port.")
@click.option("--private", is_flag=True, help="Create the Space private.")
@click.option(
    "--token",
    default=lambda: os.environ.get("HF_TOKEN"),
    show_default="$HF_TOKEN",
    help="Hugging Face token (else huggingface_hub's stored login).",
)
@click.option("--dry-run", is_flag=True, help="Only write the Space folder; upload nothing.")
def push_command(
    env_dir: Path,
    repo_id: str,
    target: str | None,
    out: Path | None,
    port: int,
    private: bool,
    token: str | None,
    dry_run: bool,
) -> None:
    """Package ENV_DIR as a Hugging Face Space (Docker, OpenEnv's HTTP/WebSocket on the Space
    port) and upload it to REPO_ID."""
    folder = prepare_space(env_dir, out or env_dir / "build" / "hf-space", repo_id=repo_id, target=target, port=port)
    click.echo(f"wrote the Space folder {folder}", err=True)
    if dry_run:
        click.echo(str(folder))
        return
    url = upload_space(folder, repo_id, private=private, token=token)
    click.echo(url)
