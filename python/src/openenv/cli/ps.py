"""``openenv ps``: the containers openenv started (label ``openenv.managed=true``)."""

from __future__ import annotations

import json

import click

from openenv.cli.common import fail
from openenv.deploy.cleanup import list_containers
from openenv.errors import EnvError

__all__ = ["ps_command"]


@click.command("ps")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ps_command(as_json: bool) -> None:
    """List the containers started by openenv (label openenv.managed=true)."""
    try:
        rows = list_containers()
    except EnvError as e:
        raise fail(e) from None
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
        return
    if not rows:
        click.echo("no openenv containers")
        return
    alive = {True: "alive", False: "gone", None: "elsewhere"}
    table = [("NAME", "ENV", "IMAGE", "STATUS", "URL", "OWNER")]
    table += [(r.name, r.env, r.image, r.status, r.url or "-", alive[r.owner_alive]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
