"""Environment images: build them, run them hardened, list and clean up their containers.

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
  limit (no extra swap), a read-only root filesystem with a tmpfs on /tmp; ``network_none``
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

import asyncio
import functools
import json
import os
import re
import shutil
import socket
import tempfile
import time
import tomllib
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from openenv.errors import DeadlineExceeded, EnvError, FailedPrecondition, Internal, NotFound, Unavailable
from openenv.wheelhouse import Target, build_wheelhouse, canonical_name, copy_project

if TYPE_CHECKING:
    import docker

    from openenv.client import EnvClient

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "GRPC_PORT",
    "HTTP_PORT",
    "MANAGED_LABEL",
    "BuildResult",
    "Container",
    "EnvProject",
    "ManagedContainer",
    "build_image",
    "cleanup",
    "client_from_image",
    "docker_client",
    "list_containers",
    "start_container",
]

DEFAULT_BASE_IMAGE = "python:3.11-slim"
GRPC_PORT = 50051
HTTP_PORT = 8000  # reserved for the HTTP/WebSocket bridge
MANAGED_LABEL = "openenv.managed"
_TEMPLATES = Path(__file__).parent / "templates"

Echo = Callable[[str], None]


def _quiet(msg: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------- engine


def docker_client(timeout: float = 120.0) -> docker.DockerClient:
    """A client of the Docker engine named by the environment (``DOCKER_HOST``, default socket).

    Raises:
        Unavailable: no engine answers (the message says where it looked).
    """
    import docker
    import docker.errors

    try:
        dc = docker.from_env(timeout=int(timeout))
        dc.ping()
    except docker.errors.DockerException as e:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise Unavailable(f"cannot reach the Docker engine at {where}: {e}. Is dockerd running?") from None
    return dc


def engine_available() -> tuple[bool, str]:
    """(True, version) when a Docker engine answers, else (False, the reason)."""
    try:
        dc = docker_client(timeout=10)
    except Unavailable as e:
        return False, e.message
    try:
        return True, str(dc.version().get("Version", "?"))
    finally:
        dc.close()


# ---------------------------------------------------------------------------------------------- projects


@dataclass(frozen=True)
class EnvProject:
    """An environment directory: its ``pyproject.toml`` ``[project]`` and ``[tool.openenv]`` tables."""

    path: Path
    name: str  # canonical distribution name, e.g. "echo-env"
    version: str
    factory: str  # "module:Class", from [tool.openenv] factory
    description: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EnvProject:
        """Read ENV_DIR/pyproject.toml.

        Raises:
            NotFound: no pyproject.toml. FailedPrecondition: a required key is missing.
        """
        p = Path(path).resolve()
        py = p / "pyproject.toml"
        if not py.is_file():
            raise NotFound(f"{p} is not an environment directory: it has no pyproject.toml")
        try:
            data = tomllib.loads(py.read_text())
        except tomllib.TOMLDecodeError as e:
            raise FailedPrecondition(f"{py}: {e}") from None
        project = data.get("project", {})
        for key in ("name", "version"):
            if not isinstance(project.get(key), str):
                raise FailedPrecondition(f"{py}: [project] {key} is required (a static string)")
        factory = data.get("tool", {}).get("openenv", {}).get("factory")
        if not isinstance(factory, str) or ":" not in factory:
            raise FailedPrecondition(
                f'{py}: [tool.openenv] factory = "module:Class" is required (what the image serves)')
        return cls(p, canonical_name(project["name"]), project["version"], factory, project.get("description", ""))

    @property
    def image_tag(self) -> str:
        """The default tag, ``openenv-<name>:<version>``."""
        return f"openenv-{self.name}:{self.version}"


def _openenv_source(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The source tree of the running ``openenv`` package (its directory with pyproject.toml)."""
    candidates = [Path(explicit)] if explicit else []
    if os.environ.get("OPENENV_SOURCE"):
        candidates.append(Path(os.environ["OPENENV_SOURCE"]))
    candidates.append(Path(__file__).resolve().parents[2])  # python/src/openenv/images.py -> python/
    for c in candidates:
        py = c / "pyproject.toml"
        if py.is_file() and tomllib.loads(py.read_text()).get("project", {}).get("name") == "openenv":
            return c.resolve()
    raise FailedPrecondition("cannot find the source tree of the openenv package (needed to put it in the image): "
                             "pass --openenv-source DIR or set OPENENV_SOURCE")


