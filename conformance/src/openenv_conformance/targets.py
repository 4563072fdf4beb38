"""Targets: what gets certified, and how it is reached.

A target spec is ``SCHEME:REST``. Kinds are pluggable: :func:`register_target_kind` maps a
scheme to a factory returning a :class:`Target`, whose ``url`` the suite talks to (only over
the wire): ``grpc://host:port`` (the gRPC service) or ``http://host:port`` (OpenEnv's JSON
protocol over HTTP/WebSocket). ``urls`` holds every transport the target serves, by kind
(``grpc``, ``http``): the parity check compares them. Built-in kinds:

* ``grpc://host:port``: a server that is already running; nothing is started or stopped.
* ``http(s)://host:port``, ``ws(s)://host:port``: the HTTP side of a running server (an
  ``openenv serve``, ``openenv bridge``, or any OpenEnv server), left running.
* ``python:module:Factory``: ``openenv serve module:Factory`` in a subprocess, gRPC and HTTP
  on free loopback ports; stopped (SIGTERM, then SIGKILL) afterwards. Its output is the
  target's logs.
* ``docker:IMAGE``: a container started with ``openenv.deploy.run.start_container``; its logs
  are attached to the report of a failing certification.

``TargetOptions.transport`` picks the transport of a target that serves both (default
``grpc``); ``TargetOptions.parity_with`` names the other side of a target that serves one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from openenv.client.urls import BINARY_PATH, parse_url, split_url
from openenv_conformance.digest import content_digest
from openenv_conformance.errors import TargetUnusable
from openenv_conformance.transport import transport_kind

__all__ = [
    "IMAGE_PYTHON",
    "PROBES_MODULE",
    "DockerTarget",
    "HttpTarget",
    "ProbesUnreadable",
    "ProcessTarget",
    "PythonTarget",
    "RunningTarget",
    "Target",
    "TargetOptions",
    "open_target",
    "register_target_kind",
    "target_kinds",
]


#: The module printing an environment's grading probes (RFC 0015) as JSON.
PROBES_MODULE = "openenv.runtime.grading_probes"
#: The interpreter of an image built from the template (docs/images.md: the virtualenv
#: ``/opt/openenv``), which runs :data:`PROBES_MODULE` in a ``docker:`` target's image.
IMAGE_PYTHON = "/opt/openenv/bin/python"


class ProbesUnreadable(Exception):
    """The environment's grading probes could not be read; the message says why."""


def _probes_document(stdout: bytes | str, stderr: bytes | str, status: int, where: str) -> dict[str, Any]:
    """The document printed by :data:`PROBES_MODULE` (its last line), or ProbesUnreadable."""
    out = stdout.decode("utf-8", "replace") if isinstance(stdout, bytes) else stdout
    err = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    if status != 0:
        raise ProbesUnreadable(f"{where} exited with status {status}: {err.strip()[-500:] or out.strip()[-500:]}")
    lines = [line for line in out.splitlines() if line.strip()]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not isinstance(doc.get("probes"), list):
        raise ProbesUnreadable(f"{where} printed no probes document: {out.strip()[-300:]!r}")
    return doc


@dataclasses.dataclass
class TargetOptions:
    """How targets are started.

    Attributes:
        ready_timeout: seconds to wait for a started target to serve.
        serve_args: extra ``openenv serve`` arguments for ``python:`` targets
            (e.g. ``["--max-sessions", "8"]``).
        cwd: working directory of a started process (default: the current one).
        env: extra environment variables of a started process.
        transport: ``grpc`` or ``http``: which of the target's transports the checks speak
            (None: the target's own, gRPC for ``python:`` and ``docker:`` targets).
        parity_with: the URL of the target's other transport (``http://`` for a gRPC target,
            ``grpc://`` for an HTTP one), for the parity check; targets started by the suite
            know it themselves.
    """

    ready_timeout: float = 60.0
    serve_args: Sequence[str] = ()
    cwd: str | None = None
    env: dict[str, str] | None = None
    transport: str | None = None
    parity_with: str | None = None


