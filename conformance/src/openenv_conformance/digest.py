"""The digest a certificate is bound to (RFC 0007): an image's content, from its engine attributes.

Apart from :mod:`openenv_conformance.certificate` so that a target (which records the digest of
the image it ran) needs nothing of the certificates, which need the whole check registry.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["LABEL", "canonical_json", "content_digest"]

#: The image label a certificate can be attached as (``docker build --label``): its JSON.
LABEL = "org.openenv.certificate"


def canonical_json(obj: Any) -> bytes:
    """The canonical JSON of ``obj`` (sorted keys, no spaces, UTF-8): what is hashed and signed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


#: The parts of an image's configuration that decide how it runs (all hashed by
#: :func:`content_digest`).
_CONFIG_KEYS = (
    "Cmd",
    "Entrypoint",
    "Env",
    "WorkingDir",
    "User",
    "ExposedPorts",
    "Volumes",
    "Healthcheck",
    "StopSignal",
)


def content_digest(attrs: dict[str, Any]) -> str:
    """The digest a certificate is bound to, from an image's engine attributes (``docker image
    inspect``): sha256 over its filesystem layers (``RootFS.Layers``, content digests), the
    configuration that decides how it runs, its labels but :data:`LABEL`, its OS and
    architecture. Any rebuild with a change gives another digest; attaching the certificate as
    the :data:`LABEL` label does not (the image id would change)."""
    config = attrs.get("Config") or {}
    labels = {k: v for k, v in (config.get("Labels") or {}).items() if k != LABEL}
    doc = {
        "layers": list((attrs.get("RootFS") or {}).get("Layers") or []),
        "config": {k: config.get(k) for k in _CONFIG_KEYS},
        "labels": labels,
        "os": attrs.get("Os"),
        "architecture": attrs.get("Architecture"),
    }
    return "sha256:" + hashlib.sha256(canonical_json(doc)).hexdigest()
