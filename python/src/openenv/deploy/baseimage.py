"""A local base image for environment images where no registry is reachable.

``ensure_base_image()`` debootstraps a minimal Debian (``minbase`` plus ``python3``,
``python3-venv`` and ``ca-certificates``) from the Debian mirror named in the host's apt
sources, and imports it as a Docker image (``openenv-base:bookworm`` by default). It does
nothing when that image already exists. Used by ``tools/make_base_image.py`` and by
``openenv build --offline --debootstrap-base``.

What you may rely on:

* The mirror is read from ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d/*.list``
  / ``*.sources`` (deb822), never built in; ``mirror=`` overrides it.
* The image has ``python3`` (with ``venv``/``ensurepip``) on ``PATH``, ``LANG=C.UTF-8``,
  and the labels ``openenv.base.suite`` and ``openenv.base.python``.
* It needs root (debootstrap creates device nodes and chroots) and the ``debootstrap``
  program; both are checked first, with a clear error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from openenv.deploy.engine import docker_client
from openenv.errors import FailedPrecondition, Internal, NotFound

__all__ = ["DEFAULT_BASE_TAG", "DEFAULT_SUITE", "AptSource", "apt_mirror", "apt_sources", "ensure_base_image"]

DEFAULT_SUITE = "bookworm"
DEFAULT_BASE_TAG = f"openenv-base:{DEFAULT_SUITE}"
# bubblewrap: the sandbox of environments that run submitted code (openenv.sandbox).
PACKAGES = ("python3", "python3-venv", "ca-certificates", "bubblewrap")
# Debian's release names and aliases, to tell a Debian archive from other apt sources.
_DEBIAN_SUITES = re.compile(
    r"^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)"
    r"(-updates|-backports|-proposed-updates)?$"
)


@dataclass(frozen=True)
class AptSource:
    """One ``deb`` source of the host's apt configuration."""

    uri: str
    suites: tuple[str, ...]
    origin: str  # the file it came from


def apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """The enabled ``deb`` sources of the host, in apt's reading order."""
    files: list[Path] = []
    if (etc_apt / "sources.list").is_file():
        files.append(etc_apt / "sources.list")
    d = etc_apt / "sources.list.d"
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".list", ".sources") and p.is_file())
    out: list[AptSource] = []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        out += _parse_deb822(text, str(f)) if f.suffix == ".sources" else _parse_one_line(text, str(f))
    return out


def _parse_one_line(text: str, origin: str) -> Iterator[AptSource]:
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        line = re.sub(r"\[[^\]]*\]", " ", line[4:])  # drop [arch=... signed-by=...]
        parts = line.split()
        if len(parts) >= 2:
            yield AptSource(parts[0], (parts[1],), origin)


def _parse_deb822(text: str, origin: str) -> Iterator[AptSource]:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key:
                fields[key] += " " + raw.strip()
            elif ":" in raw:
                key, value = raw.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        for uri in fields.get("uris", "").split():
            yield AptSource(uri, tuple(fields.get("suites", "").split()), origin)


