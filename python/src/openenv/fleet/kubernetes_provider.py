"""The ``kubernetes`` provider: a Deployment + headless Service (+ optional HPA) per
environment image, through the official ``kubernetes`` client (the ``kubernetes`` extra).

The manifests are :class:`openenv.fleet.manifests.FleetManifest`'s, the same ones
``openenv fleet render k8s`` prints. Servers are found through the headless Service's
EndpointSlices (``kubernetes.io/service-name=NAME``): every ready pod address is one server,
``grpc://POD_IP:50051``, reached directly (a client in the cluster's pod network, or through
a route to it); Kubernetes replaces dead pods by itself and the next
:meth:`KubernetesProvider.endpoints` reports the new ones.

No cluster runs on the machines this project is tested on: the manifests are validated
offline against the Kubernetes OpenAPI schemas and the EndpointSlice parsing against
schema-valid EndpointSlice documents; the API calls themselves are exercised only against a
real cluster (docs/fleet.md says what was and was not).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes
import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from openenv.errors import DeadlineExceeded, FailedPrecondition, Unavailable
from openenv.fleet.manifests import GRPC_PORT, FleetManifest
from openenv.fleet.provider import Endpoint, Progress, Provider, _quiet

__all__ = ["KubernetesProvider", "endpoints_from_slices", "typed_model"]

_MODELS: dict[str, Any] = {
    "Deployment": kubernetes.client.V1Deployment,
    "Service": kubernetes.client.V1Service,
    "HorizontalPodAutoscaler": kubernetes.client.V2HorizontalPodAutoscaler,
    "EndpointSlice": kubernetes.client.V1EndpointSlice,
}


def typed_model(doc: Mapping[str, Any]) -> Any:
    """``doc`` as the official client's model of its kind (what the API calls send)."""
    return _MODELS[str(doc["kind"])].from_dict(dict(doc))


def to_document(model: Any) -> dict[str, Any]:
    """A client model as the API's JSON document (camelCase keys)."""
    doc: dict[str, Any] = kubernetes.client.ApiClient().sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return doc


def endpoints_from_slices(slices: Iterable[Mapping[str, Any]]) -> list[Endpoint]:
    """The ready servers listed by EndpointSlices (API documents, camelCase keys): one
    endpoint per ready address, on the slice's ``grpc`` port (50051 when unnamed)."""
    out: dict[str, Endpoint] = {}
    for sl in slices:
        ports = {p.get("name") or "": p.get("port") for p in sl.get("ports") or []}
        port = ports.get("grpc") or GRPC_PORT
        family = sl.get("addressType", "IPv4")
        for ep in sl.get("endpoints") or []:
            conditions = ep.get("conditions") or {}
            # ready unset means ready (EndpointSlice API); terminating pods are not.
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            ref = ep.get("targetRef") or {}
            for addr in ep.get("addresses") or []:
                host = f"[{addr}]" if family == "IPv6" else addr
                url = f"grpc://{host}:{port}"
                where = f"node {ep['nodeName']}" if ep.get("nodeName") else ""
                out[url] = Endpoint(ref.get("name") or addr, url, where)
    return sorted(out.values(), key=lambda e: e.name)


