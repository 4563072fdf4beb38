"""A binding's declaration (``<binding>/openenv-binding.json``): the protocol version it speaks,
the features it implements, its transports and TLS. ``openenv certify --declaration FILE`` checks
one against what a server of that binding advertises and does (the check
``protocol.declaration``).

The file is read here with the certifier's own rules (the feature ids and what advertises each:
:data:`openenv_conformance.tables.FEATURES`), never with the project's tools, so a mistake in
those is not shared by the judge.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from openenv_conformance.tables import FEATURES, TRANSPORTS

__all__ = [
    "Declaration",
    "DeclarationError",
    "Judgement",
    "advertised_value",
    "compare",
    "load_declaration",
    "parse_declaration",
]

_VERSION = re.compile(r"1\.(0|[1-9][0-9]*)")


class DeclarationError(ValueError):
    """The declaration file is unreadable or breaks its format; the message says where."""


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a binding says it implements.

    Attributes:
        binding: its name (``python``, ``typescript``...).
        protocol_version: the ``1.MINOR`` its servers speak.
        features: feature ids of :data:`~openenv_conformance.tables.FEATURES`.
        server_transports: transport ids of :data:`~openenv_conformance.tables.TRANSPORTS` its
            server helper serves.
        client_transports: the same for its client.
        tls: ``{"client": bool, "server": bool, "mutual": bool}``.
        source: where it was read from (for messages).
    """

    binding: str
    protocol_version: str
    features: frozenset[str]
    server_transports: frozenset[str]
    client_transports: frozenset[str]
    tls: dict[str, bool]
    source: str = ""

    @property
    def minor(self) -> int:
        return int(self.protocol_version.split(".")[1])


def parse_declaration(data: Any, source: str = "declaration") -> Declaration:
    """A :class:`Declaration` from the decoded JSON; :class:`DeclarationError` naming the field."""
    if not isinstance(data, dict):
        raise DeclarationError(f"{source}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in ("binding", "protocol_version", "features", "transports", "tls") if k not in data]
    if missing:
        raise DeclarationError(f"{source}: missing {', '.join(missing)}")
    version = data["protocol_version"]
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise DeclarationError(f'{source}: protocol_version {version!r} is not "1.MINOR"')
    features = data["features"]
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise DeclarationError(f"{source}: features must be a list of feature ids")
    unknown = sorted(set(features) - set(FEATURES))
    if unknown:
        raise DeclarationError(f"{source}: unknown features {unknown}; known: {', '.join(FEATURES)}")
    if "core" not in features:
        raise DeclarationError(f"{source}: every binding implements the feature 'core'")
    transports = data["transports"]
    if not isinstance(transports, dict):
        raise DeclarationError(f'{source}: transports must be an object {{"client": [...], "server": [...]}}')
    sides: dict[str, frozenset[str]] = {}
    for side in ("client", "server"):
        ids = transports.get(side, [])
        if not isinstance(ids, list) or not all(isinstance(t, str) for t in ids):
            raise DeclarationError(f"{source}: transports.{side} must be a list of transport ids")
        bad = sorted(set(ids) - set(TRANSPORTS))
        if bad:
            raise DeclarationError(f"{source}: transports.{side}: unknown {bad}; known: {', '.join(TRANSPORTS)}")
        sides[side] = frozenset(ids)
    tls = data["tls"]
    if not isinstance(tls, dict) or not all(isinstance(tls.get(k), bool) for k in ("client", "server", "mutual")):
        raise DeclarationError(f'{source}: tls must be {{"client": bool, "server": bool, "mutual": bool}}')
    return Declaration(
        binding=str(data["binding"]),
        protocol_version=version,
        features=frozenset(features),
        server_transports=sides["server"],
        client_transports=sides["client"],
        tls={k: bool(tls[k]) for k in ("client", "server", "mutual")},
        source=source,
    )


def load_declaration(path: str | Path) -> Declaration:
    """Read and parse a declaration file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise DeclarationError(f"{p}: cannot be read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DeclarationError(f"{p}: not JSON: {e}") from None
    return parse_declaration(data, str(p))


@dataclasses.dataclass
class Judgement:
    """A declaration against a server's description (:func:`compare`).

    Attributes:
        problems: what contradicts the declaration (each a failure).
        advertised: declared features the server advertises (to probe).
        ahead: of those, the ones newer than the declared protocol version (a warning).
        silent: declared features the server does not advertise (not verified).
    """

    problems: list[str]
    advertised: list[str]
    ahead: list[str]
    silent: list[str]


def advertised_value(caps: Any, field: str) -> int:
    """A ``Capabilities`` field as a number: a ``Duration`` in whole seconds rounded up (any
    non-zero duration counts at least 1), booleans and counts as themselves."""
    if field in ("handshake_timeout", "resume_grace", "idle_timeout"):
        if not caps.HasField(field):
            return 0
        d = getattr(caps, field)
        return int(d.seconds) + (1 if d.nanos > 0 else 0)
    return int(getattr(caps, field))


def compare(info: Any, decl: Declaration, transport: str) -> Judgement:
    """Judge ``decl`` by a server's ``EnvironmentInfo`` (``info``), certified over ``transport``
    (``grpc``, ``http`` or ``binary``): the same protocol version, every advertised feature
    declared, the transport declared for its server."""
    where = f"the declaration of {decl.binding} ({decl.source})"
    problems: list[str] = []
    if info.protocol_version != decl.protocol_version:
        problems.append(f"the server speaks protocol {info.protocol_version}, {where} says {decl.protocol_version}")
    if transport not in {TRANSPORTS[t] for t in decl.server_transports}:
        problems.append(f"certified over {transport}, a transport {where} does not list for its server")
    caps = info.capabilities
    offered = {f for f, (_, field, least) in FEATURES.items() if field and advertised_value(caps, field) >= least}
    for f in sorted(offered - decl.features):
        problems.append(f"the server advertises {f} (Capabilities.{FEATURES[f][1]}) but {where} does not list it")
    both = sorted(offered & decl.features)
    ahead = [f for f in both if int((FEATURES[f][0] or "1.0").split(".")[1]) > decl.minor]
    silent = sorted(f for f in decl.features - offered if FEATURES[f][1] is not None)
    return Judgement(problems, both, ahead, silent)