def apt_mirror(suite: str = DEFAULT_SUITE, etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror to debootstrap ``suite`` from, read from the host's apt sources.

    Prefers a source that lists ``suite`` itself; otherwise any Debian archive source
    (a mirror serves every release). Security archives are never chosen.

    Raises:
        NotFound: no Debian archive among the apt sources (pass a mirror explicitly).
    """
    candidates = [
        s
        for s in apt_sources(etc_apt)
        if "security" not in s.uri and not any(x.endswith("-security") for x in s.suites)
    ]
    for s in candidates:
        if suite in s.suites:
            return s.uri
    for s in candidates:
        if any(_DEBIAN_SUITES.match(x) for x in s.suites):
            return s.uri
    raise NotFound(
        f"no Debian archive found in the apt sources under {etc_apt} to debootstrap {suite!r} "
        "from; pass the mirror explicitly (--mirror URL or OPENENV_DEBIAN_MIRROR)"
    )


def _say(echo: Callable[[str], None] | None, msg: str) -> None:
    if echo is not None:
        echo(msg)


def ensure_base_image(
    tag: str = DEFAULT_BASE_TAG,
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str | None = None,
    force: bool = False,
    client: object | None = None,
    echo: Callable[[str], None] | None = print,
) -> str:
    """Make sure the debootstrapped base image ``tag`` exists; return its image id.

    Skips all work when the image exists with today's package list (unless ``force``); one
    built with another list (an older release of this package) is rebuilt. Otherwise debootstraps into a
    temporary directory (about 45 s and 275 MB), imports it with ``docker import`` and
    removes the directory.

    Raises:
        FailedPrecondition: not root, or ``debootstrap`` missing.
        NotFound: no mirror could be found in the apt sources.
        Internal: debootstrap or the import failed (the message has the last output lines).
    """
    dc: docker.DockerClient = client or docker_client()
    if not force:
        try:
            image = dc.images.get(tag)
            have = (image.labels or {}).get("openenv.base.packages", "")
            if have == ",".join(PACKAGES):
                _say(echo, f"base image {tag} exists ({image.short_id}); nothing to do")
                return str(image.id)
            want = ",".join(PACKAGES)
            _say(echo, f"base image {tag} has packages [{have or 'unrecorded'}], not [{want}]: rebuilding")
        except docker.errors.ImageNotFound:
            pass
    if os.geteuid() != 0:
        raise FailedPrecondition("building the base image needs root (debootstrap creates device nodes)")
    if shutil.which("debootstrap") is None:
        raise FailedPrecondition("debootstrap is not installed: apt-get install -y debootstrap")
    mirror = mirror or os.environ.get("OPENENV_DEBIAN_MIRROR") or apt_mirror(suite)
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="openenv-base-", dir=os.environ.get("OPENENV_BASE_WORKDIR")))
    try:
        _say(echo, f"debootstrap {suite} (minbase + {', '.join(PACKAGES)}) from {mirror} into {root}")
        _debootstrap(root, suite, mirror, echo)
        _trim(root)
        python = _python_version(root)
        changes = [
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "ENV LANG=C.UTF-8",
            f'LABEL org.opencontainers.image.title="openenv-base" openenv.base.suite="{suite}" '
            f'openenv.base.python="{python}" openenv.base.packages="{",".join(PACKAGES)}"',
            'CMD ["python3"]',
        ]
        repo, _, version = tag.rpartition(":") if ":" in tag.rsplit("/", 1)[-1] else (tag, "", "latest")
        _say(echo, f"importing {root} as {tag}")
        image_id = _import(dc, root, repo, version, changes)
    finally:
        _remove_tree(root)
    _say(echo, f"base image {tag} ready (python {python}) in {time.monotonic() - t0:.0f} s")
    return image_id


def _debootstrap(root: Path, suite: str, mirror: str, echo: Callable[[str], None] | None) -> None:
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        "--components=main",
        suite,
        str(root),
        mirror,
    ]
    tail: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-39:], line]
            if line.startswith(
                (
                    "I: Retrieving Release",
                    "I: Base system installed",
                    "I: Installing core",
                    "I: Unpacking the base",
                    "I: Configuring the base",
                    "E:",
                    "W:",
                )
            ):
                _say(echo, f"  {line}")
        rc = proc.wait()
    if rc != 0:
        log = root / "debootstrap" / "debootstrap.log"
        extra = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
        raise Internal(f"debootstrap exited with {rc}:\n" + "\n".join(tail + extra))


def _trim(root: Path) -> None:
    """Drop what an image does not need: package caches, lists, man pages."""
    for rel in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man", "usr/share/info"):
        d = root / rel
        if d.is_dir():
            for child in d.iterdir():
                if child.is_file() or child.is_symlink():
                    child.unlink()
                elif child.name != "partial":
                    shutil.rmtree(child, ignore_errors=True)


def _python_version(root: Path) -> str:
    target = os.readlink(root / "usr/bin/python3") if (root / "usr/bin/python3").is_symlink() else ""
    m = re.search(r"python(\d+\.\d+)", target)
    if not m or not (root / "usr/lib" / f"python{m.group(1)}" / "ensurepip").is_dir():
        raise Internal(f"the debootstrapped system has no usable python3 with ensurepip (python3 -> {target!r})")
    return m.group(1)


def _import(dc: object, root: Path, repo: str, tag: str, changes: list[str]) -> str:
    proc = subprocess.Popen(
        ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-c", "."],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    stream = proc.stdout
    try:
        result = dc.api.import_image_from_stream(  # type: ignore[attr-defined]
            iter(lambda: stream.read(1 << 20), b""), repository=repo, tag=tag, changes=changes
        )
    except docker.errors.APIError as e:
        proc.kill()
        raise Internal(f"docker import failed: {e.explanation or e}") from e
    finally:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        rc = proc.wait()
    if rc != 0:
        raise Internal(f"tar of the base system failed ({rc}): {err}")
    text = result if isinstance(result, str) else str(result)
    m = re.search(r"sha256:[0-9a-f]{64}", text)
    if not m:
        raise Internal(f"docker import gave no image id: {text[-500:]}")
    return m.group(0)


def _remove_tree(root: Path) -> None:
    """Remove the debootstrap directory, unmounting anything debootstrap left mounted in it."""
    prefix = str(root.resolve()) + "/"
    try:
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f]
    except OSError:
        mounts = []
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False, capture_output=True)
    shutil.rmtree(root, ignore_errors=True)
