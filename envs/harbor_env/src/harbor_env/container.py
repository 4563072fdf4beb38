"""Harbor tasks as Harbor runs them: each task in a container built from its own
``environment/Dockerfile`` (docs/harbor.md, "Container mode").

The pieces, all on the local Docker engine, none of them needing the internet:

* **The harbor base image** (:data:`BASE_TAG`, :func:`ensure_base_image`): the project's Debian
  base (``openenv-base:bookworm``, debootstrapped offline by ``tools/make_base_image.py``) plus
  curl, git, procps, pytest, uv and uvx (from the ``uv`` wheel of the package index) and the
  certificate of a local CA (:func:`ensure_ca`). A task's ``FROM`` that names an image this
  engine does not hold (``ubuntu:24.04``, ``python:3.13-slim``...: no registry can be reached)
  resolves to it; one the engine holds is used as it is.
* **harbor-packages** (:mod:`harbor_env.package_proxy`, :func:`ensure_packages`): one container
  on the internal network :data:`NETWORK` (no route out) and on the default bridge. Task
  containers and builds reach the package registries this machine reaches through it, and
  nothing else: Debian packages (``http_proxy``), a Python package index (``PIP_INDEX_URL``,
  ``UV_INDEX_URL``), and uv's installer, so that Harbor's verifier preamble (``apt-get install
  curl``, ``curl ... install.sh | sh``, ``uvx ... pytest``) runs unchanged.
* **A task image** per task (:func:`ensure_task_image`): ``docker build`` of a staged copy of
  ``environment/`` (the task's files are never changed; only the staged Dockerfile's ``FROM``
  is resolved as above), tagged by the hash of what went into it, so it is built once.
  ``[environment] docker_image`` is used instead when this engine holds it (else the task is
  refused, naming it).
* **A container per episode** (:class:`ContainerBox`): the agent's commands run inside it
  (``docker exec``), with the task's ``cpus`` and ``memory_mb``; ``allow_internet = false``
  gives it no network at all.

Grading (RFC 0015), :meth:`ContainerBox.verify`: the agent's container is committed and
removed (every process of the agent's ends with it); the tests run in a new container of that
image, after ``/tests`` and ``/logs`` are replaced from the host (``docker cp``; the tests were
never in any container before), as ``bash /tests/test.sh``. The verdict is built on the host
from what the engine reports: ``test.sh``'s exit status (``docker exec``'s), whether it ran out
of ``[verifier] timeout_sec``, whether any process it started outlived it, and the reward files
copied out of the stopped container (regular files only). A task whose agent changed the
programs the verifier runs on (bash, sh, the dynamic loader, libc, ``/etc/ld.so.preload``...)
gets 0, naming them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harbor_env.compose import start_order
from harbor_env.engine import docker as _docker
from harbor_env.engine import docker_available, image_id
from harbor_env.sandbox import MAX_REWARD_FILE, Verdict, judge
from harbor_env.task import HarborTask, TaskError

__all__ = [
    "BASE_TAG",
    "NETWORK",
    "ContainerBox",
    "ContainerRun",
    "docker_available",
    "ensure_base_image",
    "ensure_packages",
    "ensure_task_image",
]

BASE_TAG = "openenv-harbor-base:bookworm"
#: The project's debootstrapped Debian (tools/make_base_image.py): what the harbor base starts from.
DEBIAN_BASE = "openenv-base:bookworm"
NETWORK = "openenv-harbor"
PROXY_NAME = "openenv-harbor-packages"
PROXY_URL = "http://harbor-packages"
#: uv's installer's host, as Harbor's verifier preamble names it (served by harbor-packages).
UV_INSTALLER_HOST = "astral.sh"
#: Debian packages the harbor base adds to openenv-base:bookworm.
BASE_PACKAGES = ("curl", "git", "procps", "python3-pytest", "python3-pip", "ca-certificates", "xz-utils")
UV_VERSION = "0.9.7"
OUTPUT_MAX = 64 * 1024
LABEL = "openenv.harbor"
#: Programs and files the verifier's ``bash /tests/test.sh`` runs on: an agent that changed one
#: could forge the verdict, so the task scores 0 (see the module's text).
VERIFIER_CHAIN = re.compile(
    r"^/(?:usr/)?(?:bin|sbin)/(?:bash|sh|dash|env|timeout|cat|echo|test|\[|tee|python3(?:\.\d+)?|rm|mkdir|sleep)$"
    r"|^/(?:usr/)?lib(?:64|32|x32)?/(?:x86_64-linux-gnu/)?(?:ld-linux[^/]*|libc\.so[^/]*|libtinfo[^/]*|libdl[^/]*)$"
    r"|^/etc/ld\.so\.(?:preload|conf|cache)$|^/etc/ld\.so\.conf\.d(?:/.*)?$"
    r"|^/etc/(?:bash\.bashrc|profile|environment)$|^/etc/profile\.d(?:/.*)?$"
)

BASE_DOCKERFILE = """\
# The harbor base image (docs/harbor.md): what a task's FROM resolves to when this engine does not
# hold the image it names. Built by harbor_env.container.ensure_base_image (tools/make_harbor_base.py).
FROM {debian}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends {packages} >/dev/null \\
 && rm -rf /var/lib/apt/lists/*
COPY uv uvx /usr/local/bin/
COPY openenv-harbor-ca.crt /usr/local/share/ca-certificates/openenv-harbor-ca.crt
RUN update-ca-certificates >/dev/null && ln -sf /usr/bin/python3 /usr/local/bin/python && uv --version
ENV LANG=C.UTF-8
WORKDIR /app
"""

_lock = threading.Lock()


def cache_dir() -> Path:
    """Where the CA, the staged builds and harbor-packages' cache live
    (``$OPENENV_HARBOR_CACHE``, default ``~/.cache/openenv/harbor``)."""
    d = Path(os.environ.get("OPENENV_HARBOR_CACHE") or Path.home() / ".cache" / "openenv" / "harbor")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _label(ref: str, key: str) -> str | None:
    r = _docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{key}"}}}}', ref, check=False, timeout=60)
    return r.stdout.decode().strip() if r.returncode == 0 else None


# -- the local CA, the base image


def ensure_ca() -> dict[str, Path]:
    """A local CA and a certificate of it for uv's installer host (made once, with openssl)."""
    d = cache_dir() / "ca"
    d.mkdir(exist_ok=True)
    out = {"ca": d / "ca.crt", "cert": d / "installer.crt", "key": d / "installer.key"}
    if all(p.exists() for p in out.values()):
        return out
    ossl = shutil.which("openssl")
    if ossl is None:
        raise RuntimeError("the harbor base image needs openssl to make its local CA")

    def run(*a: str) -> None:
        subprocess.run([ossl, *a], check=True, capture_output=True, timeout=120)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
        "-days", "3650", "-subj", "/CN=openenv harbor-packages local CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "installer.key"), "-out", str(d / "installer.csr"),
        "-subj", f"/CN={UV_INSTALLER_HOST}")  # fmt: skip
    ext = d / "ext.cnf"
    ext.write_text(f"subjectAltName=DNS:{UV_INSTALLER_HOST}\n")
    run("x509", "-req", "-in", str(d / "installer.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-out", str(d / "installer.crt"), "-days", "3650", "-extfile", str(ext))  # fmt: skip
    for p in (d / "ca.key", d / "installer.key"):
        p.chmod(0o600)
    return out


def _uv_binaries(dest: Path) -> None:
    """uv and uvx of the ``uv`` wheel :data:`UV_VERSION`, from the package index this machine's pip uses."""
    import zipfile

    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    found = sorted(wheels.glob(f"uv-{UV_VERSION}-*manylinux*x86_64*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--platform",
               "manylinux_2_17_x86_64", f"uv=={UV_VERSION}", "-d", str(wheels)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        if r.returncode != 0 and shutil.which("pip3"):
            cmd[:3] = ["pip3"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        found = sorted(wheels.glob(f"uv-{UV_VERSION}-*manylinux*x86_64*.whl"))
        if not found:
            raise RuntimeError(f"could not download the uv {UV_VERSION} wheel with pip: {r.stderr[-800:]}")
    with zipfile.ZipFile(found[0]) as z:
        for n in z.namelist():
            base = n.rsplit("/", 1)[-1]
            if ".data/scripts/" in n and base in ("uv", "uvx"):
                (dest / base).write_bytes(z.read(n))
                (dest / base).chmod(0o755)


def ensure_base_image(tag: str = BASE_TAG, *, force: bool = False, echo: Any = None) -> str:
    """Build the harbor base image unless this engine holds it, built from the same inputs (a
    content hash in its label ``openenv.harbor.inputs``). Returns its tag."""
    with _lock:
        ca = ensure_ca()
        dockerfile = BASE_DOCKERFILE.format(debian=DEBIAN_BASE, packages=" ".join(BASE_PACKAGES))
        if image_id(DEBIAN_BASE) is None:
            raise RuntimeError(
                f"the harbor base image starts from {DEBIAN_BASE}, which this engine does not hold: "
                "build it with `python tools/make_base_image.py` (docs/images.md)"
            )
        digest = hashlib.sha256(
            (dockerfile + UV_VERSION + (image_id(DEBIAN_BASE) or "") + ca["ca"].read_text()).encode()
        ).hexdigest()[:16]
        if not force and _label(tag, f"{LABEL}.inputs") == digest:
            return tag
        if echo:
            echo(f"building {tag} (inputs {digest})")
        with tempfile.TemporaryDirectory(prefix="openenv-harbor-base-") as tmp:
            ctx = Path(tmp)
            _uv_binaries(ctx)
            shutil.copy(ca["ca"], ctx / "openenv-harbor-ca.crt")
            (ctx / "Dockerfile").write_text(dockerfile)
            _docker("build", "-q", "--label", f"{LABEL}.inputs={digest}", "-t", tag, str(ctx), timeout=1800)
        return tag


# -- harbor-packages


def _pip_index() -> str:
    for var in ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        if os.environ.get(var, "").startswith("http"):
            return os.environ[var]
    r = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                       text=True, timeout=60, check=False)  # fmt: skip
    if r.returncode == 0 and r.stdout.strip().startswith("http"):
        return r.stdout.strip()
    try:  # pip's own default, as `pip install` would use it
        from pip._internal.models.index import PyPI  # type: ignore[import-not-found, unused-ignore]

        return str(PyPI.simple_url)
    except ImportError:
        pass
    probe = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    for py in ("python3", "python"):
        if shutil.which(py):
            r = subprocess.run([py, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip()
    raise RuntimeError("no Python package index: set PIP_INDEX_URL (harbor-packages serves the index pip uses)")


def _apt_hosts() -> list[str]:
    from urllib.parse import urlsplit

    from openenv.deploy.baseimage import apt_sources

    hosts = {urlsplit(s.uri).hostname or "" for s in apt_sources()}
    return sorted(h for h in hosts if h)


def _cafile() -> str:
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return os.environ[var]
    return "/etc/ssl/certs/ca-certificates.crt"


def proxy_env() -> dict[str, str]:
    """What every task container gets so that pip and uv use harbor-packages' index (no proxy
    variable: the task's own HTTP clients reach its own services directly)."""
    return {
        "PIP_INDEX_URL": f"{PROXY_URL}/simple", "PIP_TRUSTED_HOST": "harbor-packages",
        "UV_INDEX_URL": f"{PROXY_URL}/simple", "UV_DEFAULT_INDEX": f"{PROXY_URL}/simple",
        "UV_PYTHON_DOWNLOADS": "never",
    }  # fmt: skip


_hosts: list[str] = []


def add_hosts(network: str = NETWORK) -> list[str]:
    """``--add-host`` arguments resolving harbor-packages, the apt mirrors and uv's installer to
    harbor-packages' address on ``network`` (after :func:`ensure_packages`)."""
    r = _docker("inspect", "--format", f"{{{{(index .NetworkSettings.Networks \"{network}\").IPAddress}}}}", PROXY_NAME,
                timeout=60)  # fmt: skip
    ip = r.stdout.decode().strip()
    if not ip or ip == "<no value>":
        raise RuntimeError(f"{PROXY_NAME} is not on the network {network}")
    out = []
    for h in ["harbor-packages", UV_INSTALLER_HOST, *_apt_hosts()]:
        out += ["--add-host", f"{h}:{ip}"]
    return out


def ensure_packages() -> None:
    """The internal network and harbor-packages on it (started once, shared by every process
    on this engine; restarted when its code or its upstreams change)."""
    with _lock:
        nets = _docker("network", "ls", "--format", "{{.Name}}", timeout=60).stdout.decode().split()
        if NETWORK not in nets:
            r = _docker("network", "create", "--internal", "--label", LABEL, NETWORK, check=False, timeout=60)
            if r.returncode != 0 and b"already exists" not in r.stderr:
                raise RuntimeError(f"could not create the network {NETWORK}: {r.stderr.decode()[-500:]}")
        script = Path(__file__).with_name("package_proxy.py")
        ca = ensure_ca()
        args = ["--index", _pip_index(), "--cafile", "/etc/host-ca.crt", "--cert", "/ca/installer.crt",
                "--key", "/ca/installer.key", "--tls-host", UV_INSTALLER_HOST]  # fmt: skip
        for h in _apt_hosts():
            args += ["--apt-host", h]
        digest = hashlib.sha256((script.read_text() + json.dumps(args) + _cafile()).encode()).hexdigest()[:16]
        r = _docker("inspect", "--format", f'{{{{.State.Running}}}} {{{{index .Config.Labels "{LABEL}.inputs"}}}}',
                    PROXY_NAME, check=False, timeout=60)  # fmt: skip
        state = r.stdout.decode().split()
        if r.returncode == 0 and state == ["true", digest]:
            return
        if r.returncode == 0:
            _docker("rm", "-f", PROXY_NAME, check=False, timeout=120)
        base = ensure_base_image_unlocked()
        cache = cache_dir() / "packages"
        cache.mkdir(exist_ok=True)
        run = ["run", "-d", "--name", PROXY_NAME, "--label", f"{LABEL}.inputs={digest}", "--restart", "unless-stopped",
               "-v", f"{script}:/srv/package_proxy.py:ro", "-v", f"{cache}:/cache",
               "-v", f"{ca['cert']}:/ca/installer.crt:ro", "-v", f"{ca['key']}:/ca/installer.key:ro",
               "-v", f"{_cafile()}:/etc/host-ca.crt:ro", "--memory", "1g", "--pids-limit", "256",
               base, "python3", "/srv/package_proxy.py", *args]  # fmt: skip
        r = _docker(*run, check=False, timeout=120)
        if r.returncode != 0 and b"Conflict" not in r.stderr:
            raise RuntimeError(f"could not start {PROXY_NAME}: {r.stderr.decode()[-800:]}")
        _docker("network", "connect", "--alias", "harbor-packages", NETWORK, PROXY_NAME, check=False, timeout=60)
        probe = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:3128/health', timeout=3)"
        for _ in range(120):
            if _docker("exec", PROXY_NAME, "python3", "-c", probe, check=False, timeout=30).returncode == 0:
                return
            time.sleep(0.5)
        logs = _docker("logs", "--tail", "20", PROXY_NAME, check=False).stderr.decode()
        raise RuntimeError(f"{PROXY_NAME} did not come up: {logs[-800:]}")


def ensure_base_image_unlocked() -> str:
    """:func:`ensure_base_image` for callers that hold the module's lock."""
    if _label(BASE_TAG, f"{LABEL}.inputs"):
        return BASE_TAG
    _lock.release()
    try:
        return ensure_base_image()
    finally:
        _lock.acquire()


# -- task images

_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.I | re.M)
_COPY_FROM = re.compile(r"^(\s*COPY\s+(?:--\S+\s+)*?--from=)(\S+)", re.I | re.M)
#: uv's published image (``COPY --from=ghcr.io/astral-sh/uv:latest /uv /uvx /bin/``): a local
#: image with the same two files, from the ``uv`` wheel of the package index (:func:`ensure_uv_image`).
UV_IMAGE = re.compile(r"^ghcr\.io/astral-sh/uv(?::[^@]*)?(?:@\S+)?$")
UV_TAG = f"openenv-harbor-uv:{UV_VERSION}"


def ensure_uv_image() -> str:
    """:data:`UV_TAG`: ``/uv`` and ``/uvx`` (uv :data:`UV_VERSION`) in an image of their own, what
    a ``COPY --from`` of uv's published image is resolved to."""
    if image_id(UV_TAG) is not None:
        return UV_TAG
    with tempfile.TemporaryDirectory(prefix="openenv-harbor-uv-") as tmp:
        ctx = Path(tmp)
        _uv_binaries(ctx)
        (ctx / "Dockerfile").write_text("FROM scratch\nCOPY uv uvx /\n")
        _docker("build", "-q", "--label", LABEL, "-t", UV_TAG, str(ctx), timeout=600)
    return UV_TAG


def resolve_dockerfile(text: str) -> tuple[str, list[str]]:
    """The Dockerfile with every ``FROM`` of an image this engine does not hold (and not an
    earlier stage) resolved to the harbor base; and notes saying which."""
    stages: set[str] = set()
    notes: list[str] = []

    def one(m: re.Match[str]) -> str:
        image, rest = m.group(3), m.group(4)
        alias = re.search(r"\bAS\s+(\S+)", rest, re.I)
        out = m.group(0)
        if image.lower() not in stages and "$" not in image and image_id(image) is None:
            notes.append(f"FROM {image}: not on this engine (no registry reachable), built FROM {BASE_TAG}")
            out = f"{m.group(1)}{m.group(2)}{BASE_TAG}{rest}"
            # The build's own `pip install` / `uv pip install` reach the index through harbor-packages.
            out += "\nENV " + " ".join(f"{k}={v}" for k, v in proxy_env().items())
            if re.match(r"^(?:docker\.io/)?(?:library/)?python:", image):
                # The official python images' pip installs system-wide (no PEP 668 marker): so here.
                out += "\nRUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED"
        if alias:
            stages.add(alias.group(1).lower())
        return out

    def copy_from(m: re.Match[str]) -> str:
        src = m.group(2)
        if src.lower() in stages or src.isdigit() or "$" in src or image_id(src) is not None:
            return m.group(0)
        if UV_IMAGE.match(src):
            notes.append(f"COPY --from={src}: uv {UV_VERSION}'s /uv and /uvx from {UV_TAG}")
            return f"{m.group(1)}{ensure_uv_image()}"
        raise TaskError(f"COPY --from={src}: the image is not on this engine and no registry can be reached to pull it")

    out = _FROM.sub(one, text)
    return _COPY_FROM.sub(copy_from, out), notes


def _hash_tree(root: Path, h: Any) -> None:
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        if p.is_symlink():
            h.update(os.readlink(p).encode())
        elif p.is_file():
            h.update(oct(p.stat().st_mode & 0o777).encode() + p.read_bytes())


def ensure_task_image(task: HarborTask, *, echo: Any = None) -> tuple[str, list[str]]:
    """The task's image: ``[environment] docker_image`` when this engine holds it, else a build
    of ``environment/`` (cached by content: the staged files and the harbor base's id).
    Returns ``(image, notes)``.

    Raises:
        TaskError: ``docker_image`` names an image this engine lacks, or the build failed (its
            log's tail in the message).
    """
    env = dict(task.config.get("environment") or {})
    envdir = task.path / "environment"
    notes: list[str] = []
    if env.get("docker_image"):
        name = str(env["docker_image"])
        if image_id(name) is not None:
            return name, [f"docker_image {name}"]
        if not (envdir / "Dockerfile").is_file():
            raise TaskError(
                f"task {task.id}: [environment] docker_image = {name!r} is not on this Docker engine, no registry "
                f"can be reached to pull it, and the task has no environment/Dockerfile to build instead "
                f"(`docker load` the image)"
            )
        # Harbor's --force-build: the image the task names is built from the task's own Dockerfile.
        notes.append(f"docker_image {name}: not on this engine (no registry reachable), built from "
                     "environment/Dockerfile instead, as Harbor's force-build does")  # fmt: skip
    if not (envdir / "Dockerfile").is_file():
        raise TaskError(f"task {task.id}: environment/Dockerfile is missing")
    tag, more = build_image(envdir, "Dockerfile", f"task {task.id}: environment/Dockerfile", task.id,
                            timeout=float(env.get("build_timeout_sec") or 600), echo=echo)  # fmt: skip
    return tag, notes + more


def build_image(context: Path, dockerfile: str, what: str, label: str, *, args: Sequence[tuple[str, str]] = (),
                timeout: float = 600, echo: Any = None) -> tuple[str, list[str]]:  # fmt: skip
    """``docker build`` of a staged copy of ``context`` (its ``dockerfile``'s FROM and COPY --from
    resolved, :func:`resolve_dockerfile`) on the internal network, tagged by the hash of what went
    into it (built once). Returns ``(tag, notes)``.

    Raises:
        TaskError: naming ``what``, with the build log's tail.
    """
    base = ensure_base_image()
    ensure_packages()
    try:
        text, notes = resolve_dockerfile((context / dockerfile).read_text(encoding="utf-8"))
    except TaskError as e:
        raise TaskError(f"{what}: {e}") from None
    h = hashlib.sha256(text.encode() + (image_id(base) or "").encode())
    if args or dockerfile != "Dockerfile":  # (a task's own image keeps the tag it had before sidecars)
        h.update(json.dumps([dockerfile, *args]).encode())
    _hash_tree(context, h)
    tag = f"openenv-harbor-task:{h.hexdigest()[:20]}"
    if image_id(tag) is not None:
        return tag, notes
    with tempfile.TemporaryDirectory(prefix="openenv-harbor-build-") as tmp:
        ctx = Path(tmp) / "context"
        shutil.copytree(context, ctx, symlinks=True)
        (ctx / dockerfile).write_text(text, encoding="utf-8")
        cmd = ["build", "-q", "--network", NETWORK, *add_hosts(), "--label", f"{LABEL}.task={label}", "-t", tag,
               "-f", str(ctx / dockerfile)]  # fmt: skip
        for k, v in args:
            cmd += ["--build-arg", f"{k}={v}"]
        if echo:
            echo(f"building {label} ({tag})")
        try:
            r = _docker(*cmd, str(ctx), check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TaskError(f"{what} did not build in {timeout:g} s") from None
        if r.returncode != 0:
            log = (r.stdout + r.stderr).decode(errors="replace").strip()
            raise TaskError(f"{what} did not build: {log[-1500:]}")
    return tag, notes


# -- a container per episode


@dataclasses.dataclass
class ContainerRun:
    """What one command in the task's container did (the fields of :class:`openenv.sandbox.RunResult`
    the environment reads)."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False


def _cut(b: bytes) -> str:
    s = b[:OUTPUT_MAX].decode("utf-8", "replace")
    return s + (f"\n[... cut at {OUTPUT_MAX} bytes]" if len(b) > OUTPUT_MAX else "")


def _tar_of(prefix: str, data: bytes) -> bytes:
    """A tar holding ``prefix/`` (a directory, mode 755) and the members of the tar ``data`` below it."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as dst:
        d = tarfile.TarInfo(prefix)
        d.type, d.mode = tarfile.DIRTYPE, 0o755
        dst.addfile(d)
        with tarfile.open(fileobj=io.BytesIO(data)) as src:
            for m in src.getmembers():
                f = src.extractfile(m) if m.isfile() else None
                m.name = f"{prefix}/{m.name}"
                m.uid = m.gid = 0
                dst.addfile(m, f)
    return out.getvalue()


class ContainerBox:
    """One session's container (see the module's text); the interface of
    :class:`harbor_env.sandbox.TaskBox`."""

    def __init__(self) -> None:
        self.task: HarborTask | None = None
        self.image = ""
        self.name: str | None = None
        self.notes: list[str] = []
        #: The episode's own network and sidecar containers (a task with docker-compose.yaml).
        self.network: str | None = None
        self.sidecars: list[str] = []

    @property
    def isolation(self) -> list[str]:
        return ["container"] if self.name else []

    def _rm(self, name: str | None) -> None:
        if name:
            _docker("rm", "-f", "-v", name, check=False, timeout=120)

    def close(self) -> None:
        self._rm(self.name)
        self.name = None
        self._down()

    def _down(self) -> None:
        """The episode's sidecars and network, gone (harbor-packages leaves it first)."""
        for c in self.sidecars:
            self._rm(c)
        self.sidecars = []
        if self.network:
            _docker("network", "disconnect", "-f", self.network, PROXY_NAME, check=False, timeout=60)
            _docker("network", "rm", self.network, check=False, timeout=60)
            self.network = None

    def _resources(self, task: HarborTask) -> list[str]:
        env = task.config.get("environment") or {}
        out = ["--pids-limit", "1024", "--security-opt", "no-new-privileges"]
        if env.get("cpus"):
            out += ["--cpus", str(float(env["cpus"]))]
        if env.get("memory_mb"):
            out += ["--memory", f"{int(env['memory_mb'])}m"]
        elif env.get("memory"):
            out += ["--memory", str(env["memory"]).lower().replace("b", "")]
        return out

    def _net_args(self, *, online: bool, alias: str) -> list[str]:
        if self.network:  # the episode's own network: its services resolve by name, nothing else's do
            args = ["--network", self.network, "--network-alias", alias]
            return args + (add_hosts(self.network) if online else [])
        if online:
            return ["--network", NETWORK, *add_hosts()]
        return ["--network", "none"]

    def _run_container(self, image: str, task: HarborTask, *, online: bool) -> str:
        name = f"openenv-harbor-{secrets.token_hex(6)}"
        args = ["run", "-d", "--name", name, "--label", LABEL, "--hostname", "task", *self._resources(task)]
        args += self._net_args(online=online, alias="main")
        if online:
            for k, v in proxy_env().items():
                args += ["-e", f"{k}={v}"]
        compose = task.compose
        for k, v in [*(compose.main_environment if compose else ()),
                     *((task.config.get("environment") or {}).get("env") or {}).items()]:  # fmt: skip
            args += ["-e", f"{k}={v}"]
        args += [image, "sh", "-c", "sleep infinity"]
        _docker(*args, timeout=120)
        return name

    def _start_sidecars(self, task: HarborTask, *, online: bool) -> None:
        """The episode's network and its compose services, each once what it depends on is ready;
        returns when what ``main`` depends on is ready (raises RuntimeError naming the service that
        is not, with its log's tail)."""
        spec = task.compose
        assert spec is not None
        images = {}
        for svc in spec.services:  # built (or found) before anything starts
            if svc.context is not None:
                images[svc.name], notes = build_image(
                    svc.context, svc.dockerfile, f"task {task.id}: {spec.file} service {svc.name}",
                    f"{task.id}/{svc.name}", args=svc.build_args,
                    timeout=float((task.config.get("environment") or {}).get("build_timeout_sec") or 600),
                )  # fmt: skip
                self.notes += [f"{svc.name}: {n}" for n in notes]
            elif svc.image and image_id(svc.image) is not None:
                images[svc.name] = svc.image
            else:
                raise TaskError(f"task {task.id}: {spec.file} service {svc.name}: image {svc.image!r} is not on this "
                                "Docker engine and no registry can be reached to pull it")  # fmt: skip
        self.network = f"openenv-harbor-ep-{secrets.token_hex(6)}"
        _docker("network", "create", "--internal", "--label", LABEL, self.network, timeout=60)
        if online:  # harbor-packages joins the episode's network: its only way to the package registries
            _docker("network", "connect", "--alias", "harbor-packages", self.network, PROXY_NAME, timeout=60)
        for svc in start_order(spec):
            for dep, cond in svc.depends_on:
                self._wait_for(spec.by_name(dep), cond)
            name = f"{self.network}-{svc.name}"
            args = ["run", "-d", "--name", name, "--label", LABEL, "--hostname", svc.name,
                    "--pids-limit", "1024", "--security-opt", "no-new-privileges", "--memory", "2g",
                    *self._net_args(online=online, alias=svc.name), *svc.health_flags]  # fmt: skip
            if online:
                for k, v in proxy_env().items():
                    args += ["-e", f"{k}={v}"]
            for k, v in svc.environment:
                args += ["-e", f"{k}={v}"]
            if svc.working_dir:
                args += ["-w", svc.working_dir]
            if svc.user:
                args += ["-u", svc.user]
            if svc.init:
                args.append("--init")
            entry = svc.entrypoint
            if entry is not None:
                entry_argv = ["sh", "-c", entry] if isinstance(entry, str) else list(entry)
                args += ["--entrypoint", entry_argv[0] if entry_argv else ""]
            args.append(images[svc.name])
            if entry is not None:
                args += entry_argv[1:]
            if svc.command is not None:
                args += ["sh", "-c", svc.command] if isinstance(svc.command, str) else list(svc.command)
            _docker(*args, timeout=120)
            self.sidecars.append(name)
        for dep, cond in spec.main_depends_on:
            self._wait_for(spec.by_name(dep), cond)

    def _wait_for(self, svc: Any, cond: str) -> None:
        """Poll the engine until ``svc`` meets compose's ``cond`` (bounded by its healthcheck's own
        budget), else RuntimeError with its state and log."""
        name = f"{self.network}-{svc.name}"
        deadline = time.monotonic() + (svc.health_wait_s if cond == "service_healthy" else 120)
        fmt = "{{.State.Status}} {{.State.ExitCode}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"
        state: list[str] = []
        while time.monotonic() < deadline:
            state = _docker("inspect", "--format", fmt, name, check=False, timeout=60).stdout.decode().split()
            status, code, health = [*state, "", "", ""][:3]
            if cond == "service_started" and status == "running":
                return
            if cond == "service_healthy" and health == "healthy":
                return
            if cond == "service_completed_successfully" and status == "exited" and code == "0":
                return
            if status in ("exited", "dead") or health == "unhealthy":
                break
            time.sleep(1.0)
        log = _docker("logs", "--tail", "15", name, check=False, timeout=60)
        tail = (log.stdout + log.stderr).decode(errors="replace").strip()[-1200:]
        seen = " ".join(state) or "no state"
        raise RuntimeError(f"service {svc.name} did not reach {cond} ({seen}); its log: {tail}")

    def start(self, task: HarborTask) -> list[str]:
        """A new episode of ``task``: its image (built once), a fresh container of it (and, for a
        task with docker-compose.yaml, its services on a network of the episode's own). Returns
        problems (empty when the container runs)."""
        self.close()
        self.task = task
        try:
            self.image, self.notes = ensure_task_image(task)
            ensure_packages()
            online = bool((task.config.get("environment") or {}).get("allow_internet", True))
            if task.compose is not None:
                self._start_sidecars(task, online=online)
            self.name = self._run_container(self.image, task, online=online)
        except (TaskError, RuntimeError, subprocess.TimeoutExpired) as e:
            self._down()
            return [str(e)]
        return []

    def _exec(self, name: str, argv: Sequence[str], wall_s: float, *, cwd: str | None = None,
              env: Mapping[str, str] | None = None, stdin: bytes = b"") -> ContainerRun:  # fmt: skip
        args = ["exec", "-i"]
        if cwd:
            args += ["-w", cwd]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        wall = max(1, int(wall_s + 0.999))
        args += [name, "timeout", "-s", "KILL", str(wall), *argv]
        t0 = time.monotonic()
        try:
            r = subprocess.run(["docker", *args], input=stdin, capture_output=True, timeout=wall + 60, check=False)
        except subprocess.TimeoutExpired:
            return ContainerRun("", "the command did not end in time", -9, True)
        code = r.returncode
        if code == 137:  # `timeout -s KILL` (or the memory limit) killed it
            code = -9
        timed_out = code == -9 and time.monotonic() - t0 >= wall - 0.5
        return ContainerRun(_cut(r.stdout), _cut(r.stderr), code, timed_out)

    def shell(self, command: str, wall_s: float, *, cwd: str | None = None,
              env: Mapping[str, str] | None = None) -> ContainerRun:  # fmt: skip
        """``bash -c COMMAND`` in the task's WORKDIR (or ``cwd``) inside the container."""
        assert self.task is not None and self.name is not None
        return self._exec(self.name, ["bash", "-c", command], wall_s, cwd=cwd or self.task.build.workdir, env=env)

    def python(self, code: str, wall_s: float, stdin: bytes = b"") -> ContainerRun:
        """A Python script (the container's ``python3``) in the task's WORKDIR."""
        assert self.task is not None and self.name is not None
        return self._exec(self.name, ["python3", "-c", code], wall_s, cwd=self.task.build.workdir, stdin=stdin)

    def _copy_in(self, name: str, prefix: str, data: bytes) -> None:
        _docker("cp", "-", f"{name}:/", input=_tar_of(prefix, data), timeout=300)

    def oracle(self) -> dict[str, Any]:
        """Play the task's reference solution (``bash /solution/solve.sh`` in WORKDIR)."""
        assert self.task is not None and self.name is not None
        if self.task.solution_tar is None:
            raise ValueError(f"task {self.task.id} has no solution/solve.sh")
        self._exec(self.name, ["rm", "-rf", "/solution"], 60)
        self._copy_in(self.name, "solution", self.task.solution_tar)
        r = self.shell("bash /solution/solve.sh", self.task.agent_timeout_s, env=self.task.solution_env)
        self._exec(self.name, ["rm", "-rf", "/solution"], 60)
        return {"exit_code": r.exit_code, "log": (r.stdout + r.stderr)[-4000:]}

    def _tampered(self, name: str) -> list[str]:
        r = _docker("diff", name, check=False, timeout=120)
        out = []
        for line in r.stdout.decode(errors="replace").splitlines():
            kind, _, path = line.partition(" ")
            if kind in ("C", "D", "A") and VERIFIER_CHAIN.match(path):
                out.append(path)
        return out

    def verify(self) -> Verdict:
        """Run the task's tests on a committed copy of the agent's container (see the module's text)."""
        assert self.task is not None
        task = self.task
        if self.name is None:
            return Verdict(0.0, {}, "the task's container is not running", {})
        agent = self.name
        tampered = self._tampered(agent)
        graded = f"openenv-harbor-graded:{secrets.token_hex(6)}"
        verifier: str | None = None
        try:
            _docker("commit", "--pause=true", agent, graded, timeout=600)
            self._rm(agent)  # every process of the agent's ends here
            self.name = None
            if tampered:
                return Verdict(0.0, {}, f"the agent changed what the verifier runs on ({', '.join(tampered[:5])}): "
                               "the tests' verdict would not be theirs", {})  # fmt: skip
            verifier = self._run_container(graded, task, online=True)
            prep = self._exec(verifier, ["sh", "-c", "rm -rf /tests /logs && mkdir -p /logs/verifier /logs/agent "
                                         "/logs/artifacts"], 120)  # fmt: skip
            if prep.exit_code != 0:
                return Verdict(0.0, {}, f"could not prepare /tests and /logs: {prep.stderr[-300:]}", {})
            self._copy_in(verifier, "tests", task.tests_tar)
            before = self._pids(verifier)
            env = {**task.verifier_env}
            # 2>&1 in the container: the output in the order test.sh wrote it (its summary last)
            run = self._exec(verifier, ["bash", "-c", "bash /tests/test.sh 2>&1"], task.verifier_timeout_s,
                             cwd=task.build.workdir, env=env)  # fmt: skip
            after = self._pids(verifier)
            _docker("kill", verifier, check=False, timeout=120)
            raw = self._verdict_files(verifier)
            raw.update({
                "exit_code": None if run.timed_out else run.exit_code, "timed_out": run.timed_out,
                "orphans": len(after - before), "log": (run.stdout + run.stderr)[-4000:],
            })  # fmt: skip
            return judge(raw, task.verifier_timeout_s)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            return Verdict(0.0, {}, f"the verifier could not run: {e}", {})
        finally:
            self._rm(verifier)
            self._down()
            _docker("rmi", "-f", graded, check=False, timeout=120)

    def _pids(self, name: str) -> set[str]:
        """The container's processes (host pids), but the ``docker exec`` helpers of our own."""
        r = _docker("top", name, "-eo", "pid,args", check=False, timeout=60)
        out = set()
        for line in r.stdout.decode(errors="replace").splitlines()[1:]:
            pid, _, args = line.strip().partition(" ")
            if pid.isdigit() and not args.strip().startswith("timeout -s KILL"):
                out.add(pid)
        return out

    def _verdict_files(self, name: str) -> dict[str, Any]:
        """``/logs/verifier``'s reward files as the stopped container holds them (no link followed)."""
        r = _docker("cp", f"{name}:/logs/verifier", "-", check=False, timeout=300)
        if r.returncode != 0:
            return {"verifier_dir": "missing", "reward_json": None, "reward_txt": None}
        files: dict[str, Any] = {}
        with contextlib.suppress(tarfile.TarError), tarfile.open(fileobj=io.BytesIO(r.stdout)) as tar:
            members = tar.getmembers()
            top = members[0] if members else None
            if top is None or not top.isdir():
                return {"verifier_dir": "not a directory", "reward_json": None, "reward_txt": None}
            for m in members:
                rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                if rel not in ("reward.json", "reward.txt"):
                    continue
                if m.isfile():
                    f = tar.extractfile(m)
                    raw = f.read(MAX_REWARD_FILE + 1) if f else b""
                    files[rel] = {"kind": "file", "too_long": len(raw) > MAX_REWARD_FILE,
                                  "text": raw[:MAX_REWARD_FILE].decode("utf-8", "replace")}  # fmt: skip
                else:
                    kind = "directory" if m.isdir() else "symbolic link" if m.issym() else "special file"
                    files[rel] = {"kind": kind}
        return {"verifier_dir": "ok", "reward_json": files.get("reward.json"), "reward_txt": files.get("reward.txt")}