# ---------------------------------------------------------------------------------------------- base probe


_PROBE = ("import json, platform, sys, ensurepip, venv; "
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
          "'libc': platform.libc_ver()}))")


def probe_base(dc: docker.DockerClient, image: str) -> Target:
    """Run the base image once (no network) to read its Python version, machine and C library."""
    import docker.errors

    try:
        out = dc.containers.run(image, ["python3", "-c", _PROBE], entrypoint=[], remove=True, network_mode="none",
                                stdout=True, stderr=True)
    except docker.errors.ContainerError as e:
        raise FailedPrecondition(f"base image {image} has no usable python3 with venv/ensurepip: "
                                 f"{(e.stderr or b'').decode(errors='replace')[-500:]}") from None
    d = json.loads(out.decode().strip().splitlines()[-1])
    libc, libc_version = d["libc"] if d["libc"][0] else ("", "0.0")
    return Target(d["python"], d["machine"], libc, libc_version)


# ---------------------------------------------------------------------------------------------- build


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_image` made."""

    tag: str
    image_id: str
    base_image: str
    offline: bool
    seconds: float
    labels: dict[str, str] = field(default_factory=dict)


def dockerfile_template() -> str:
    """The Dockerfile that ``openenv build`` uses for an environment without its own."""
    return (_TEMPLATES / "Dockerfile").read_text()


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def image_labels(env: EnvProject, base_image: str) -> dict[str, str]:
    """The labels of an environment image (docs/images.md)."""
    from openenv.session import PROTOCOL_VERSION

    return {
        "org.opencontainers.image.title": f"openenv-{env.name}",
        "org.opencontainers.image.version": env.version,
        "org.opencontainers.image.description": env.description,
        "org.opencontainers.image.base.name": base_image,
        "openenv.env.name": env.name,
        "openenv.env.version": env.version,
        "openenv.protocol.version": PROTOCOL_VERSION,
        "openenv.factory": env.factory,
        "openenv.grpc.port": str(GRPC_PORT),
    }


def build_image(env_dir: str | os.PathLike[str], *, tag: str | None = None, base_image: str | None = None,
                offline: bool = False, debootstrap_base: bool = False, no_cache: bool = False,
                openenv_source: str | os.PathLike[str] | None = None, engine: docker.DockerClient | None = None,
                echo: Echo = print) -> BuildResult:
    """Build ``openenv-<name>:<version>`` (or ``tag``) from ENV_DIR's Dockerfile.

    Args:
        env_dir: the environment directory (pyproject.toml with ``[tool.openenv] factory``;
            its ``Dockerfile``, or the packaged template when it has none).
        base_image: the ``BASE_IMAGE`` build argument (default ``python:3.11-slim``; with
            ``debootstrap_base``, the local ``openenv-base:bookworm``).
        offline: build a wheelhouse of every dependency on the host and install from it
            inside the image with no network (the build containers get ``network=none``).
        debootstrap_base: use (and build when missing) the debootstrapped local base image.
        no_cache: ignore Docker's layer cache.
        echo: receives progress lines.
    """
    import docker.errors

    t0 = time.monotonic()
    env = EnvProject.load(env_dir)
    dc = engine or docker_client(timeout=600)
    if debootstrap_base:
        from openenv.baseimage import DEFAULT_BASE_TAG, ensure_base_image

        base_image = base_image or DEFAULT_BASE_TAG
        ensure_base_image(base_image, client=dc, echo=echo)
    base_image = base_image or DEFAULT_BASE_IMAGE
    tag = tag or env.image_tag
    echo(f"building {tag} from {env.path} (base {base_image}{', offline' if offline else ''})")
    target: Target | None = None
    if offline:
        try:
            dc.images.get(base_image)
        except docker.errors.ImageNotFound:
            raise FailedPrecondition(
                f"base image {base_image} is not present locally and an offline build cannot pull it: build a "
                "local base with tools/make_base_image.py (or pass --debootstrap-base), or load one with "
                "`docker load`") from None
        target = probe_base(dc, base_image)
        echo(f"  base python {target.python} ({target.libc} {target.libc_version}, {target.machine})")
    projects = [_openenv_source(openenv_source)]
    if env.path != projects[0]:
        projects.append(env.path)
    wh = build_wheelhouse(projects, target, echo)
    labels = image_labels(env, base_image)
    with tempfile.TemporaryDirectory(prefix="openenv-build-") as tmp:
        ctx = Path(tmp)
        copy_project(env.path, ctx)
        dockerfile = ctx / "Dockerfile"
        if not dockerfile.exists():
            dockerfile.write_text(dockerfile_template())
        for w in wh.local:
            _link_or_copy(w, ctx / "_openenv" / "local" / w.name)
        for w in wh.deps:
            _link_or_copy(w, ctx / "_openenv" / "deps" / w.name)
        (ctx / "_openenv" / "deps").mkdir(parents=True, exist_ok=True)
        (ctx / "_openenv" / "deps" / "requirements.txt").write_text("\n".join(wh.requirements) + "\n")
        buildargs = {
            "BASE_IMAGE": base_image,
            "OPENENV_PIP_ARGS": "--no-index --find-links /tmp/openenv/deps" if offline else "",
            "OPENENV_ENV_NAME": env.name,
            "OPENENV_ENV_VERSION": env.version,
            "OPENENV_PROTOCOL_VERSION": labels["openenv.protocol.version"],
            "OPENENV_FACTORY": env.factory,
        }
        text = dockerfile.read_text()
        # Labels the Dockerfile does not set itself are added by the build (one step each).
        extra = {k: v for k, v in labels.items() if k not in text}
        try:
            image_id = _docker_build(dc, ctx, tag, buildargs, extra, offline=offline, no_cache=no_cache, echo=echo)
        except Internal as e:
            if not offline:
                e.message += ("\nhint: where the engine cannot pull images or containers cannot reach a package "
                              "index, build with --offline (and --debootstrap-base when the base image is not local)")
                e.args = (e.message,)
            raise
    got = dc.images.get(image_id).labels or {}
    wrong = {k: got.get(k) for k in ("openenv.env.name", "openenv.env.version", "openenv.protocol.version",
                                     "openenv.factory") if got.get(k) != labels[k]}
    if wrong:
        raise Internal(f"image {tag} was built but its labels are not those of {env.path}: {wrong} "
                       f"(expected {', '.join(f'{k}={labels[k]}' for k in wrong)}); see docs/images.md")
    seconds = time.monotonic() - t0
    echo(f"built {tag} ({image_id[:19]}) in {seconds:.1f} s")
    return BuildResult(tag, image_id, base_image, offline, seconds, labels)


def _docker_build(dc: docker.DockerClient, ctx: Path, tag: str, buildargs: dict[str, str], labels: dict[str, str],
                  *, offline: bool, no_cache: bool, echo: Echo) -> str:
    import docker.errors

    tail: list[str] = []
    image_id = ""
    try:
        stream = dc.api.build(path=str(ctx), tag=tag, buildargs=buildargs, labels=labels, rm=True, forcerm=True,
                              pull=False, nocache=no_cache, decode=True,
                              network_mode="none" if offline else None)
        for chunk in stream:
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if line.strip():
                        tail = [*tail[-59:], line]
                        echo(f"  {line}")
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise Internal(f"docker build of {tag} failed: {detail.strip()}\n--- last build output ---\n"
                               + "\n".join(tail))
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = aux["ID"]
    except docker.errors.APIError as e:
        raise Internal(f"docker build of {tag} failed: {e.explanation or e}") from None
    if not image_id:
        image_id = str(dc.images.get(tag).id)
    return image_id


# ---------------------------------------------------------------------------------------------- run


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


def _health_serving(target: str, timeout: float) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(resp.status == health_pb2.HealthCheckResponse.SERVING)


class Container:
    """A running environment container started by :func:`start_container`.

    ``url`` is ``grpc://127.0.0.1:<port>``; ``http_url`` (``http://127.0.0.1:<port>``) reaches
    port 8000, the HTTP/WebSocket side. :meth:`stop` (or leaving the ``with`` block)
    sends SIGTERM, waits for the graceful drain, and removes the container.
    """

    def __init__(self, engine: docker.DockerClient, container: Any, *, image: str, session: str,
                 network_none: bool) -> None:
        self.engine, self._c = engine, container
        self.id: str = container.id
        self.name: str = container.name
        self.image, self.session, self.network_none = image, session, network_none
        self.port = 0
        self.url = ""
        self.http_port = 0
        self.http_url = ""  # the HTTP/WebSocket side (port 8000 inside), when the image serves one
        self.exit_code: int | None = None
        self._forwarders: list[Any] = []
        self._final_logs: str | None = None
        self._stopped = False

    def logs(self, tail: int | None = None) -> str:
        """The container's stdout and stderr so far (also after :meth:`stop`)."""
        if self._final_logs is not None:
            text = self._final_logs
        else:
            import docker.errors

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
        import docker.errors

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


def start_container(image: str, network_none: bool = False, ready_timeout: float = 60.0,
                    env: Mapping[str, str] | None = None, memory: str | None = "1g", pids_limit: int | None = 512,
                    *, read_only: bool = True, tmpfs_size: str = "256m", cpus: float | None = None,
                    labels: Mapping[str, str] | None = None, name: str | None = None,
                    command: list[str] | None = None, engine: docker.DockerClient | None = None) -> Container:
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

    Raises:
        NotFound: no such local image. Unavailable: no engine, or the container exited before
        it was ready. DeadlineExceeded: not SERVING within ``ready_timeout``. In both latter
        cases the container is removed and the message ends with its logs.
    """
    import docker.errors

    dc = engine or docker_client()
    try:
        img = dc.images.get(image)
    except docker.errors.ImageNotFound:
        raise NotFound(f"image {image!r} is not present locally; build it with `openenv build ENV_DIR`") from None
    env_name = (img.labels or {}).get("openenv.env.name") or image
    session = uuid.uuid4().hex[:12]
    all_labels = {**(labels or {}), MANAGED_LABEL: "true", "openenv.env": env_name, "openenv.session": session,
                  "openenv.owner": _owner_token(), "openenv.image": image}
    kwargs: dict[str, Any] = {
        "detach": True,
        "name": name or f"openenv-{_slug(env_name)}-{session}",
        "labels": all_labels,
        "environment": dict(env or {}),
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
    }
    if command is not None:
        kwargs["command"] = command
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
        raw = dc.containers.create(image, **kwargs)
    except docker.errors.APIError as e:
        raise Unavailable(f"cannot create a container of {image}: {e.explanation or e}") from None
    c = Container(dc, raw, image=image, session=session, network_none=network_none)
    try:
        raw.start()
        raw.reload()
        _check_running(c, raw)
        if network_none:
            from openenv.netns import NetnsForwarder

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
    if state["Status"] in ("exited", "dead"):
        oom = " (killed: out of memory)" if state.get("OOMKilled") else ""
        raise Unavailable(f"container {c.name} of {c.image} exited with code {state['ExitCode']}{oom} "
                          "before it was ready")


def _wait_ready(c: Container, raw: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    target = f"127.0.0.1:{c.port}"
    while True:
        raw.reload()
        _check_running(c, raw)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"container {c.name} of {c.image} was not SERVING on gRPC health "
                                   f"within {timeout:g} s")
        if _health_serving(target, timeout=max(0.1, min(2.0, remaining))):
            return
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


# ---------------------------------------------------------------------------------------------- client


C = TypeVar("C", bound="EnvClient")
_CONTAINER_KWARGS = {"network_none", "ready_timeout", "env", "memory", "pids_limit", "read_only", "tmpfs_size",
                     "cpus", "labels", "name", "command", "engine"}


@functools.cache
def _owning(cls: type[C]) -> type[C]:
    """A subclass of ``cls`` whose close() also stops and removes its container."""

    class Owning(cls):  # type: ignore[valid-type,misc]
        container: Container

        async def close(self) -> None:
            try:
                await super().close()
            finally:
                await asyncio.to_thread(self.container.stop)

    Owning.__name__, Owning.__qualname__ = cls.__name__, cls.__qualname__
    Owning.__doc__ = cls.__doc__
    return Owning


def client_from_image(cls: type[C], image: str, **kwargs: Any) -> C:
    """Start IMAGE (:func:`start_container` keywords) and return an unconnected ``cls`` client of it.

    The client owns the container: closing the client stops and removes it (and so does
    garbage collection or interpreter exit, should the client never be closed). The other
    keywords go to ``cls``.
    """
    ckw = {k: kwargs.pop(k) for k in list(kwargs) if k in _CONTAINER_KWARGS}
    container = start_container(image, **ckw)
    try:
        client = _owning(cls)(container.url, **kwargs)
    except BaseException:
        container.stop()
        raise
    client.container = container
    weakref.finalize(client, container.stop)
    return client


# ---------------------------------------------------------------------------------------------- ps / cleanup


@dataclass(frozen=True)
class ManagedContainer:
    """A container carrying ``openenv.managed=true``."""

    id: str
    name: str
    image: str
    env: str
    session: str
    status: str
    url: str
    owner: str
    owner_alive: bool | None  # None: started from another host

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def list_containers(engine: docker.DockerClient | None = None) -> list[ManagedContainer]:
    """Every container carrying ``openenv.managed=true``, running or not."""
    dc = engine or docker_client()
    out = []
    for c in dc.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=true"}):
        labels = c.labels or {}
        bindings = ((c.attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{GRPC_PORT}/tcp") or []
        url = f"grpc://{bindings[0]['HostIp']}:{bindings[0]['HostPort']}" if bindings else ""
        owner = labels.get("openenv.owner", "")
        out.append(ManagedContainer(c.id, c.name, labels.get("openenv.image", ""), labels.get("openenv.env", ""),
                                    labels.get("openenv.session", ""), c.status, url, owner, owner_alive(owner)))
    return sorted(out, key=lambda m: m.name)


def cleanup(all_containers: bool = False, *, dry_run: bool = False, engine: docker.DockerClient | None = None,
            echo: Echo = print) -> list[ManagedContainer]:
    """Remove leftover managed containers: those whose owner process is gone (or all of them).

    Returns what was (or, with ``dry_run``, would be) removed.
    """
    import docker.errors

    dc = engine or docker_client()
    removed = []
    for m in list_containers(dc):
        if not (all_containers or m.owner_alive is False):
            continue
        removed.append(m)
        echo(f"{'would remove' if dry_run else 'removing'} {m.name} ({m.env}, {m.status})")
        if dry_run:
            continue
        try:
            c = dc.containers.get(m.id)
            if c.status == "running":
                c.stop(timeout=5)
            c.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
    return removed


# ---------------------------------------------------------------------------------------------- commands


def _fail(e: EnvError) -> click.ClickException:
    return click.ClickException(str(e))


@click.command("build")
@click.argument("env_dir", type=click.Path(exists=True, file_okay=False), default=".")
@click.option("-t", "--tag", default=None, help="Image tag (default openenv-<name>:<version>).")
@click.option("--base-image", default=None, show_default=DEFAULT_BASE_IMAGE,
              help="The BASE_IMAGE build argument (an image with python3 and venv).")
@click.option("--offline", is_flag=True,
              help="Install every dependency from a wheelhouse built on this host; no network in the build.")
@click.option("--debootstrap-base", is_flag=True,
              help="Use the local debootstrapped base (openenv-base:bookworm), building it if missing (root).")
@click.option("--no-cache", is_flag=True, help="Do not use Docker's layer cache.")
@click.option("--openenv-source", type=click.Path(exists=True, file_okay=False), default=None,
              help="Source tree of the openenv package to install (default: the running one's).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the resulting tag.")
def build_command(env_dir: str, tag: str | None, base_image: str | None, offline: bool, debootstrap_base: bool,
                  no_cache: bool, openenv_source: str | None, quiet: bool) -> None:
    """Build the Docker image of the environment in ENV_DIR (openenv-<name>:<version>)."""
    echo: Echo = _quiet if quiet else functools.partial(click.echo, err=True)
    try:
        result = build_image(env_dir, tag=tag, base_image=base_image, offline=offline,
                             debootstrap_base=debootstrap_base, no_cache=no_cache, openenv_source=openenv_source,
                             echo=echo)
    except EnvError as e:
        raise _fail(e) from None
    click.echo(result.tag)


@click.command("ps")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ps_command(as_json: bool) -> None:
    """List the containers started by openenv (label openenv.managed=true)."""
    try:
        rows = list_containers()
    except EnvError as e:
        raise _fail(e) from None
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in rows], indent=2))
        return
    if not rows:
        click.echo("no openenv containers")
        return
    alive = {True: "alive", False: "gone", None: "elsewhere"}
    table = [("NAME", "ENV", "IMAGE", "STATUS", "URL", "OWNER")]
    table += [(r.name, r.env, r.image, r.status, r.url or "-", alive[r.owner_alive]) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@click.command("cleanup")
@click.option("--all", "all_containers", is_flag=True, help="Remove every openenv container, not only leftovers.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def cleanup_command(all_containers: bool, dry_run: bool) -> None:
    """Remove openenv containers whose owner process is gone (after a crash), or --all."""
    try:
        removed = cleanup(all_containers, dry_run=dry_run, echo=click.echo)
    except EnvError as e:
        raise _fail(e) from None
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(removed)} container(s)")
