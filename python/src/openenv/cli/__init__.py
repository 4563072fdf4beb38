"""The ``openenv`` command line.

One module per command (``openenv.cli.<command>``), registered in ``_COMMANDS``
(``name -> "module:attribute"``) and imported only when used, so ``openenv --help`` stays
fast and a command whose extra is missing fails alone, naming the extra. Other
distributions add commands through the ``openenv.cli`` entry-point group (e.g.
``openenv certify`` from protoenv-conformance).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging

import click

_COMMANDS: dict[str, str] = {
    "serve": "openenv.cli.serve:serve_command",
    "info": "openenv.cli.info:info_command",
    "bridge": "openenv.cli.bridge:bridge_command",
    "push": "openenv.cli.push:push_command",
    "build": "openenv.cli.build:build_command",
    "ps": "openenv.cli.ps:ps_command",
    "cleanup": "openenv.cli.cleanup:cleanup_command",
    "health": "openenv.cli.health:health_command",
    "init": "openenv.cli.init:init_command",
    "fleet": "openenv.cli.fleet:fleet_command",
}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.cli")}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(_COMMANDS) | set(_entry_points()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in _COMMANDS:
            mod, attr = _COMMANDS[name].split(":")
            try:
                module = importlib.import_module(mod)
            except ImportError as e:
                raise click.ClickException(f"openenv {name} is not available: {e}") from e
            command: click.Command = getattr(module, attr)
            return command
        ep = _entry_points().get(name)
        if ep is None:
            return None
        loaded: click.Command = ep.load()
        return loaded


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="protoenv", prog_name="openenv")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Protocol-first agentic RL environments: serve, inspect, certify, build."""
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


if __name__ == "__main__":
    main()
