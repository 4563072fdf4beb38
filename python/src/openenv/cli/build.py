"""``openenv build ENV_DIR``: the environment's Docker image (docs/images.md)."""

from __future__ import annotations

import functools

import click
from click.core import ParameterSource

from openenv.cli.common import fail
from openenv.deploy.build import DEFAULT_BASE_IMAGE, build_image
from openenv.deploy.engine import Echo
from openenv.deploy.engine import quiet as quiet_echo
from openenv.errors import EnvError

__all__ = ["build_command"]


@click.command("build")
@click.argument("env_dir", type=click.Path(exists=True, file_okay=False), default=".")
@click.option("-t", "--tag", default=None, help="Image tag (default openenv-<name>:<version>).")
@click.option(
    "--base-image",
    default=None,
    show_default=DEFAULT_BASE_IMAGE,
    help="The BASE_IMAGE build argument (an image with python3 and venv).",
)
@click.option(
    "--offline",
    is_flag=True,
    help="Install every dependency from a wheelhouse built on this host; no network in the build.",
)
@click.option(
    "--debootstrap-base",
    is_flag=True,
    help="Use the local debootstrapped base (openenv-base:bookworm), building it if missing (root).",
)
@click.option("--no-cache", is_flag=True, help="Do not use Docker's layer cache.")
@click.option(
    "--openenv-source",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Source tree of the openenv package to install (default: the running one's).",
)
@click.option(
    "--constraint",
    "constraint",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    envvar="OPENENV_BUILD_CONSTRAINT",
    help="With --offline: a constraints or lock file (name==version; hashes ignored) pinning the "
    "image's dependencies (from OPENENV_BUILD_CONSTRAINT, it applies to offline builds only).",
)
@click.option("-q", "--quiet", "quiet_flag", is_flag=True, help="Print only the resulting tag.")
def build_command(
    env_dir: str,
    tag: str | None,
    base_image: str | None,
    offline: bool,
    debootstrap_base: bool,
    no_cache: bool,
    openenv_source: str | None,
    constraint: str | None,
    quiet_flag: bool,
) -> None:
    """Build the Docker image of the environment in ENV_DIR (openenv-<name>:<version>)."""
    echo: Echo = quiet_echo if quiet_flag else functools.partial(click.echo, err=True)
    if not offline and click.get_current_context().get_parameter_source("constraint") is ParameterSource.ENVIRONMENT:
        constraint = None  # the variable pins offline builds (CI, make images); an online one resolves as declared
    try:
        result = build_image(
            env_dir,
            tag=tag,
            base_image=base_image,
            offline=offline,
            debootstrap_base=debootstrap_base,
            no_cache=no_cache,
            openenv_source=openenv_source,
            constraints=constraint,
            echo=echo,
        )
    except EnvError as e:
        raise fail(e) from None
    click.echo(result.tag)
