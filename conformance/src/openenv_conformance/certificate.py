"""Certificates bound to images (RFC 0007): what ``openenv certify docker:IMAGE
--certificate out.json --signing-key key.pem`` writes and ``openenv verify-certificate IMAGE
out.json --public-key pub.pem`` checks.

A certificate is a JSON document ``{"format", "payload", "signature", "public_key"}``. The
payload records the image's digest (:func:`content_digest`: its layers, run configuration
and labels, so any rebuild with a change gives another, while attaching the certificate as
the ``org.openenv.certificate`` label keeps it) and the engine's image id, the suite's
version and the hash of its rule set (every check's id, title, rule and transport needs), the
protocol versions, the levels, the seed, the transport and coverage, the verdict and every
check's status. The signature is
Ed25519 (``cryptography``) over the payload's canonical JSON (sorted keys, no spaces, UTF-8).

What it proves: whoever holds the private key ran this suite (this rule set) against the image
with this digest, over this transport, and every listed check had the listed result, with a
seed that reproduces the run. What it does not prove: that the environment is correct beyond
what the checks test (they sample behaviour, Hypothesis-style), that the key belongs to anyone
in particular (distribute and trust public keys yourself), that the image runs the same on
other hardware, or anything about images with another digest (a tag moved to a rebuild is not
covered).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from typing import Any

from openenv_conformance.digest import LABEL, canonical_json, content_digest
from openenv_conformance.registry import all_checks
from openenv_conformance.report import Report

__all__ = [
    "CERTIFICATE_FORMAT",
    "LABEL",
    "CertificateError",
    "content_digest",
    "image_digest",
    "issue",
    "issue_for_image",
    "ruleset_hash",
    "verify",
]

CERTIFICATE_FORMAT = "openenv-certificate/1"


class CertificateError(ValueError):
    """A certificate that does not verify (say why)."""


def ruleset_hash() -> str:
    """sha256 of the suite's rule set: every check's id, title, rule and transport needs."""
    rules = [[c.id, c.title, c.rule, sorted(c.requires)] for c in all_checks()]
    return "sha256:" + hashlib.sha256(canonical_json(rules)).hexdigest()


def image_digest(image: str) -> str:
    """:func:`content_digest` of a local image, from the Docker engine."""
    import docker

    try:
        return content_digest(docker.from_env().images.get(image).attrs)
    except docker.errors.ImageNotFound:
        raise CertificateError(f"no local image {image!r}") from None


def _private_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("the signing key is not an Ed25519 private key")
    return key


def _public_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the public key is not an Ed25519 public key")
    return key


def issue(report: Report, image: str, digest: str, signing_key_pem: bytes) -> str:
    """A signed certificate (JSON text) of a certified ``report`` of ``image`` (``digest``).
    Raises ValueError when the run is not certified or the key is not Ed25519."""
    from cryptography.hazmat.primitives import serialization

    if not report.certified:
        raise ValueError(f"the run is not certified ({report.verdict}): no certificate is issued")
    if not digest.startswith("sha256:"):
        raise ValueError(f"not an image digest: {digest!r}")
    key = _private_key(signing_key_pem)
    payload = {
        "image": image,
        "image_digest": digest,
        "image_id": report.image_id,
        "suite_version": report.suite_version,
        "ruleset_hash": ruleset_hash(),
        "suite_protocol_version": report.suite_protocol_version,
        "protocol_version": report.protocol_version,
        "environment": report.environment,
        "levels": report.levels,
        "seed": report.seed,
        "max_examples": report.max_examples,
        "transport": report.transport,
        "coverage": report.coverage,
        "verdict": report.verdict,
        "results": {r.id: r.status for r in report.results},
        "issued_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    raw_public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    doc = {
        "format": CERTIFICATE_FORMAT,
        "payload": payload,
        "signature": base64.b64encode(key.sign(canonical_json(payload))).decode(),
        "public_key": base64.b64encode(raw_public).decode(),
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def issue_for_image(report: Report, image: str, signing_key_pem: bytes) -> str:
    """:func:`issue` for the image the run certified (its digest as recorded in the report)."""
    if not report.image_digest:
        raise ValueError("the report records no image digest (certify a docker:IMAGE target)")
    return issue(report, image, report.image_digest, signing_key_pem)


def verify(certificate: str, public_key_pem: bytes, digest: str) -> dict[str, Any]:
    """The payload of ``certificate`` when its signature verifies under ``public_key_pem`` and it
    is bound to the image ``digest``; raises :class:`CertificateError` saying why not."""
    from cryptography.exceptions import InvalidSignature

    try:
        doc = json.loads(certificate)
        payload, signature = doc["payload"], base64.b64decode(doc["signature"], validate=True)
    except (ValueError, KeyError, TypeError) as e:
        raise CertificateError(f"not a certificate: {e}") from None
    if doc.get("format") != CERTIFICATE_FORMAT:
        raise CertificateError(f"unknown certificate format {doc.get('format')!r} (expected {CERTIFICATE_FORMAT})")
    try:
        _public_key(public_key_pem).verify(signature, canonical_json(payload))
    except InvalidSignature:
        raise CertificateError(
            "the signature does not verify: the certificate was altered or signed by another key"
        ) from None
    if payload.get("image_digest") != digest:
        raise CertificateError(
            f"the certificate is for image {payload.get('image_digest')}, not {digest} "
            "(the image was rebuilt or is another one)"
        )
    if payload.get("ruleset_hash") != ruleset_hash():
        payload = {**payload, "note": "issued by a suite with another rule set than this one"}
    return dict(payload)
