"""``openenv init NAME``: a new environment that builds and certifies as is."""

from __future__ import annotations

import click

from openenv.deploy.scaffold import TEMPLATES, next_steps, scaffold
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
@click.option(
    "-t",
    "--template",
    type=click.Choice(TEMPLATES),
    default="messages",
    show_default=True,
    help="messages: typed protobuf actions and observations (needs grpcio-tools); "
    "tools: a tool environment (@openenv.tool methods, MCP-shaped calls).",
)
@click.option("--force", is_flag=True, help="Allow a name that is already an importable module.")
def init_command(name: str, parent: str, template: str, force: bool) -> None:
    """Scaffold a new environment NAME (server, tests, README; with the messages template also
    its proto and typed client). `openenv build` renders its Dockerfile from the template."""
    try:
        root = scaffold(name, parent, force=force, template=template)
    except EnvError as e:
        raise click.ClickException(str(e)) from None
    except OSError as e:  # the directory cannot be written (permissions, a path too long, ...)
        raise click.ClickException(f"cannot create the environment in {parent}: {e.strerror or e}") from None
    click.echo(f"created {root}")
    click.echo("next:")
    for line in next_steps(root, name):
        click.echo(f"  {line}")
