"""``openenv fleet``: run a fleet of environment servers and see their load.

::

    openenv fleet up echo_env:EchoEnvironment --provider local --replicas 4
    openenv fleet up openenv-echo-env:0.1.0 --provider docker --replicas 2
    openenv fleet status [NAME]          # server, url, where, sessions, load, step p50, health
    openenv fleet down [NAME]
    openenv fleet render k8s IMAGE --replicas 3 [--hpa-max 10]   # manifests, to stdout

``up`` records the fleet in ``$OPENENV_FLEET_DIR`` (default ``~/.cache/openenv/fleets``) as
``NAME.json``, so ``status`` and ``down`` work from any shell.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import click

from openenv.cli.common import fail
from openenv.errors import EnvError
from openenv.fleet.manifests import FleetManifest, to_yaml, validate_manifests
from openenv.fleet.provider import PROVIDERS, Provider, provider_class, provider_from_state
from openenv.fleet.status import fleet_status, format_table

__all__ = ["fleet_command"]


def _fleet_dir() -> Path:
    return Path(os.environ.get("OPENENV_FLEET_DIR") or Path.home() / ".cache" / "openenv" / "fleets")


def _default_name(env: str) -> str:
    base = env.rsplit("/", 1)[-1].split(":")[0].split(".")[0]
    return re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-") or "fleet"


def _load(name: str | None) -> tuple[str, Provider]:
    d = _fleet_dir()
    if name is None:
        names = sorted(p.stem for p in d.glob("*.json"))
        if len(names) != 1:
            raise click.UsageError(
                f"{'no fleets' if not names else 'several fleets: ' + ', '.join(names)} in {d}; name one"
            )
        name = names[0]
    path = d / f"{name}.json"
    if not path.exists():
        raise click.UsageError(f"no fleet {name!r} in {d}")
    state = json.loads(path.read_text())
    try:
        return name, provider_from_state(state)
    except ImportError as e:
        raise click.ClickException(f"the {state.get('kind')} provider is not available: {e}") from e


def _progress(line: str) -> None:
    click.echo(line, err=True)


@click.group("fleet")
def fleet_command() -> None:
    """A fleet of environment servers: up, status, down, render."""


@fleet_command.command("up")
@click.argument("env")
@click.option("--provider", "kind", type=click.Choice(sorted(PROVIDERS)), default="local", show_default=True)
@click.option("--replicas", type=int, default=2, show_default=True, help="Number of servers.")
@click.option("--max-sessions", type=int, default=None, help="Capacity of each server.")
@click.option("--name", default=None, help="Name of the fleet (default: from ENV).")
@click.option(
    "--ray-address",
    default="auto",
    show_default=True,
    help="ray provider: the cluster to join (`ray start --head` first; the actors are detached).",
)
@click.option("--namespace", default="default", show_default=True, help="kubernetes provider: namespace.")
@click.option("--ready-timeout", type=float, default=120.0, show_default=True)
@click.option(
    "--token",
    default=None,
    help="local, ray: every server requires this bearer token (RFC 0003). Not recorded: give "
    "$OPENENV_TOKEN to `status` and to clients.",
)
@click.option(
    "--token-file", type=click.Path(exists=True, dir_okay=False), default=None, help="Read --token from this file."
)
@click.option(
    "--token-secret",
    default=None,
    help="kubernetes: the Secret (key `token`) whose value the pods require.",
)
def up_command(
    env: str,
    kind: str,
    replicas: int,
    max_sessions: int | None,
    name: str | None,
    ray_address: str,
    namespace: str,
    ready_timeout: float,
    token: str | None,
    token_file: str | None,
    token_secret: str | None,
) -> None:
    """Start REPLICAS servers of ENV: a module:Class (local, ray) or an image (docker, kubernetes).

    Tokens (docs/security.md): a docker fleet's containers each get their own, read back by
    the provider; local and ray servers require --token when given; kubernetes pods read
    theirs from --token-secret."""
    if token_file:
        token = Path(token_file).read_text().strip() or None
    if token and kind not in ("local", "ray"):
        raise click.UsageError(
            f"--token applies to the local and ray providers; {kind}: "
            + ("use --token-secret" if kind == "kubernetes" else "each container gets its own token")
        )
    if token_secret and kind != "kubernetes":
        raise click.UsageError("--token-secret applies to the kubernetes provider")
    name = name or _default_name(env)
    path = _fleet_dir() / f"{name}.json"
    if path.exists():
        raise click.UsageError(f"fleet {name!r} already exists ({path}); `openenv fleet down {name}` first")
    try:
        cls = provider_class(kind)
    except ImportError as e:
        raise click.ClickException(f"the {kind} provider is not available: {e}") from e
    kwargs: dict[str, Any] = {"max_sessions": max_sessions, "ready_timeout": ready_timeout}
    if kind != "local":
        kwargs["name"] = name  # containers, actors and Kubernetes objects carry the fleet's name
    if kind == "ray":
        kwargs["address"] = ray_address
        kwargs["detached"] = True
    if kind in ("local", "ray") and token:
        kwargs["token"] = token
    if kind == "kubernetes":
        kwargs["namespace"] = namespace
        if token_secret:
            kwargs["token_secret"] = token_secret
    if kind == "local":
        kwargs["state_dir"] = str(_fleet_dir() / f"{name}.d")
        os.makedirs(kwargs["state_dir"], exist_ok=True)
    provider = cls(env, **kwargs)  # type: ignore[call-arg]  # every provider takes (env, **options)
    try:
        endpoints = provider.up(replicas, _progress)
    except EnvError as e:
        raise fail(e) from e
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(provider.state(), indent=2))
    click.echo(f"fleet {name}: {len(endpoints)} server(s) of {env} ({kind})")
    for ep in endpoints:
        click.echo(f"  {ep.name}  {ep.url}  {ep.where}")


@fleet_command.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of the table.")
def status_command(name: str | None, as_json: bool) -> None:
    """A table of the fleet's servers: sessions open/max, load, step latency, health."""
    name, provider = _load(name)
    rows = fleet_status(provider.endpoints())
    if as_json:
        from google.protobuf import json_format

        click.echo(
            json.dumps(
                [
                    {
                        **r.endpoint.to_json(),
                        "health": r.health,
                        "load": json_format.MessageToDict(r.load, preserving_proto_field_name=True) if r.load else None,
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
    else:
        click.echo(format_table(rows))


@fleet_command.command("down")
@click.argument("name", required=False)
def down_command(name: str | None) -> None:
    """Stop every server of the fleet and forget it."""
    name, provider = _load(name)
    provider.down(_progress)
    (_fleet_dir() / f"{name}.json").unlink()
    click.echo(f"fleet {name}: down")


@fleet_command.command("render")
@click.argument("what", type=click.Choice(["k8s"]))
@click.argument("image")
@click.option("--name", default=None, help="Name of the Deployment and Service (default: from IMAGE).")
@click.option("--replicas", type=int, default=2, show_default=True)
@click.option("--namespace", default="default", show_default=True)
@click.option("--max-sessions", type=int, default=None, help="Capacity of each server.")
@click.option("--cpu", default="500m", show_default=True, help="CPU request (and limit: 2x).")
@click.option("--memory", default="512Mi", show_default=True, help="Memory request and limit.")
@click.option("--hpa-max", type=int, default=None, help="Add a HorizontalPodAutoscaler up to this many replicas.")
@click.option("--validate/--no-validate", default=True, show_default=True, help="Check against the OpenAPI schemas.")
def render_command(
    what: str,
    image: str,
    name: str | None,
    replicas: int,
    namespace: str,
    max_sessions: int | None,
    cpu: str,
    memory: str,
    hpa_max: int | None,
    validate: bool,
) -> None:
    """Print the Kubernetes manifests of a fleet of IMAGE (YAML, documents separated by ---)."""
    spec = FleetManifest(
        image=image,
        name=name or _default_name(image),
        namespace=namespace,
        replicas=replicas,
        max_sessions=max_sessions,
        cpu=cpu,
        memory=memory,
        hpa_max_replicas=hpa_max,
    )
    docs = spec.render()
    if validate:
        problems = validate_manifests(docs)
        if problems:
            raise click.ClickException("invalid manifests:\n" + "\n".join(problems))
    click.echo(to_yaml(docs), nl=False)
