"""``openenv build``: an environment's Docker image, online or offline (docs/images.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from openenv._contract import PROTOCOL_VERSION
from openenv.deploy.baseimage import DEFAULT_BASE_TAG, ensure_base_image
from openenv.deploy.engine import GRPC_PORT, SANDBOX_LABEL, Echo, docker_client
from openenv.deploy.project import EnvProject, runtime_source
from openenv.deploy.wheelhouse import Target, build_wheelhouse, copy_project, read_constraints
from openenv.errors import FailedPrecondition, Internal

__all__ = [
    "DEFAULT_BASE_IMAGE",
    "HOOK_FILE",
    "BuildResult",
    "build_image",
    "dockerfile_template",
    "image_labels",
    "probe_base",
    "render_dockerfile",
]

DEFAULT_BASE_IMAGE = "python:3.11-slim"
_TEMPLATES = Path(__file__).parent / "templates"

HOOK_FILE = "image.Dockerfile"
"""An environment's own lines for its image, rendered into the template (:func:`render_dockerfile`)."""

_SECTION = re.compile(r"^#\s*openenv-hook:\s*(\S+)\s*$")
_RUNTIME_BASE = re.compile(r"^\s*FROM\s+\S+\s+AS\s+runtime-base\s*$", re.IGNORECASE | re.MULTILINE)
#: What an environment that runs code in openenv.sandbox (``[tool.openenv] sandbox = true``) gets.
_SANDBOX_LINES = """\
# The sandbox ([tool.openenv] sandbox = true) needs bubblewrap: the debootstrapped base has it
# (offline builds); another Debian-based base gets it from its apt sources.
RUN command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq --no-install-recommends bubblewrap \\
    && rm -rf /var/lib/apt/lists/*)"""
_FIELD_LINE = re.compile(r"^\{\{(\w+)\}\}\n|\{\{(\w+)\}\}", re.MULTILINE)


_PROBE = (
    "import json, platform, sys, ensurepip, venv; "
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
    "'libc': platform.libc_ver()}))"
)


def probe_base(dc: docker.DockerClient, image: str) -> Target:
    """Run the base image once (no network) to read its Python version, machine and C library."""
    try:
        out = dc.containers.run(
            image, ["python3", "-c", _PROBE], entrypoint=[], remove=True, network_mode="none", stdout=True, stderr=True
        )
    except docker.errors.ContainerError as e:
        raise FailedPrecondition(
            f"base image {image} has no usable python3 with venv/ensurepip: "
            f"{(e.stderr or b'').decode(errors='replace')[-500:]}"
        ) from None
    d = json.loads(out.decode().strip().splitlines()[-1])
    libc, libc_version = d["libc"] if d["libc"][0] else ("", "0.0")
    return Target(d["python"], d["machine"], libc, libc_version)


@dataclass(frozen=True)
class BuildResult:
    """What :func:`build_image` made."""

    tag: str
    image_id: str
    base_image: str
    offline: bool
    seconds: float
    labels: dict[str, str] = field(default_factory=dict)