class Target:
    """A reachable environment server. Use as a context manager or call :meth:`stop`.

    ``url`` is what the checks talk to; ``urls`` every transport the target serves, by
    kind (``{"grpc": "grpc://...", "http": "http://..."}``).
    """

    url: str = ""
    spec: str = ""
    kind: str = ""
    urls: dict[str, str]
    token: str | None = None  #: a bearer token the target requires (RFC 0003), when the suite knows it

    def transports(self) -> dict[str, str]:
        """``urls``, with ``url`` under its own kind."""
        out = dict(getattr(self, "urls", None) or {})
        if self.url:
            try:
                out.setdefault(transport_kind(self.url), self.url)
            except ValueError:
                pass
        return out

    def use(self, transport: str) -> None:
        """Talk to the target over ``transport`` (``grpc``, ``http`` or ``binary``); TargetUnusable
        when it does not serve it. ``binary`` is the HTTP side's ``/v1/session`` (RFC 0011)."""
        urls = self.transports()
        if transport == "binary" and "binary" not in urls and "http" in urls:
            u = urlsplit(urls["http"])
            scheme = "wss" if u.scheme in ("https", "wss") else "ws"
            path = u.path.rstrip("/")
            path = path[:-3] if path.endswith("/ws") else path
            urls["binary"] = urlunsplit((scheme, u.netloc, path + BINARY_PATH, "", ""))
        if transport not in urls:
            have = ", ".join(sorted(urls)) or "none"
            raise TargetUnusable(f"{self.spec or self.url}: no {transport} transport (it serves: {have})")
        self.url = urls[transport]

    def logs(self) -> str:
        """What the target printed so far ("" when the suite did not start it)."""
        return ""

    def grading_probes(self, timeout: float = 120.0) -> dict[str, Any] | None:
        """The environment's grading probes (RFC 0015): the JSON document of
        ``python -m openenv.runtime.grading_probes FACTORY``, run where the environment is
        installed (``{"environment": ..., "probes": [...]}``). None when the target cannot say
        (a running server: its code is not here); :class:`ProbesUnreadable` (with the reason)
        when the command fails or prints no such document."""
        return None

    def alive(self) -> bool:
        """False once a target the suite started has exited."""
        return True

    def stop(self) -> None:
        """Stop the target if the suite started it. Idempotent."""

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class RunningTarget(Target):
    """``grpc://host:port``: an already running server, left running."""

    kind = "grpc"

    def __init__(self, url: str) -> None:
        try:
            scheme, hostport = parse_url(url)
        except ValueError as e:
            raise TargetUnusable(str(e)) from None
        if scheme != "grpc":
            raise TargetUnusable(f"{url!r}: expected grpc://host:port")
        self.url = f"grpc://{hostport}"
        self.urls = {"grpc": self.url}
        self.spec = url


class HttpTarget(Target):
    """``http(s)://host:port`` or ``ws(s)://host:port``: the HTTP side of a running server
    (OpenEnv's JSON protocol; ``/ws`` is appended to the WebSocket URL), left running."""

    kind = "http"

    def __init__(self, url: str) -> None:
        try:
            split_url(url)
        except ValueError as e:
            raise TargetUnusable(str(e)) from None
        self.url = self.spec = url
        self.urls = {transport_kind(url): url}  # http, or binary for a ws://.../v1/session URL


