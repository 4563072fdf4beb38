"""``openenv sandbox``: what this machine gives submitted code, and what a container needs.

``openenv sandbox check`` starts a sandbox (:mod:`openenv.sandbox`), runs an empty call and
prints the layers in force (exit 0), or why the machine cannot confine code as required (exit
1). ``openenv sandbox seccomp-profile`` prints the seccomp profile a container hosting
sandboxes needs (``docker run --security-opt seccomp=FILE --security-opt
systempaths=unconfined``; ``openenv.deploy.start_container`` applies both by itself).
"""

from __future__ import annotations

import json

import click

from openenv.sandbox import REQUIRED, SandboxUnavailable, check, seccomp_profile

__all__ = ["sandbox_command"]


@click.group("sandbox")
def sandbox_command() -> None:
    """The sandbox of submitted code on this machine (docs/security.md)."""


@sandbox_command.command("check")
@click.option("--secret", "secrets", multiple=True, help="A path that must not be visible inside (repeatable).")
@click.option(
    "--allow-missing",
    multiple=True,
    help="A required layer this machine may lack (repeatable; also $OPENENV_SANDBOX_ALLOW_MISSING).",
)
def check_command(secrets: tuple[str, ...], allow_missing: tuple[str, ...]) -> None:
    """Start a sandbox, run an empty call and print the layers in force."""
    try:
        layers = check(secrets=secrets, allow_missing=allow_missing)
    except SandboxUnavailable as e:
        raise click.ClickException(e.message) from None
    click.echo("the sandbox runs code with: " + ", ".join(layers))
    missing = [r for r in REQUIRED if not any(x.startswith(r) for x in layers)]
    if missing:
        click.echo("allowed to be missing: " + ", ".join(missing))


@sandbox_command.command("seccomp-profile")
def seccomp_profile_command() -> None:
    """Print the seccomp profile (Docker's JSON) of a container that hosts sandboxes."""
    click.echo(json.dumps(seccomp_profile(), indent=2))
