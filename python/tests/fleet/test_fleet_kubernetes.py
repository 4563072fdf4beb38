"""The ``kubernetes`` provider, checked without a cluster (none can run on these machines):
the rendered manifests against the Kubernetes OpenAPI schemas (``kubernetes-validate``,
strict) and the official client's typed models; discovery from schema-valid EndpointSlices;
a clear error when no cluster is configured. No fake API server stands in for one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

kubernetes_validate = pytest.importorskip("kubernetes_validate")
yaml = pytest.importorskip("yaml")
pytest.importorskip("kubernetes")

from openenv.errors import Unavailable  # noqa: E402
from openenv.fleet.kubernetes_provider import (  # noqa: E402
    KubernetesProvider,
    endpoints_from_slices,
    to_document,
    typed_model,
)
from openenv.fleet.manifests import FleetManifest, selector_labels, validate_manifests  # noqa: E402

CLI = [sys.executable, "-m", "openenv.cli", "fleet"]
VERSIONS = ["1.30.0", "1.33.0", "1.37.0"]  # oldest with every field we use .. newest schemas shipped


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("hpa", [None, 8])
def test_rendered_manifests_pass_strict_openapi_validation(version: str, hpa: int | None) -> None:
    docs = FleetManifest("openenv-echo-env:0.1.0", "echo", replicas=3, max_sessions=64, hpa_max_replicas=hpa).render()
    assert [d["kind"] for d in docs] == ["Deployment", "Service"] + (["HorizontalPodAutoscaler"] if hpa else [])
    assert validate_manifests(docs, version) == []


def test_validation_names_each_bad_field() -> None:
    docs = FleetManifest("img:1", "echo", hpa_max_replicas=4).render()
    docs[0]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {"port": 1}
    docs[1]["spec"]["clusterIP"] = 5
    docs[2]["spec"]["maxReplicas"] = "ten"
    problems = validate_manifests(docs)
    assert len(problems) == 3
    assert "Deployment/echo" in problems[0] and "grpcc" in problems[0]
    assert "Service/echo: spec/clusterIP" in problems[1]
    assert "HorizontalPodAutoscaler/echo: spec/maxReplicas" in problems[2]


def test_manifests_round_trip_through_the_official_clients_models() -> None:
    """What the provider sends (typed models) is exactly what was rendered: no field is
    unknown to the client or dropped on the way."""
    for doc in FleetManifest("img:1", "echo", max_sessions=32, hpa_max_replicas=5).render():
        assert to_document(typed_model(doc)) == doc


def test_the_pods_are_hardened_and_found_by_the_headless_service() -> None:
    dep, svc, hpa = FleetManifest("img:1", "echo", replicas=2, max_sessions=32, hpa_max_replicas=6).render()
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert c["readinessProbe"]["grpc"] == {"port": 50051}
    assert {"name": "OPENENV_MAX_SESSIONS", "value": "32"} in c["env"]
    assert svc["spec"]["clusterIP"] == "None"  # headless: pod addresses, no virtual IP
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"] == selector_labels("echo")
    assert dep["spec"]["template"]["metadata"]["labels"] == selector_labels("echo")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "echo"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)


def test_cli_render_prints_valid_multi_document_yaml() -> None:
    r = subprocess.run(
        [*CLI, "render", "k8s", "openenv-echo-env:0.1.0", "--replicas", "3", "--hpa-max", "9", "--namespace", "rl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    assert all(d["metadata"]["namespace"] == "rl" for d in docs)
    assert validate_manifests(docs) == []


def _slice(endpoints: list[dict[str, Any]], family: str = "IPv4") -> dict[str, Any]:
    doc = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "echo-abcde", "namespace": "rl", "labels": {"kubernetes.io/service-name": "echo"}},
        "addressType": family,
        "ports": [{"name": "grpc", "port": 50051, "protocol": "TCP"}, {"name": "http", "port": 8000}],
        "endpoints": endpoints,
    }
    kubernetes_validate.validate(doc, "1.33.0", strict=True)  # shaped as the API returns it
    return doc


def test_servers_are_the_ready_addresses_of_the_services_endpoint_slices() -> None:
    def ep(ip: str, pod: str, **conditions: bool) -> dict[str, Any]:
        return {
            "addresses": [ip],
            "conditions": conditions,
            "nodeName": "node-a",
            "targetRef": {"kind": "Pod", "name": pod, "namespace": "rl"},
        }

    slices = [
        _slice([ep("10.1.0.4", "echo-1", ready=True), ep("10.1.0.5", "echo-2", ready=False)]),
        _slice([ep("10.1.0.6", "echo-3", ready=True, terminating=True), ep("10.1.0.7", "echo-4")]),
        _slice([ep("fd00::8", "echo-5", ready=True)], family="IPv6"),
    ]
    found = endpoints_from_slices(slices)
    assert [(e.name, e.url) for e in found] == [
        ("echo-1", "grpc://10.1.0.4:50051"),
        ("echo-4", "grpc://10.1.0.7:50051"),  # ready unset means ready
        ("echo-5", "grpc://[fd00::8]:50051"),
    ]
    assert found[0].where == "node node-a"
    # The typed client's model of a slice parses the same way.
    assert endpoints_from_slices(to_document(typed_model(s)) for s in slices) == found


def test_without_a_cluster_up_fails_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    provider = KubernetesProvider("img:1", name="echo", config_file=str(tmp_path / "absent"))
    with pytest.raises(Unavailable, match="no Kubernetes cluster is configured"):
        provider.up(2)
