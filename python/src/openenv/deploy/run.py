"""Environment containers: run an image hardened, and a client that owns its container.

The image contract is docs/images.md. In short: ``openenv serve`` of the environment's
factory on gRPC port 50051 as a non-root user, a HEALTHCHECK on gRPC health, OCI and
``openenv.*`` labels, graceful SIGTERM, and a read-only root filesystem (writes go to /tmp).

Build (``openenv build ENV_DIR``)::

    result = build_image("envs/echo_env", offline=True, debootstrap_base=True)
    result.tag   # "openenv-echo-env:0.1.0"

Run::

    with start_container("openenv-echo-env:0.1.0") as c:
        c.url    # "grpc://127.0.0.1:<published port>"
        c.logs()

    async with EchoEnv.from_docker_image("openenv-echo-env:0.1.0") as env:   # client owns it
        await env.reset()

What you may rely on:

* :func:`start_container` publishes the gRPC port (and 8000, the HTTP/WebSocket side) on
  127.0.0.1 only, returns once gRPC
  health says SERVING, and removes the container on :meth:`Container.stop` (and when the
  ``with`` block ends). If the container exits or does not become ready, the container is
  removed and the error carries its logs.
* Hardened defaults: every capability dropped, ``no-new-privileges``, a pids limit, a memory
  limit (no extra swap), a read-only root filesystem with a tmpfs on /tmp. An image labelled
  ``openenv.sandbox`` (its environment runs submitted code, ``[tool.openenv] sandbox = true``)
  also gets the sandbox's security options: a seccomp profile that lets bubblewrap create its
  namespaces, an unmasked /proc (:func:`openenv.sandbox.container_security_options`); ``network_none``
  gives the container no network at all (the port is then reached through its network
  namespace, see :mod:`openenv.netns`).
* Every container carries ``openenv.managed=true``, ``openenv.env``, ``openenv.session``
  and ``openenv.owner`` (host, pid and start time of the process that started it), so
  :func:`list_containers` / ``openenv ps`` find them and :func:`cleanup` / ``openenv cleanup``
  removes those whose owner is gone (after a crash).
* Errors are :mod:`openenv.errors` exceptions: ``Unavailable`` (no engine, container died),
  ``NotFound`` (no such image or environment), ``DeadlineExceeded`` (not ready in time),
  ``FailedPrecondition`` (bad environment directory, base image missing for an offline build),
  ``Internal`` (a build step failed; the message has the end of its output).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any, TypeVar

import docker
import docker.errors

from openenv.client.env import BaseEnvClient
from openenv.client.health import check_health
from openenv.deploy.engine import GRPC_PORT, HTTP_PORT, MANAGED_LABEL, SANDBOX_LABEL, docker_client
from openenv.deploy.netns import NetnsForwarder
from openenv.errors import DeadlineExceeded, EnvError, NotFound, Unavailable
from openenv.sandbox import container_security_options

__all__ = ["Container", "client_from_image", "container_of", "owner_alive", "start_container"]


def _proc_start_time(pid: int) -> str:
    """The kernel's start time of a process (clock ticks since boot), "" where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _owner_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_proc_start_time(os.getpid())}"


