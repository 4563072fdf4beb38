"""``openenv cleanup``: remove containers whose owner process is gone."""

from __future__ import annotations

import click

from openenv.cli.common import fail
from openenv.deploy.cleanup import cleanup
from openenv.errors import EnvError

__all__ = ["cleanup_command"]


@click.command("cleanup")
@click.option("--all", "all_containers", is_flag=True, help="Remove every openenv container, not only leftovers.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def cleanup_command(all_containers: bool, dry_run: bool) -> None:
    """Remove openenv containers whose owner process is gone (after a crash), or --all."""
    try:
        removed = cleanup(all_containers, dry_run=dry_run, echo=click.echo)
    except EnvError as e:
        raise fail(e) from None
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(removed)} container(s)")
