"""Wheelhouses for environment images: wheels built and downloaded on the host.

``build_wheelhouse(projects, target)`` returns wheels of the local projects (this repo's
``openenv`` and an environment), and, for an offline build (``target`` given), every
dependency as a binary wheel for exactly the image's Python (version, machine, C library),
pinned in ``requirements``. Both are cached under :func:`cache_dir`: local wheels by the hash
of their project's files, dependency sets by the hash of the requirements, the constraints and
the target.

``constraints`` (``openenv build --constraint FILE``) pins the dependency set: a lock such as
this repository's ``requirements/dev.txt`` gives an image exactly the versions its tests ran
with, whatever the package index holds on the day of the build. A pinned release published
only as a source distribution is built into a wheel on the host, if it is pure Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from openenv.errors import FailedPrecondition, Internal

__all__ = [
    "Target",
    "Wheelhouse",
    "build_wheelhouse",
    "cache_dir",
    "canonical_name",
    "copy_project",
    "read_constraints",
]

Echo = Callable[[str], None]
_SKIP_DIRS = {
    ".git",
    ".hg",
    "build",
    "dist",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".hypothesis",
    "node_modules",
    "_openenv",
}


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 normalises it (``Echo_Env`` -> ``echo-env``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_dir() -> Path:
    """Where wheels are cached: ``$OPENENV_CACHE_DIR``, else ``$XDG_CACHE_HOME/openenv``, else ~/.cache/openenv."""
    if os.environ.get("OPENENV_CACHE_DIR"):
        return Path(os.environ["OPENENV_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openenv"


def _project_files(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        linked = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]  # not descended into
        dirnames[:] = [d for d in dirnames if d not in linked]
        out += [Path(dirpath, f) for f in sorted([*filenames, *linked]) if not f.endswith((".pyc", ".pyo"))]
    return out


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for f in _project_files(root):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(os.readlink(f).encode() if f.is_symlink() else hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:24]


def copy_project(src: Path, dst: Path) -> None:
    """Copy a project's files into a build context. Symlinks are kept as links; one that
    resolves outside ``src`` is refused (FailedPrecondition): following it would copy files
    from elsewhere on the machine into the image (RFC 0003)."""
    root = src.resolve()
    for f in _project_files(src):
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.is_symlink():
            if not f.resolve().is_relative_to(root):
                raise FailedPrecondition(
                    f"{f} is a symlink to {os.readlink(f)}, outside {src}: the build context holds only the "
                    "environment's own files (copy the file in, or point the link inside the directory)"
                )
            os.symlink(os.readlink(f), target)
        else:
            shutil.copy2(f, target)


def _run(cmd: list[str], echo: Echo, what: str, env: Mapping[str, str] | None = None) -> None:
    """Run a host command, streaming its output to echo; Internal with the tail on failure."""
    tail: list[str] = []
    with subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env={**os.environ, **(env or {})},
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if "is ignored: it is neither a file nor a directory" in line:
                continue
            tail = [*tail[-59:], line]
            echo(f"    {line}")
        rc = proc.wait()
    if rc != 0:
        raise Internal(f"{what} failed (exit {rc}): {' '.join(cmd)}\n" + "\n".join(tail))


def _local_wheel(project: Path, echo: Echo) -> Path:
    """A wheel of a local project, cached by the hash of its files (a wheel is itself)."""
    if project.is_file() and project.suffix == ".whl":
        return project
    key = _tree_hash(project)
    out = cache_dir() / "wheels" / "local" / f"{project.name}-{key}"
    wheels = sorted(out.glob("*.whl")) if out.is_dir() else []
    if wheels:
        echo(f"  {project.name}: cached wheel {wheels[0].name}")
        return wheels[0]
    echo(f"  {project.name}: building a wheel")
    with tempfile.TemporaryDirectory(prefix="openenv-wheel-") as tmp:
        src = Path(tmp) / "src" / project.name
        copy_project(project, src)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "--wheel-dir",
                str(Path(tmp) / "out"),
                str(src),
            ],
            echo,
            f"building the wheel of {project}",
            env={"SOURCE_DATE_EPOCH": "315532800"},
        )
        built = sorted((Path(tmp) / "out").glob("*.whl"))
        if len(built) != 1:
            raise Internal(f"building {project} gave {len(built)} wheels, expected 1")
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
        shutil.copy2(built[0], stage / built[0].name)
        try:
            stage.rename(out)
        except OSError:  # another build cached it first
            shutil.rmtree(stage, ignore_errors=True)
    return sorted(out.glob("*.whl"))[0]


def _wheel_meta(wheel: Path) -> tuple[str, list[Requirement]]:
    """(canonical name, Requires-Dist requirements) of a wheel."""
    with zipfile.ZipFile(wheel) as z:
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta_name).decode()
    name, reqs = "", []
    for line in text.split("\n\n", 1)[0].splitlines():
        if line.startswith("Name:"):
            name = canonical_name(line.split(":", 1)[1].strip())
        elif line.startswith("Requires-Dist:"):
            reqs.append(Requirement(line.split(":", 1)[1].strip()))
    return name, reqs


def _declared(metas: list[tuple[str, list[Requirement]]]) -> list[str]:
    """The requirements of the local projects on anything else: unconditional ones, plus
    those of each extra that one local project asks of another (``protoenv[http]``)."""
    local = {n for n, _ in metas}
    wanted = {
        canonical_name(r.name): set(r.extras)
        for _, reqs in metas
        for r in reqs
        if canonical_name(r.name) in local and r.extras
    }
    out: set[str] = set()
    for name, reqs in metas:
        extras = wanted.get(name, set())
        for r in reqs:
            if canonical_name(r.name) in local:
                continue
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                keep = True
            else:
                keep = any(r.marker.evaluate({"extra": e}) for e in extras)
            if keep:
                bare = Requirement(str(r))
                bare.marker = None
                out.add(str(bare))
    return sorted(out)


def _wheel_dist(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return canonical_name(name), version


@dataclass(frozen=True)
class Target:
    """The Python of a base image, as wheels need it."""

    python: str  # "3.11"
    machine: str  # "x86_64"
    libc: str  # "glibc"
    libc_version: str  # "2.36"

    def is_host(self) -> bool:
        """Whether wheels built or chosen for this host's Python install in the image: the same
        Python version and machine, and a C library of the same kind no newer than the image's."""
        libc, version = platform.libc_ver()
        if libc != self.libc or not version:
            return False
        try:
            older = tuple(map(int, version.split(".")[:2])) <= tuple(map(int, self.libc_version.split(".")[:2]))
        except ValueError:
            return False
        same = self.python == f"{sys.version_info[0]}.{sys.version_info[1]}" and self.machine == platform.machine()
        return same and older

    def pip_args(self) -> list[str]:
        """``pip download`` flags selecting binary wheels this Python can install."""
        major, minor = self.libc_version.split(".")[:2]
        if self.libc == "glibc":
            plats = [f"manylinux_{major}_{m}_{self.machine}" for m in range(int(minor), 4, -1)]
            plats += [f"manylinux{v}_{self.machine}" for v in ("2014", "2010", "1")]
        elif self.libc == "musl":
            plats = [f"musllinux_{major}_{m}_{self.machine}" for m in range(int(minor), -1, -1)]
        else:
            raise FailedPrecondition(f"unknown C library {self.libc!r} in the base image: cannot pick wheels")
        abi = "cp" + self.python.replace(".", "")
        out = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp", "--abi", abi]
        for p in plats:
            out += ["--platform", p]
        return out