def owner_alive(token: str) -> bool | None:
    """Whether the process named by an ``openenv.owner`` label still runs (None: another host)."""
    try:
        host, pid_s, start = token.rsplit(":", 2)
        pid = int(pid_s)
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    if start and _proc_start_time(pid):
        return _proc_start_time(pid) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _slug(s: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", s).strip("-.") or "env"


def _sandbox_options(dc: docker.DockerClient) -> list[str]:
    """The security options of an image labelled ``openenv.sandbox``, but for ``systempaths``
    (:func:`_create`: the API spells it as empty masked and read-only path lists)."""
    try:
        security = dc.info().get("SecurityOptions") or []
    except docker.errors.APIError:
        security = []
    opts = container_security_options(apparmor=any("apparmor" in str(o) for o in security))
    return [o for o in opts if not o.startswith("systempaths=")]


def _create(dc: docker.DockerClient, image: str, kwargs: dict[str, Any], *, unmasked_proc: bool) -> Any:
    """``containers.create``; with ``unmasked_proc``, ``--security-opt systempaths=unconfined``
    (which the Docker CLI turns into empty ``MaskedPaths``/``ReadonlyPaths`` and docker-py does
    not expose: its own argument conversion, then the low-level create)."""
    if not unmasked_proc:
        return dc.containers.create(image, **kwargs)
    from docker.models.containers import _create_container_args

    create_kwargs = _create_container_args({**kwargs, "image": image, "version": dc.api._version})
    create_kwargs["host_config"].update(MaskedPaths=[], ReadonlyPaths=[])
    resp = dc.api.create_container(**create_kwargs)
    return dc.containers.get(resp["Id"])


def _health_serving(target: str, timeout: float) -> bool:
    return check_health(target, "", timeout) == "SERVING"


class Container:
    """A running environment container started by :func:`start_container`.

    ``url`` is ``grpc://127.0.0.1:<port>``; ``http_url`` (``http://127.0.0.1:<port>``) reaches
    port 8000, the HTTP/WebSocket side. :meth:`stop` (or leaving the ``with`` block)
    sends SIGTERM, waits for the graceful drain, and removes the container.
    """

    def __init__(
        self, engine: docker.DockerClient, container: Any, *, image: str, session: str, network_none: bool
    ) -> None:
        self.engine, self._c = engine, container
        self.id: str = container.id
        self.name: str = container.name
        self.image, self.session, self.network_none = image, session, network_none
        self.port = 0
        self.url = ""
        self.http_port = 0
        self.http_url = ""  # the HTTP/WebSocket side (port 8000 inside), when the image serves one
        self.token: str | None = None  # the bearer token the server requires (RFC 0003)
        self.exit_code: int | None = None
        self._forwarders: list[Any] = []
        self._final_logs: str | None = None
        self._stopped = False

    def logs(self, tail: int | None = None) -> str:
        """The container's stdout and stderr so far (also after :meth:`stop`)."""
        if self._final_logs is not None:
            text = self._final_logs
        else:
            try:
                text = self._c.logs(stdout=True, stderr=True).decode(errors="replace")
            except docker.errors.NotFound:
                text = ""
        if tail is not None:
            text = "\n".join(text.splitlines()[-tail:])
        return text

    def inspect(self) -> dict[str, Any]:
        """The engine's ``docker inspect`` of the container."""
        self._c.reload()
        return dict(self._c.attrs)

    @property
    def status(self) -> str:
        """``running``, ``exited``, ... or ``removed``."""
        if self._stopped:
            return "removed"
        self._c.reload()
        return str(self._c.status)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, wait up to ``timeout`` seconds (then SIGKILL), keep the logs, remove. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for f in self._forwarders:
            f.close()
        try:
            self._c.stop(timeout=int(timeout))
            self._c.reload()
            self.exit_code = int(self._c.attrs["State"]["ExitCode"])
            self._final_logs = self._c.logs(stdout=True, stderr=True).decode(errors="replace")
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            pass  # removal below still runs
        try:
            self._c.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass

    close = stop

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Container {self.name} {self.image} {self.url or '(not ready)'}>"


def start_container(
    image: str,
    network_none: bool = False,
    ready_timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    memory: str | None = "1g",
    pids_limit: int | None = 512,
    *,
    read_only: bool = True,
    tmpfs_size: str = "256m",
    cpus: float | None = None,
    labels: Mapping[str, str] | None = None,
    name: str | None = None,
    command: list[str] | None = None,
    engine: docker.DockerClient | None = None,
    token: str | None = None,
    restart: str | None = "on-failure",
    owner: str | None = None,
) -> Container:
    """Start IMAGE hardened, wait until gRPC health is SERVING, and return the :class:`Container`.

    Args:
        image: a local image (it is never pulled).
        network_none: no network at all in the container; the gRPC port is then forwarded
            from 127.0.0.1 through the container's network namespace (needs root and a local engine).
        ready_timeout: seconds to wait for SERVING.
        env: environment variables of the container.
        memory: memory limit (e.g. ``"1g"``; swap is not added); None for none.
        pids_limit: most processes/threads in the container; None for none.
        read_only: read-only root filesystem, with a tmpfs of ``tmpfs_size`` on /tmp.
        cpus: CPU limit (e.g. 1.5); None for none.
        labels: extra labels (the ``openenv.*`` ones are always set).
        command: override the image's command.
        token: the bearer token the server requires (``OPENENV_TOKEN`` in the container;
            RFC 0003). Default: ``env``'s ``OPENENV_TOKEN``, else a new random one. The server
            listens on the container's interfaces, so it never runs without one; it is on
            :attr:`Container.token`, and :func:`client_from_image` clients send it.
        restart: the engine's restart policy: ``"on-failure"`` (default: a server killed by
            the kernel, e.g. out of memory, comes back, up to 3 times; its sessions are lost
            and clients see UNAVAILABLE), ``"unless-stopped"``, or None for none.
        owner: the ``openenv.owner`` label (default: this process, so ``openenv cleanup``
            removes the container once the process is gone); a fleet passes its own
            (``fleet:NAME``), which cleanup leaves alone.

    Raises:
        NotFound: no such local image. Unavailable: no engine, or the container exited before
        it was ready. DeadlineExceeded: not SERVING within ``ready_timeout``. In both latter
        cases the container is removed and the message ends with its logs.
    """
    dc = engine or docker_client()
    try:
        img = dc.images.get(image)
    except docker.errors.ImageNotFound:
        raise NotFound(f"image {image!r} is not present locally; build it with `openenv build ENV_DIR`") from None
    env_name = (img.labels or {}).get("openenv.env.name") or image
    session = uuid.uuid4().hex[:12]
    all_labels = {
        **(labels or {}),
        MANAGED_LABEL: "true",
        "openenv.env": env_name,
        "openenv.session": session,
        "openenv.owner": owner or _owner_token(),
        "openenv.image": image,
    }
    environment = dict(env or {})
    token = token or environment.get("OPENENV_TOKEN") or secrets.token_urlsafe(24)
    environment["OPENENV_TOKEN"] = token
    kwargs: dict[str, Any] = {
        "detach": True,
        "name": name or f"openenv-{_slug(env_name)}-{session}",
        "labels": all_labels,
        "environment": environment,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        # Docker's init (tini) as PID 1, the server its child: it reaps the orphans of any
        # process tree an environment runs (a Chromium killed by browser_env's watchdog leaves
        # its renderers to PID 1; a Python server there never waits for them, and the zombies
        # count against pids_limit) and forwards SIGTERM to the server, which drains.
        "init": True,
    }
    sandboxed = bool((img.labels or {}).get(SANDBOX_LABEL))
    if sandboxed:
        kwargs["security_opt"] += _sandbox_options(dc)
    if command is not None:
        kwargs["command"] = command
    if restart:
        kwargs["restart_policy"] = {"Name": restart, **({"MaximumRetryCount": 3} if restart == "on-failure" else {})}
    if pids_limit is not None:
        kwargs["pids_limit"] = int(pids_limit)
    if memory is not None:
        kwargs["mem_limit"] = memory
        kwargs["memswap_limit"] = memory
    if cpus is not None:
        kwargs["nano_cpus"] = int(cpus * 1e9)
    if read_only:
        kwargs["read_only"] = True
        kwargs["tmpfs"] = {"/tmp": f"rw,nosuid,nodev,size={tmpfs_size},mode=1777"}
    if network_none:
        kwargs["network_mode"] = "none"
    else:
        kwargs["ports"] = {f"{GRPC_PORT}/tcp": ("127.0.0.1", None), f"{HTTP_PORT}/tcp": ("127.0.0.1", None)}
    try:
        raw = _create(dc, image, kwargs, unmasked_proc=sandboxed)
    except docker.errors.APIError as e:
        raise Unavailable(f"cannot create a container of {image}: {e.explanation or e}") from None
    c = Container(dc, raw, image=image, session=session, network_none=network_none)
    c.token = token
    try:
        raw.start()
        raw.reload()
        _check_running(c, raw)
        if network_none:
            pid = int(raw.attrs["State"]["Pid"])
            c._forwarders = [NetnsForwarder(pid, port).start() for port in (GRPC_PORT, HTTP_PORT)]
            c.port, c.http_port = (f.port for f in c._forwarders)
        else:
            published = raw.attrs["NetworkSettings"]["Ports"] or {}
            bindings = published.get(f"{GRPC_PORT}/tcp") or []
            if not bindings:
                raise Unavailable(f"container {c.name}: port {GRPC_PORT} was not published")
            c.port = int(bindings[0]["HostPort"])
            http = published.get(f"{HTTP_PORT}/tcp") or []
            c.http_port = int(http[0]["HostPort"]) if http else 0
        c.url = f"grpc://127.0.0.1:{c.port}"
        c.http_url = f"http://127.0.0.1:{c.http_port}" if c.http_port else ""
        _wait_ready(c, raw, ready_timeout)
    except BaseException as e:
        logs = c.logs(tail=60)
        c.stop(timeout=2)
        if isinstance(e, docker.errors.APIError):
            e = Unavailable(f"cannot start a container of {image}: {e.explanation or e}")
        if isinstance(e, EnvError):
            e.message = f"{e.message}\n--- container logs (last 60 lines) ---\n{logs}"
            e.args = (e.message,)
            e.logs = logs  # type: ignore[attr-defined]
            raise e from None
        raise
    return c


def _check_running(c: Container, raw: Any) -> None:
    state = raw.attrs["State"]
    # "restarting": it exited and the restart policy brings it back; before it was ever
    # ready, that is a failure to start, not something to wait out.
    if state["Status"] in ("exited", "dead", "restarting") or state.get("Restarting"):
        oom = " (killed: out of memory)" if state.get("OOMKilled") else ""
        raise Unavailable(
            f"container {c.name} of {c.image} exited with code {state['ExitCode']}{oom} before it was ready"
        )


def _wait_ready(c: Container, raw: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    target = f"127.0.0.1:{c.port}"
    while True:
        raw.reload()
        _check_running(c, raw)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(
                f"container {c.name} of {c.image} was not SERVING on gRPC health within {timeout:g} s"
            )
        if _health_serving(target, timeout=max(0.1, min(2.0, remaining))):
            return
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


C = TypeVar("C", bound="BaseEnvClient")
_CONTAINER_KWARGS = {
    "network_none",
    "ready_timeout",
    "env",
    "memory",
    "pids_limit",
    "read_only",
    "tmpfs_size",
    "cpus",
    "labels",
    "name",
    "command",
    "engine",
    "restart",
}


def client_from_image(cls: type[C], image: str, **kwargs: Any) -> C:
    """Start IMAGE (:func:`start_container` keywords) and return an unconnected ``cls`` client of it.

    The client owns the container (:meth:`openenv.EnvClient.own`): closing the client stops and
    removes it (and so does garbage collection or interpreter exit, should the client never
    be closed); :func:`container_of` finds it. The other keywords go to ``cls``.
    """
    ckw = {k: kwargs.pop(k) for k in list(kwargs) if k in _CONTAINER_KWARGS}
    container = start_container(image, **ckw)
    try:
        kwargs.setdefault("token", container.token)
        client = cls(container.url, **kwargs)
    except BaseException:
        container.stop()
        raise
    client.own(container, container.stop)
    weakref.finalize(client, container.stop)
    return client


def container_of(client: BaseEnvClient) -> Container | None:
    """The container ``client`` owns (:func:`client_from_image`), or None (never had one, or
    the client was closed: closing stops and removes it)."""
    return next((r for r in client.resources if isinstance(r, Container)), None)
