"""The docker: target, against a real engine (skipped with the reason when there is none)."""

from __future__ import annotations

import pytest
from conformance_testlib import ROOT

from openenv_conformance.runner import certify


@pytest.mark.docker
@pytest.mark.slow
def test_docker_target_certifies_an_image() -> None:
    pytest.importorskip("docker", reason="the docker extra (docker targets) is not installed")
    from openenv.deploy.build import build_image
    from openenv.deploy.engine import docker_client, engine_available
    from openenv.deploy.project import EnvProject

    ok, why = engine_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    env_dir = ROOT / "envs" / "echo_env"
    tag = EnvProject.load(env_dir).image_tag
    try:
        docker_client().images.get(tag)
    except Exception:  # noqa: BLE001 - not built yet: build it (the images tests share the tag)
        tag = build_image(env_dir, echo=lambda line: None).tag
    report = certify(f"docker:{tag}", levels=["protocol", "lifecycle"], seed=3, max_examples=20)
    assert report.exit_code == 0, [(r.id, r.reason) for r in report.results if not r.ok] or report.unusable
    assert report.target_url.startswith("grpc://127.0.0.1:")


@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_targets_grading_probes_are_read_from_its_image() -> None:
    """RFC 0015: the grading level reads a docker: target's probes by running
    ``python -m openenv.runtime.grading_probes`` in a container of the image (its
    ``openenv.factory`` label, /opt/openenv/bin/python, no network), and certifies coding_env's
    image at that level with its references played."""
    pytest.importorskip("docker", reason="the docker extra (docker targets) is not installed")
    from openenv.deploy.build import build_image
    from openenv.deploy.engine import docker_client, engine_available
    from openenv.deploy.project import EnvProject

    ok, why = engine_available()
    if not ok:
        pytest.skip(f"no Docker engine: {why}")
    env_dir = ROOT / "envs" / "coding_env"
    tag = EnvProject.load(env_dir).image_tag
    try:
        docker_client().images.get(tag)
    except Exception:  # noqa: BLE001 - not built yet: build it (the images tests share the tag)
        tag = build_image(env_dir, echo=lambda line: None).tag
    report = certify(f"docker:{tag}", levels=["grading"], seed=3)
    assert report.exit_code == 0, [(r.id, r.reason) for r in report.results if not r.ok] or report.unusable
    assert report.result("grading.reference").status == "pass", report.result("grading.reference").reason
    assert "references earned 1" in report.result("grading.reference").note


def test_docker_target_without_the_image_is_unusable() -> None:
    report = certify("docker:openenv-conformance-no-such-image:0", levels=["protocol"])
    assert report.exit_code == 2
    assert "openenv-conformance-no-such-image" in (report.unusable or "") or "engine" in (report.unusable or "")