def read_constraints(path: str | os.PathLike[str]) -> list[str]:
    """The ``name==version`` pins of a constraints or lock file (pip's requirements format:
    ``--hash`` options, ``# comments`` and ``-e``/``-r``/``-c`` lines are left out), sorted.
    FailedPrecondition when the file is missing or a requirement in it is not pinned with ``==``."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise FailedPrecondition(f"cannot read the constraints file {path}: {e.strerror}") from None
    pins: dict[str, str] = {}
    for logical in re.sub(r"\\\n", " ", text).splitlines():
        line = logical.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        line = re.sub(r"\s--hash[= ]\S+", "", line).strip()
        try:
            req = Requirement(line)
        except ValueError as e:
            raise FailedPrecondition(f"{path}: cannot read {line!r} as a requirement ({e})") from None
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==" or "*" in spec[0].version:
            raise FailedPrecondition(f"{path}: {line!r} is not pinned (name==version): a constraints file pins")
        pins[canonical_name(req.name)] = spec[0].version
    return [f"{n}=={v}" for n, v in sorted(pins.items())]


@dataclass(frozen=True)
class Wheelhouse:
    """Wheels and requirements staged for an image: ``local`` (this repo and the env) and ``deps``."""

    local: list[Path]
    deps: list[Path]
    requirements: list[str]  # pinned (offline) or as declared (online)


def build_wheelhouse(
    projects: Iterable[Path], target: Target | None, echo: Echo = print, constraints: list[str] | None = None
) -> Wheelhouse:
    """Wheels of the local projects, plus (when ``target`` is given, i.e. offline) every dependency,
    at the versions ``constraints`` pins where it names them (:func:`read_constraints`).

    Local wheels are cached by the hash of their files; dependency sets by the hash of the
    requirements, the constraints and the target, under :func:`cache_dir`.
    """
    local = [_local_wheel(p, echo) for p in projects]
    metas = [_wheel_meta(w) for w in local]
    local_names = {n for n, _ in metas}
    declared = _declared(metas)
    if target is None:
        if constraints:
            raise FailedPrecondition("constraints pin the offline wheelhouse: build with --offline to use them")
        return Wheelhouse(local, [], declared)
    pinned = [c for c in constraints or [] if canonical_name(c.split("==", 1)[0]) not in local_names]
    key_doc: list[object] = [declared, target.__dict__]
    if pinned:  # unpinned sets keep the cache keys they had
        key_doc.append(pinned)
    key = hashlib.sha256(json.dumps(key_doc).encode()).hexdigest()[:24]
    out = cache_dir() / "wheels" / "deps" / key
    if not (out / "requirements.txt").is_file():
        echo(
            f"  downloading dependency wheels for cp{target.python.replace('.', '')} "
            f"{target.libc} {target.libc_version} {target.machine}"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=out.parent))
        try:
            _download(stage, target, local, pinned, echo)
            pins = []
            for w in sorted(stage.glob("*.whl")):
                name, version = _wheel_dist(w.name)
                if name in local_names:
                    w.unlink()
                else:
                    pins.append(f"{name}=={version}")
            leftovers = [p.name for p in stage.iterdir() if p.suffix != ".whl"]
            if leftovers:
                raise Internal(f"pip download left non-wheel files: {leftovers}")
            (stage / "requirements.txt").write_text("\n".join(pins) + "\n")
            try:
                stage.rename(out)
            except OSError:
                shutil.rmtree(stage, ignore_errors=True)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
    else:
        echo(f"  dependency wheels: cached ({key})")
    pins = (out / "requirements.txt").read_text().split()
    return Wheelhouse(local, sorted(out.glob("*.whl")), pins)


def _download(stage: Path, target: Target, local: list[Path], pinned: list[str], echo: Echo) -> None:
    """Every dependency of the local wheels as a wheel in ``stage``, for ``target``, within ``pinned``.

    Unpinned: ``pip download`` of binary wheels for the target's Python (the newest release that
    has one). Pinned, where this host runs the image's Python (version, machine, C library no
    newer than the image's): ``pip wheel`` on the host, which takes each pinned release's wheel
    and builds those published only as source. Pinned for another Python: ``pip download`` of
    binary wheels within the pins (a source-only pin then fails, saying so).
    """
    with tempfile.TemporaryDirectory(prefix="openenv-wheelhouse-") as tmp:
        wheels = [str(w) for w in local]
        if not pinned:
            cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--dest", str(stage)]
            _run([*cmd, *target.pip_args(), *wheels], echo, "downloading dependency wheels")
            return
        cfile = Path(tmp) / "constraints.txt"
        cfile.write_text("\n".join(pinned) + "\n")
        if target.is_host():
            cmd = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "-q", "--wheel-dir", str(stage)]
            _run(
                [*cmd, "--constraint", str(cfile), *wheels],
                echo,
                "gathering the pinned dependency wheels",
                env={"SOURCE_DATE_EPOCH": "315532800", "PIP_CONSTRAINT": str(cfile)},  # source builds too
            )
            return
        cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--dest", str(stage)]
        try:
            _run([*cmd, *target.pip_args(), "--constraint", str(cfile), *wheels], echo, "downloading dependency wheels")
        except Internal as e:
            e.message += (
                f"\nhint: the image's Python ({target.python}, {target.libc} {target.libc_version}, {target.machine}) "
                "is not this host's, so every pinned release needs a binary wheel for it on the index"
            )
            e.args = (e.message,)
            raise
