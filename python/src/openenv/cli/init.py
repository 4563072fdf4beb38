"""``openenv init NAME``: a new environment that builds and certifies as is."""

from __future__ import annotations

import click

from openenv.deploy.scaffold import _names, scaffold
from openenv.errors import EnvError

__all__ = ["init_command"]


@click.command("init")
@click.argument("name")
@click.option(
    "-d",
    "--dir",
    "parent",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Create the environment in this directory.",
)
@click.option("--force", is_flag=True, help="Allow a name that is already an importable module.")
def init_command(name: str, parent: str, force: bool) -> None:
    """Scaffold a new environment NAME (proto, server, client, Dockerfile, tests, README)."""
    try:
        root = scaffold(name, parent, force=force)
    except EnvError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:  # the directory cannot be written (permissions, a path too long, ...)
        raise click.ClickException(f"cannot create the environment in {parent}: {e.strerror or e}") from None
    names = _names(name)
    click.echo(f"created {root}")
    click.echo(f"  pip install -e {root}  &&  python -m pytest {root / 'tests'}")
    click.echo(f"  openenv build {root} --offline --debootstrap-base   # -> {names['image_tag']}")
    click.echo(f"  openenv certify docker:{names['image_tag']}")