class KubernetesProvider(Provider):
    """Servers of ``image`` as pods of a Deployment, found through a headless Service.

    ``context``/``config_file``: the kubeconfig to use (default: in-cluster config when run in
    a pod, else ``~/.kube/config``). The other keywords are :class:`FleetManifest`'s
    (``token_secret``: the Secret holding the servers' bearer token; clients then pass the same
    token to :class:`~openenv.fleet.FleetClient`).
    """

    kind = "kubernetes"

    def __init__(
        self,
        image: str,
        *,
        name: str = "openenv",
        namespace: str = "default",
        max_sessions: int | None = None,
        hpa_max_replicas: int | None = None,
        cpu: str = "500m",
        memory: str = "512Mi",
        context: str | None = None,
        config_file: str | None = None,
        ready_timeout: float = 300.0,
        api_client: kubernetes.client.ApiClient | None = None,
        token_secret: str | None = None,
    ) -> None:
        self.spec = FleetManifest(
            image=image,
            name=name,
            namespace=namespace,
            max_sessions=max_sessions,
            hpa_max_replicas=hpa_max_replicas,
            cpu=cpu,
            memory=memory,
            token_secret=token_secret,
        )
        self.context, self.config_file = context, config_file
        self.ready_timeout = ready_timeout
        self._api = api_client

    @property
    def api(self) -> kubernetes.client.ApiClient:
        if self._api is None:
            try:
                kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
            except kubernetes.config.ConfigException:
                try:
                    kubernetes.config.load_kube_config(config_file=self.config_file, context=self.context)  # type: ignore[no-untyped-call]
                except (kubernetes.config.ConfigException, OSError) as e:
                    raise Unavailable(
                        "no Kubernetes cluster is configured "
                        f"(no in-cluster service account, no usable kubeconfig): {e}"
                    ) from None
            self._api = kubernetes.client.ApiClient()
        return self._api

    def _apply(self, doc: dict[str, Any]) -> None:
        """Create ``doc`` (as the client's typed model), or replace it when it exists (``up``
        twice converges)."""
        kind, ns, name = doc["kind"], self.spec.namespace, self.spec.name
        body = typed_model(doc)
        apps = kubernetes.client.AppsV1Api(self.api)
        core = kubernetes.client.CoreV1Api(self.api)
        hpa = kubernetes.client.AutoscalingV2Api(self.api)
        calls: dict[str, tuple[Any, Any]] = {
            "Deployment": (apps.create_namespaced_deployment, apps.replace_namespaced_deployment),
            "Service": (core.create_namespaced_service, None),  # a Service's clusterIP is immutable
            "HorizontalPodAutoscaler": (
                hpa.create_namespaced_horizontal_pod_autoscaler,
                hpa.replace_namespaced_horizontal_pod_autoscaler,
            ),
        }
        create, replace = calls[kind]
        try:
            create(ns, body)
        except ApiException as e:
            if e.status != 409:
                raise _api_error(e, f"creating {kind} {ns}/{name}") from None
            if replace is not None:
                try:
                    replace(name, ns, body)
                except ApiException as e2:
                    raise _api_error(e2, f"replacing {kind} {ns}/{name}") from None

    def up(self, replicas: int, progress: Progress = _quiet) -> list[Endpoint]:
        self.spec.replicas = replicas
        self.spec.__post_init__()
        docs = self.spec.render()
        for doc in docs:
            self._apply(doc)
            progress(f"applied {doc['kind']} {self.spec.namespace}/{self.spec.name}")
        deadline = time.monotonic() + self.ready_timeout
        seen = -1
        while True:
            eps = self.endpoints()
            if len(eps) != seen:
                seen = len(eps)
                progress(f"{seen}/{replicas} server(s) ready")
            if seen >= replicas:
                return eps
            if time.monotonic() > deadline:
                raise DeadlineExceeded(
                    f"{seen}/{replicas} pods of {self.spec.name} ready after {self.ready_timeout:g} s "
                    f"(kubectl -n {self.spec.namespace} describe deployment {self.spec.name})"
                )
            time.sleep(1.0)

    def endpoints(self) -> list[Endpoint]:
        discovery = kubernetes.client.DiscoveryV1Api(self.api)
        try:
            slices = discovery.list_namespaced_endpoint_slice(
                self.spec.namespace, label_selector=f"kubernetes.io/service-name={self.spec.name}"
            )
        except ApiException as e:
            raise _api_error(e, f"listing the EndpointSlices of {self.spec.namespace}/{self.spec.name}") from None
        return endpoints_from_slices(to_document(s) for s in slices.items)

    def down(self, progress: Progress = _quiet) -> None:
        ns, name = self.spec.namespace, self.spec.name
        deletions: list[tuple[str, Any]] = [
            (
                "HorizontalPodAutoscaler",
                kubernetes.client.AutoscalingV2Api(self.api).delete_namespaced_horizontal_pod_autoscaler,
            ),
            ("Service", kubernetes.client.CoreV1Api(self.api).delete_namespaced_service),
            ("Deployment", kubernetes.client.AppsV1Api(self.api).delete_namespaced_deployment),
        ]
        for kind, delete in deletions:
            try:
                delete(name, ns)
            except ApiException as e:
                if e.status != 404:
                    raise _api_error(e, f"deleting {kind} {ns}/{name}") from None
                continue
            progress(f"deleted {kind} {ns}/{name}")

    def state(self) -> dict[str, Any]:
        s = self.spec
        return {
            "kind": self.kind,
            "image": s.image,
            "name": s.name,
            "namespace": s.namespace,
            "max_sessions": s.max_sessions,
            "hpa_max_replicas": s.hpa_max_replicas,
            "context": self.context,
            "config_file": self.config_file,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> KubernetesProvider:
        return cls(
            str(state["image"]),
            name=str(state["name"]),
            namespace=str(state.get("namespace", "default")),
            max_sessions=state.get("max_sessions"),
            hpa_max_replicas=state.get("hpa_max_replicas"),
            context=state.get("context"),
            config_file=state.get("config_file"),
        )


def _api_error(e: ApiException, what: str) -> Exception:
    if e.status in (401, 403):
        return FailedPrecondition(f"{what}: not allowed ({e.status} {e.reason})")
    return Unavailable(f"{what}: {e.status} {e.reason}: {(e.body or '')[:500]}")
