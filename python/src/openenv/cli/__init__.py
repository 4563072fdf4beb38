"""The ``openenv`` command line.

One module per command (``openenv.cli.<command>``), registered in ``_COMMANDS``
(``name -> "module:attribute"``) and imported only when used, so ``openenv --help`` stays
fast and a command whose extra is missing fails alone, naming the extra. Other
distributions add commands through the ``openenv.cli`` entry-point group (e.g.
``openenv certify`` from protoenv-conformance).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from typing import TYPE_CHECKING

import click

from openenv.observability.logs import configure_logging

if TYPE_CHECKING:
    import importlib.metadata

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
    "play": "openenv.cli.play:play_command",
    "collect": "openenv.cli.collect:collect_command",
    "fleet": "openenv.cli.fleet:fleet_command",
    "harness": "openenv.cli.harness:harness_command",
    "sandbox": "openenv.cli.sandbox:sandbox_command",
}


_REQUIREMENT = re.compile(r"""^\s*([A-Za-z0-9][A-Za-z0-9._-]*).*;.*extra\s*==\s*["']([^"']+)["']""")


def _extra_providing(module: str) -> str | None:
    """The extra of this distribution whose requirements bring the missing top-level
    ``module`` (read from the installed metadata, so it cannot drift from pyproject.toml).
    A missing module is not installed, so its distribution is assumed to share its name."""
    import importlib.metadata  # here: a server (openenv serve) never needs it

    wanted = re.sub(r"[-_.]+", "-", module.split(".")[0]).lower()
    extras = []
    for requirement in importlib.metadata.requires("protoenv") or []:
        m = _REQUIREMENT.match(requirement)
        if m and re.sub(r"[-_.]+", "-", m.group(1)).lower() == wanted and m.group(2) not in ("all", "dev"):
            extras.append(m.group(2))
    return extras[0] if extras else None


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    import importlib.metadata

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
                extra = _extra_providing(e.name or "")
                hint = f": pip install 'protoenv[{extra}]'" if extra else ""
                raise click.ClickException(f"openenv {name} is not available{hint} ({e})") from e
            command: click.Command = getattr(module, attr)
            return command
        ep = _entry_points().get(name)
        if ep is None:
            return None
        loaded: click.Command = ep.load()
        return loaded


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="protoenv", prog_name="openenv")
@click.option("-v", "--verbose", count=True, help="More logging (-v info: a line per session and request; -vv debug).")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=lambda: os.environ.get("OPENENV_LOG_FORMAT", "text"),
    show_default="text ($OPENENV_LOG_FORMAT)",
    help="Log lines as text, or as JSON objects (session_id, episode_id, request_id, kind, status, duration_ms).",
)
def main(verbose: int, log_format: str) -> None:
    """Protocol-first agentic RL environments: serve, inspect, certify, build."""
    configure_logging([logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)], log_format)


if __name__ == "__main__":
    main()
