"""Helpers shared by the commands."""

from __future__ import annotations

import errno
import importlib
import os
import socket
import sys
from typing import Any

import click

from openenv.errors import EnvError

__all__ = [
    "check_port_free",
    "fail",
    "load_factory",
    "write_ready_file",
]


def fail(e: EnvError) -> click.ClickException:
    """An error of the table as a command-line error (exit 1, the message on stderr)."""
    return click.ClickException(str(e))


def check_port_free(host: str, port: int | None, what: str, option: str) -> None:
    """Refuse, in one line, a port another process already listens on (before anything starts,
    so a clash is not a traceback or a gRPC core log). Port 0 or None (a free port, or no
    listener) and addresses this host cannot bind are left to the listener itself."""
    if not port:
        return
    bind_host = host.strip("[]") or "0.0.0.0"
    try:
        infos = socket.getaddrinfo(bind_host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no clash
        try:
            s.bind(address)
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                return
            raise click.ClickException(
                f"{what} cannot listen on {host}:{port}: another process is using that port "
                f"(stop it, or choose another with {option}; {option} 0 picks a free one)"
            ) from None


def write_ready_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically, so a supervisor polling for it never reads half."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_factory(spec: str) -> Any:
    """Import ``module:Attribute`` (an Environment subclass or a factory function), or build
    ``import:SOURCE:ID`` with the importer that an installed distribution registers as
    ``SOURCE`` in the ``openenv.importers`` entry-point group (e.g. protoenv-catalog's
    ``import:gymnasium:CartPole-v1``): a callable taking ``ID`` and returning the factory."""
    if spec.startswith("import:"):
        return _imported(spec)
    if ":" not in spec:
        raise click.BadParameter(f"{spec!r} is not of the form module:Class", param_hint="TARGET")
    mod_name, attr = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise click.BadParameter(f"cannot import {mod_name!r}: {e}", param_hint="TARGET") from e
    obj: Any = mod
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise click.BadParameter(f"{mod_name!r} has no attribute {attr!r}", param_hint="TARGET") from None
    return obj


def _imported(spec: str) -> Any:
    source, _, ident = spec[len("import:") :].partition(":")
    import importlib.metadata  # here: serving a module:Class target never needs it

    importers = {ep.name: ep for ep in importlib.metadata.entry_points(group="openenv.importers")}
    if source not in importers:
        known = ", ".join(sorted(importers)) or "none (pip install protoenv-catalog)"
        raise click.BadParameter(f"no importer {source!r}; installed importers: {known}", param_hint="TARGET")
    if not ident:
        raise click.BadParameter(f"{spec!r} is not of the form import:{source}:ID", param_hint="TARGET")
    try:
        return importers[source].load()(ident)
    except (ImportError, LookupError, ValueError) as e:
        raise click.BadParameter(f"cannot import {ident!r} from {source}: {e}", param_hint="TARGET") from e


# The training-trace export (RFC 0017) of `openenv collect` and `openenv harness run`: one
# declaration of its --allow-text flag and one check of the file it writes.
allow_text_option = click.option(
    "--allow-text",
    is_flag=True,
    help="With --export-training: export episodes without token ids as text-only traces instead of refusing.",
)


def check_export_path(path: str) -> None:
    """Refuse an --export-training file that is neither .jsonl nor .parquet, before any work."""
    if not path.endswith((".jsonl", ".parquet")):
        raise click.BadParameter("a training-trace file ends in .jsonl or .parquet", param_hint="--export-training")
