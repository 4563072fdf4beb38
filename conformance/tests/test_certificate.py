"""Certificates bound to images (RFC 0007): issued for an image by ``openenv certify
--certificate``, verified by ``openenv verify-certificate``, and refused once the image is
rebuilt with a change or the file is altered. Against a real Docker engine."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conformance_testlib import ROOT

from openenv_conformance.cli import certify, verify_certificate

PREFIX = "openenv-issue13-cert"


def _keys(tmp: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = tmp / "key.pem"
    public = tmp / "pub.pem"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def _derived(client: Any, base: str, tag: str, change: str) -> str:
    """``tag``: ``base`` plus one label (``change``): a rebuild with a change."""
    dockerfile = f"FROM {base}\nLABEL org.openenv.test-change={json.dumps(change)}\n"
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return str(image.id)


@pytest.mark.docker
@pytest.mark.slow
def test_a_certificate_round_trips_and_is_refused_after_a_rebuild_or_an_edit(tmp_path: Path) -> None:
    pytest.importorskip("docker", reason="the docker extra (docker targets) is not installed")
    from openenv.deploy.build import build_image
    from openenv.deploy.engine import docker_client, engine_available
    from openenv.deploy.project import EnvProject

    ok, why = engine_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    client = docker_client()
    env_dir = ROOT / "envs" / "echo_env"
    base = EnvProject.load(env_dir).image_tag
    try:
        client.images.get(base)
    except Exception:  # noqa: BLE001 - not built yet: build it (the images tests share the tag)
        base = build_image(env_dir, echo=lambda line: None).tag
    tag = f"{PREFIX}:latest"
    private, public = _keys(tmp_path)
    cert = tmp_path / "cert.json"
    runner = CliRunner()
    try:
        first = _derived(client, base, tag, "one")
        r = runner.invoke(
            certify,
            [
                f"docker:{tag}",
                "-l",
                "protocol",
                "-l",
                "lifecycle",
                "--seed",
                "3",
                "--max-examples",
                "10",
                "--certificate",
                str(cert),
                "--signing-key",
                str(private),
            ],
        )
        assert r.exit_code == 0, r.output
        assert "CERTIFIED (grpc, " in r.output, r.output[-1500:]
        doc = json.loads(cert.read_text())
        assert doc["payload"]["image_id"] == first and doc["payload"]["image_digest"].startswith("sha256:")
        assert doc["payload"]["ruleset_hash"].startswith("sha256:") and doc["payload"]["seed"] == 3
        assert doc["payload"]["results"]["lifecycle.state_machine"] == "pass"

        r = runner.invoke(verify_certificate, [tag, str(cert), "--public-key", str(public)])
        assert r.exit_code == 0, r.output
        assert "VERIFIED" in r.output and doc["payload"]["image_digest"] in r.output

        altered = tmp_path / "altered.json"
        doc["payload"]["results"]["lifecycle.state_machine"] = "skip"
        altered.write_text(json.dumps(doc))
        r = runner.invoke(verify_certificate, [tag, str(altered), "--public-key", str(public)])
        assert r.exit_code == 1 and "signature does not verify" in r.output, r.output

        someone_else = tmp_path / "someone-else"
        someone_else.mkdir()
        _, stranger = _keys(someone_else)
        r = runner.invoke(verify_certificate, [tag, str(cert), "--public-key", str(stranger)])
        assert r.exit_code == 1 and "signature does not verify" in r.output, r.output

        # Attached as the image's label (a new image id), the certificate still verifies: the
        # digest covers layers, run configuration and the other labels, not this one.
        labelled = f"{PREFIX}-labelled:latest"
        client.images.build(
            fileobj=io.BytesIO(f"FROM {tag}\n".encode()),
            tag=labelled,
            rm=True,
            labels={"org.openenv.certificate": cert.read_text()},
        )
        r = runner.invoke(verify_certificate, [labelled, "--public-key", str(public)])
        assert r.exit_code == 0 and "VERIFIED" in r.output, r.output

        second = _derived(client, base, tag, "two")  # the same tag, rebuilt with a change
        assert second != first
        r = runner.invoke(verify_certificate, [tag, str(cert), "--public-key", str(public)])
        assert r.exit_code == 1 and "rebuilt" in r.output, r.output
    finally:
        for t in (f"{PREFIX}-labelled:latest", tag):
            try:
                client.images.remove(t, force=True)
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