class ProcessTarget(Target):
    """A server process that writes its address (``grpc://`` or ``http://``) to a ready file.

    ``argv`` is a function of the ready-file path returning the command line; with
    ``http_ready``, of two paths (the second receives the HTTP side's ``http://`` URL, which
    the server writes right after the first). Output (stdout and stderr) goes to a log file,
    read by :meth:`logs`.
    """

    kind = "process"

    def __init__(
        self,
        argv: Callable[..., list[str]],
        *,
        spec: str = "",
        options: TargetOptions | None = None,
        http_ready: bool = False,
        factory: str | None = None,
    ) -> None:
        opts = options or TargetOptions()
        self.spec = spec
        #: ``MODULE:ATTR`` of the environment the process serves, when known: the grading level
        #: reads its probes with it (:meth:`grading_probes`).
        self.factory = factory
        self.urls = {}
        self.proc_returncode: int | None = None  # the exit status, once stopped
        self._lifeline = -1
        self._dir = tempfile.TemporaryDirectory(prefix="openenv-certify-")
        ready = os.path.join(self._dir.name, "ready")
        http_file = os.path.join(self._dir.name, "http-ready")
        self._log_path = os.path.join(self._dir.name, "log")
        env = dict(os.environ)
        env.setdefault("GRPC_VERBOSITY", "ERROR")
        cwd = opts.cwd or os.getcwd()
        env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, env.get("PYTHONPATH", "")) if p)
        env.update(opts.env or {})
        self._cwd, self._env = cwd, dict(env)  # what the probes command runs with, as the server
        self._log = open(self._log_path, "wb")
        self.argv = argv(ready, http_file) if http_ready else argv(ready)
        # The server's lifeline (openenv.host.PARENT_FD_ENV): it holds the read end and shuts
        # down when this process is gone, even by SIGKILL. The write end is not inheritable,
        # so no other child keeps it open.
        lifeline, self._lifeline = os.pipe()
        env["OPENENV_PARENT_FD"] = str(lifeline)
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                pass_fds=(lifeline,),
            )
        except OSError as e:
            self._cleanup()
            raise TargetUnusable(f"cannot start {self.argv[0]}: {e}") from None
        finally:
            os.close(lifeline)
        deadline = time.monotonic() + opts.ready_timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                logs = self.logs()
                self.stop()
                raise TargetUnusable(
                    f"{spec or self.argv}: the server exited with status {self.proc_returncode} before serving",
                    logs=logs,
                )
            if time.monotonic() > deadline:
                logs = self.logs()
                self.stop()
                raise TargetUnusable(f"{spec or self.argv}: not serving after {opts.ready_timeout:g} s", logs=logs)
            time.sleep(0.05)
        with open(ready) as f:
            self.url = f.read().strip()
        try:
            self.urls[transport_kind(self.url)] = self.url
        except ValueError:
            pass  # the run reports the address as unusable
        if http_ready:  # written by the same callback, right after the gRPC address
            deadline = time.monotonic() + 5.0
            while not os.path.exists(http_file) and time.monotonic() < deadline and self.proc.poll() is None:
                time.sleep(0.02)
            if os.path.exists(http_file):
                with open(http_file) as f:
                    self.urls["http"] = f.read().strip()

    def logs(self) -> str:
        try:
            with open(self._log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs (None once stopped)."""
        return self.proc.pid if self.proc is not None else None

    def grading_probes(self, timeout: float = 120.0) -> dict[str, Any] | None:
        """``python -m openenv.runtime.grading_probes FACTORY`` with the server's interpreter,
        directory and environment: the environment's class imported, its ``grading_probes()``
        called (in a process of its own, so the certifier imports no environment code). None
        when the factory is not known."""
        if not self.factory:
            return None
        argv = [sys.executable, "-m", PROBES_MODULE, self.factory]
        try:
            r = subprocess.run(argv, cwd=self._cwd, env=self._env, capture_output=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ProbesUnreadable(f"{' '.join(argv[1:])}: {type(e).__name__}: {e}") from None
        return _probes_document(r.stdout, r.stderr, r.returncode, " ".join(argv[1:]))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            self.proc_returncode = proc.returncode
        self._cleanup()

    def _cleanup(self) -> None:
        if not self._log.closed:
            self._log.close()
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1


class PythonTarget(ProcessTarget):
    """``python:module:Factory``: ``openenv serve module:Factory --port 0`` in a subprocess."""

    kind = "python"

    def __init__(self, factory: str, options: TargetOptions | None = None) -> None:
        opts = options or TargetOptions()
        if ":" not in factory:
            raise TargetUnusable(f"python target {factory!r} is not of the form module:Factory")

        http = "--no-http" not in opts.serve_args and not any(a.startswith("--http-port") for a in opts.serve_args)

        def argv(ready: str, http_ready: str = "") -> list[str]:
            extra = ["--http-port", "0", "--http-ready-file", http_ready] if http else []
            return [
                sys.executable,
                "-m",
                "openenv.cli",
                "serve",
                factory,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--ready-file",
                ready,
                *extra,
                *opts.serve_args,
            ]

        super().__init__(argv, spec=f"python:{factory}", options=opts, http_ready=http, factory=factory)


class DockerTarget(Target):
    """``docker:IMAGE``: a container started with ``openenv.deploy.run.start_container``."""

    kind = "docker"

    def __init__(self, image: str, options: TargetOptions | None = None) -> None:
        opts = options or TargetOptions()
        self.spec = f"docker:{image}"
        try:
            from openenv.deploy.run import start_container
        except ImportError as e:
            raise TargetUnusable(
                f"docker targets need openenv.deploy (start_container), which is not "
                f"available in this installation: {e}"
            ) from None
        # The image is resolved to its content-addressed id first and the container started from
        # that id: the digest a certificate records is the image that ran, even if the tag moves.
        self.image_digest = self.image_id = ""
        #: The image's labels (``openenv.factory`` names what it serves: the sandbox level
        #: looks for that package from inside the image's sandboxes).
        self.labels: dict[str, str] = {}
        try:
            import docker

            resolved = docker.from_env().images.get(image)
            self.image_id, self.image_digest = str(resolved.id), content_digest(resolved.attrs)
            self.labels = dict(resolved.labels or {})
        except Exception as e:  # noqa: BLE001 - whatever the engine says, the target is unusable
            raise TargetUnusable(f"cannot resolve image {image!r}: {type(e).__name__}: {e}") from None
        try:
            self._container: Any = start_container(self.image_id, network_none=False, ready_timeout=opts.ready_timeout)
        except Exception as e:  # noqa: BLE001 - whatever the engine says, the target is unusable
            raise TargetUnusable(
                f"cannot start container {image!r}: {type(e).__name__}: {e}", logs=str(getattr(e, "logs", "") or "")
            ) from None
        self.url = self._container.url
        self.token = getattr(self._container, "token", None)  # generated by start_container (RFC 0003)
        self.urls = {"grpc": self.url}
        if getattr(self._container, "http_url", ""):
            self.urls["http"] = self._container.http_url
        self._last_logs = ""

    def grading_probes(self, timeout: float = 120.0) -> dict[str, Any] | None:
        """``python -m openenv.runtime.grading_probes FACTORY`` in a container of the image of
        its own (the factory is the image's ``openenv.factory`` label; the image's interpreter
        :data:`IMAGE_PYTHON`), without network, read-only, every capability dropped; removed
        after. None when the image has no ``openenv.factory`` label."""
        factory = self.labels.get("openenv.factory")
        if not factory:
            return None
        where = f"{PROBES_MODULE} {factory} in {self.image_id[:19] or self.spec}"
        try:
            import docker

            engine = docker.from_env()
            c = engine.containers.run(
                self.image_id,
                ["-m", PROBES_MODULE, factory],
                entrypoint=IMAGE_PYTHON,
                detach=True,
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": "size=64m"},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit="1g",
                environment={"PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"},
            )
        except Exception as e:  # noqa: BLE001 - whatever the engine says, the probes are unreadable
            raise ProbesUnreadable(f"{where}: {type(e).__name__}: {e}") from None
        try:
            status = int(c.wait(timeout=timeout).get("StatusCode", -1))
            out, err = c.logs(stdout=True, stderr=False), c.logs(stdout=False, stderr=True)
        except Exception as e:  # noqa: BLE001 - a timeout or the engine's error
            raise ProbesUnreadable(f"{where}: {type(e).__name__}: {e}") from None
        finally:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - removal is best effort (auto-removed engines)
                pass
        return _probes_document(out, err, status, where)

    def logs(self) -> str:
        if self._container is None:
            return self._last_logs
        try:
            return self._container.logs()
        except Exception as e:  # noqa: BLE001 - logs are best effort
            return f"<logs unavailable: {type(e).__name__}: {e}>"

    def stop(self) -> None:
        c, self._container = self._container, None
        if c is not None:
            try:
                self._last_logs = c.logs()
            except Exception:  # noqa: BLE001 - logs are best effort
                self._last_logs = ""
            c.stop()


_KINDS: dict[str, Callable[[str, TargetOptions], Target]] = {}


def register_target_kind(scheme: str, factory: Callable[[str, TargetOptions], Target]) -> None:
    """Make ``SCHEME:REST`` targets open with ``factory(REST, options)``."""
    _KINDS[scheme] = factory


def target_kinds() -> list[str]:
    """The registered schemes."""
    return sorted(_KINDS)


def _http_target(scheme: str) -> Callable[[str, TargetOptions], Target]:
    def make(rest: str, opts: TargetOptions) -> Target:
        return HttpTarget(f"{scheme}://{rest}")

    return make


register_target_kind("grpc", lambda rest, opts: RunningTarget(f"grpc://{rest}"))
for _scheme in ("http", "https", "ws", "wss"):
    register_target_kind(_scheme, _http_target(_scheme))
register_target_kind("python", lambda rest, opts: PythonTarget(rest, opts))
register_target_kind("docker", lambda rest, opts: DockerTarget(rest, opts))


def open_target(spec: str, options: TargetOptions | None = None) -> Target:
    """Open (start, when needed) the target ``spec``; raises :class:`TargetUnusable`."""
    scheme, sep, rest = spec.partition(":")
    if not sep or scheme not in _KINDS:
        raise TargetUnusable(
            f"unknown target {spec!r}: expected one of " + ", ".join(f"{k}:..." for k in target_kinds())
        )
    rest = rest[2:] if rest.startswith("//") else rest
    if not rest:
        raise TargetUnusable(f"target {spec!r} is missing its address")
    opts = options or TargetOptions()
    t = _KINDS[scheme](rest, opts)
    t.spec = t.spec or spec
    if opts.transport:
        try:
            t.use(opts.transport)
        except TargetUnusable:
            t.stop()
            raise
    return t