def _hook_sections(text: str, where: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {"stages": [], "runtime": []}
    current = "runtime"
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m is None:
            sections[current].append(line)
        elif m.group(1) in sections:
            current = m.group(1)
        else:
            raise FailedPrecondition(
                f"{where}: unknown section '# openenv-hook: {m.group(1)}' (the sections are 'stages' and 'runtime'; "
                "docs/images.md)"
            )
    return {k: "\n".join(v).strip("\n") for k, v in sections.items()}


def render_dockerfile(env_dir: str | os.PathLike[str] | None = None) -> str:
    """The Dockerfile ``openenv build`` uses for ENV_DIR (docs/images.md): ENV_DIR's own
    ``Dockerfile`` when it has one, as it is; else the packaged template, with the contract's
    protocol version, the gRPC port, bubblewrap when ENV_DIR's ``[tool.openenv] sandbox`` is true
    (the base of every environment that runs code in :mod:`openenv.sandbox`), and ENV_DIR's
    :data:`HOOK_FILE` when present:

    * its ``runtime`` lines (every line before any section marker, or after
      ``# openenv-hook: runtime``) run as root in the runtime stage before the virtualenv is
      copied in (so they stay cached while only the environment's code changes);
    * its ``stages`` lines (after ``# openenv-hook: stages``) are build stages placed before the
      runtime stage; one named ``runtime-base`` becomes the runtime stage's base instead of
      ``${BASE_IMAGE}``.

    With no ``env_dir``, the template with no environment lines.
    """
    own = Path(env_dir) / "Dockerfile" if env_dir is not None else None
    if own is not None and own.is_file():
        return own.read_text()
    hook = Path(env_dir) / HOOK_FILE if env_dir is not None else None
    sandbox = env_dir is not None and EnvProject.load(env_dir).sandbox
    sections = {"stages": "", "runtime": ""}
    if hook is not None and hook.is_file():
        sections = _hook_sections(hook.read_text(), str(hook))
    fields = {
        "protocol_version": PROTOCOL_VERSION,
        "grpc_port": str(GRPC_PORT),
        "runtime_base": "runtime-base" if _RUNTIME_BASE.search(sections["stages"]) else "${BASE_IMAGE}",
        "stages": sections["stages"] + "\n" if sections["stages"] else "",
        "sandbox": _SANDBOX_LINES if sandbox else "",
        "runtime": sections["runtime"],
    }
    template = (_TEMPLATES / "Dockerfile").read_text()

    # A field alone on its line that is empty takes its line with it; one pass, so that nothing
    # of the environment's lines is read as a field.
    def field(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return fields[m.group(2)]
        value = fields[m.group(1)]
        return f"{value}\n" if value else ""

    return _FIELD_LINE.sub(field, template)


def dockerfile_template() -> str:
    """The Dockerfile that ``openenv build`` uses for an environment without its own or any
    :data:`HOOK_FILE` (the template rendered with no environment lines)."""
    return render_dockerfile()


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def image_labels(env: EnvProject, base_image: str) -> dict[str, str]:
    """The labels of an environment image (docs/images.md)."""
    sandbox = {SANDBOX_LABEL: "bubblewrap"} if env.sandbox else {}
    return {
        **sandbox,
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


def build_image(
    env_dir: str | os.PathLike[str],
    *,
    tag: str | None = None,
    base_image: str | None = None,
    offline: bool = False,
    debootstrap_base: bool = False,
    no_cache: bool = False,
    openenv_source: str | os.PathLike[str] | None = None,
    constraints: str | os.PathLike[str] | None = None,
    engine: docker.DockerClient | None = None,
    echo: Echo = print,
) -> BuildResult:
    """Build ``openenv-<name>:<version>`` (or ``tag``) from ENV_DIR's Dockerfile (:func:`render_dockerfile`).

    Args:
        env_dir: the environment directory (pyproject.toml with ``[tool.openenv] factory``;
            its ``Dockerfile``, or the packaged template with its ``image.Dockerfile`` lines when it
            has none: :func:`render_dockerfile`).
        base_image: the ``BASE_IMAGE`` build argument (default ``python:3.11-slim``; with
            ``debootstrap_base``, the local ``openenv-base:bookworm``).
        offline: build a wheelhouse of every dependency on the host and install from it
            inside the image with no network (the build containers get ``network=none``).
        debootstrap_base: use (and build when missing) the debootstrapped local base image.
        no_cache: ignore Docker's layer cache.
        constraints: a constraints or lock file (``name==version`` lines; hashes and comments are
            ignored) pinning the offline wheelhouse: the image gets those versions wherever it
            needs the package (this repository's images: ``requirements/dev.txt``).
        echo: receives progress lines.
    """
    t0 = time.monotonic()
    if constraints is not None and not offline:
        raise FailedPrecondition("--constraint pins the offline wheelhouse: build with --offline to use it")
    pins = read_constraints(constraints) if constraints is not None else None
    env = EnvProject.load(env_dir)
    dc = engine or docker_client(timeout=600)
    if debootstrap_base:
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
                "`docker load`"
            ) from None
        target = probe_base(dc, base_image)
        echo(f"  base python {target.python} ({target.libc} {target.libc_version}, {target.machine})")
    projects = [runtime_source(openenv_source)]
    if env.path != projects[0]:
        projects.append(env.path)
    if pins is not None:
        echo(f"  constraints: {len(pins)} pins from {constraints}")
    wh = build_wheelhouse(projects, target, echo, constraints=pins)
    labels = image_labels(env, base_image)
    with tempfile.TemporaryDirectory(prefix="openenv-build-") as tmp:
        ctx = Path(tmp)
        copy_project(env.path, ctx)
        dockerfile = ctx / "Dockerfile"
        dockerfile.write_text(render_dockerfile(env.path))
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
                e.message += (
                    "\nhint: where the engine cannot pull images or containers cannot reach a package "
                    "index, build with --offline (and --debootstrap-base when the base image is not local)"
                )
                e.args = (e.message,)
            raise
    got = dc.images.get(image_id).labels or {}
    wrong = {
        k: got.get(k)
        for k in ("openenv.env.name", "openenv.env.version", "openenv.protocol.version", "openenv.factory")
        if got.get(k) != labels[k]
    }
    if wrong:
        raise Internal(
            f"image {tag} was built but its labels are not those of {env.path}: {wrong} "
            f"(expected {', '.join(f'{k}={labels[k]}' for k in wrong)}); see docs/images.md"
        )
    seconds = time.monotonic() - t0
    echo(f"built {tag} ({image_id[:19]}) in {seconds:.1f} s")
    return BuildResult(tag, image_id, base_image, offline, seconds, labels)


def _docker_build(
    dc: docker.DockerClient,
    ctx: Path,
    tag: str,
    buildargs: dict[str, str],
    labels: dict[str, str],
    *,
    offline: bool,
    no_cache: bool,
    echo: Echo,
) -> str:
    tail: list[str] = []
    image_id = ""
    try:
        stream = dc.api.build(
            path=str(ctx),
            tag=tag,
            buildargs=buildargs,
            labels=labels,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=no_cache,
            decode=True,
            network_mode="none" if offline else None,
        )
        for chunk in stream:
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    if line.strip():
                        tail = [*tail[-59:], line]
                        echo(f"  {line}")
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise Internal(
                    f"docker build of {tag} failed: {detail.strip()}\n--- last build output ---\n" + "\n".join(tail)
                )
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = aux["ID"]
    except docker.errors.APIError as e:
        raise Internal(f"docker build of {tag} failed: {e.explanation or e}") from None
    if not image_id:
        image_id = str(dc.images.get(tag).id)
    return image_id
