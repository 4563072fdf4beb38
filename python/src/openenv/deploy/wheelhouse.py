"""Wheelhouses for environment images: wheels built and downloaded on the host.

``build_wheelhouse(projects, target)`` returns wheels of the local projects (this repo's
``openenv`` and an environment), and, for an offline build (``target`` given), every
dependency as a binary wheel for exactly the image's Python (version, machine, C library),
pinned in ``requirements``. Both are cached under :func:`cache_dir`: local wheels by the hash
of their project's files, dependency sets by the hash of the requirements and the target.
"""

from __future__ import annotations

import hashlib
import json
import os
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

__all__ = ["Target", "Wheelhouse", "build_wheelhouse", "cache_dir", "canonical_name", "copy_project"]

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


@dataclass(frozen=True)
class Wheelhouse:
    """Wheels and requirements staged for an image: ``local`` (this repo and the env) and ``deps``."""

    local: list[Path]
    deps: list[Path]
    requirements: list[str]  # pinned (offline) or as declared (online)


def build_wheelhouse(projects: Iterable[Path], target: Target | None, echo: Echo = print) -> Wheelhouse:
    """Wheels of the local projects, plus (when ``target`` is given, i.e. offline) every dependency.

    Local wheels are cached by the hash of their files; dependency sets by the hash of the
    requirements and the target, under :func:`cache_dir`.
    """
    local = [_local_wheel(p, echo) for p in projects]
    metas = [_wheel_meta(w) for w in local]
    local_names = {n for n, _ in metas}
    declared = _declared(metas)
    if target is None:
        return Wheelhouse(local, [], declared)
    key = hashlib.sha256(json.dumps([declared, target.__dict__]).encode()).hexdigest()[:24]
    out = cache_dir() / "wheels" / "deps" / key
    if not (out / "requirements.txt").is_file():
        echo(
            f"  downloading dependency wheels for cp{target.python.replace('.', '')} "
            f"{target.libc} {target.libc_version} {target.machine}"
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=out.parent))
        try:
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--disable-pip-version-check",
                    "-q",
                    "--dest",
                    str(stage),
                    *target.pip_args(),
                    *[str(w) for w in local],
                ],
                echo,
                "downloading dependency wheels",
            )
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
