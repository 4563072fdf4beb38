"""Kubernetes manifests of a fleet: a Deployment of the environment's image, a headless
Service (its pods' addresses, one per server: clients place sessions on pods themselves, no
L7 balancer in the data path) and, optionally, a HorizontalPodAutoscaler.

Plain dictionaries: rendering needs no extra. :func:`to_yaml` writes them (PyYAML, the
``kubernetes`` extra; JSON, which is also YAML, without it) and :func:`validate_manifests`
checks them offline against the Kubernetes OpenAPI schemas (``kubernetes-validate``, the
``kubernetes`` extra), strictly: an unknown or misspelt field is an error.

The pods follow the image contract (docs/images.md) and Kubernetes' restricted Pod Security
Standard: non-root (uid 10001), no privilege escalation, every capability dropped, the
runtime's seccomp profile, a read-only root filesystem with an in-memory ``/tmp``; readiness
and liveness are the standard gRPC health check on port 50051 (native ``grpc`` probes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

__all__ = [
    "GRPC_PORT",
    "HTTP_PORT",
    "KUBERNETES_VERSION",
    "FleetManifest",
    "selector_labels",
    "to_yaml",
    "validate_manifests",
]

GRPC_PORT = 50051
HTTP_PORT = 8000
#: The Kubernetes version whose schemas :func:`validate_manifests` uses by default.
KUBERNETES_VERSION = "1.33.0"


def selector_labels(name: str) -> dict[str, str]:
    """The labels that select the pods of fleet ``name`` (Deployment, Service, discovery)."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "openenv-fleet"}


@dataclasses.dataclass
class FleetManifest:
    """What a fleet on Kubernetes is made of; :meth:`render` gives the manifests."""

    image: str
    name: str
    namespace: str = "default"
    replicas: int = 2
    #: Capacity of each server (``OPENENV_MAX_SESSIONS``); None keeps the environment's.
    max_sessions: int | None = None
    cpu: str = "500m"
    memory: str = "512Mi"
    tmp_size: str = "256Mi"
    #: Add a HorizontalPodAutoscaler (CPU-based) from ``replicas`` up to this many pods.
    hpa_max_replicas: int | None = None
    hpa_cpu_percent: int = 70
    image_pull_policy: str = "IfNotPresent"
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    grace_s: int = 30
    #: A Secret (in ``namespace``) whose key ``token`` is the bearer token the servers require
    #: (``OPENENV_TOKEN``, RFC 0003): pods listen beyond loopback, so the image's server
    #: refuses to start without a token unless ``env`` sets ``OPENENV_ALLOW_ANONYMOUS=1``.
    token_secret: str | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        if self.hpa_max_replicas is not None and self.hpa_max_replicas < self.replicas:
            raise ValueError("hpa_max_replicas must be >= replicas")

    def _meta(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {**selector_labels(self.name), "app.kubernetes.io/managed-by": "openenv"},
        }

    def deployment(self) -> dict[str, Any]:
        env = {"OPENENV_HOST": "0.0.0.0", "OPENENV_GRPC_PORT": str(GRPC_PORT), **self.env}
        if self.max_sessions is not None:
            env["OPENENV_MAX_SESSIONS"] = str(self.max_sessions)
        probe = {"grpc": {"port": GRPC_PORT}, "periodSeconds": 10, "timeoutSeconds": 5}
        container = {
            "name": "env",
            "image": self.image,
            "imagePullPolicy": self.image_pull_policy,
            "ports": [
                {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            ],
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())]
            + (
                [{"name": "OPENENV_TOKEN", "valueFrom": {"secretKeyRef": {"name": self.token_secret, "key": "token"}}}]
                if self.token_secret
                else []
            ),
            "readinessProbe": {**probe, "failureThreshold": 1},
            "livenessProbe": {**probe, "failureThreshold": 3, "initialDelaySeconds": 10},
            "startupProbe": {**probe, "failureThreshold": 30, "periodSeconds": 2},
            "resources": {
                "requests": {"cpu": self.cpu, "memory": self.memory},
                "limits": {"memory": self.memory},
            },
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "runAsGroup": 10001,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": self._meta(),
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": selector_labels(self.name)},
                # Sessions are stateful: replace pods one at a time, never all at once.
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
                "template": {
                    "metadata": {"labels": selector_labels(self.name)},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "enableServiceLinks": False,
                        "terminationGracePeriodSeconds": self.grace_s,  # the server drains on SIGTERM
                        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [container],
                        "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": self.tmp_size}}],
                        # Spread servers over nodes: a node's loss takes as few as possible.
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": selector_labels(self.name)},
                            }
                        ],
                    },
                },
            },
        }

    def service(self) -> dict[str, Any]:
        """Headless: DNS and EndpointSlices list every ready pod, no virtual IP in between."""
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._meta(),
            "spec": {
                "clusterIP": "None",
                "selector": selector_labels(self.name),
                "ports": [
                    {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "appProtocol": "kubernetes.io/h2c"},
                    {"name": "http", "port": HTTP_PORT, "targetPort": "http", "appProtocol": "http"},
                ],
            },
        }

    def hpa(self) -> dict[str, Any] | None:
        if self.hpa_max_replicas is None:
            return None
        return {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": self._meta(),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": self.name},
                "minReplicas": self.replicas,
                "maxReplicas": self.hpa_max_replicas,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": self.hpa_cpu_percent},
                        },
                    }
                ],
                # Scaling down ends sessions: only slowly.
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
        }

    def render(self) -> list[dict[str, Any]]:
        """Deployment, Service and (when asked) HorizontalPodAutoscaler, in apply order."""
        docs = [self.deployment(), self.service()]
        hpa = self.hpa()
        if hpa is not None:
            docs.append(hpa)
        return docs


def to_yaml(docs: Sequence[dict[str, Any]]) -> str:
    """The manifests as one multi-document YAML stream (JSON documents without PyYAML)."""
    try:
        import yaml
    except ImportError:
        return "".join(f"---\n{json.dumps(d, indent=2)}\n" for d in docs)
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)


def validate_manifests(docs: Sequence[dict[str, Any]], kubernetes_version: str = KUBERNETES_VERSION) -> list[str]:
    """Problems of each manifest against the OpenAPI schemas of ``kubernetes_version``
    (strict: unknown fields are errors), as ``"Kind/name: message"`` lines; empty when valid.

    Needs ``kubernetes-validate`` (the ``kubernetes`` extra); ImportError otherwise."""
    import kubernetes_validate

    problems = []
    for d in docs:
        where = f"{d.get('kind')}/{d.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(d, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            problems.append(f"{where}: {path}: {e.message}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
            problems.append(f"{where}: no schema: {e}")
    return problems
