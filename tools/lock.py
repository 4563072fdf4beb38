#!/usr/bin/env python3
"""The development environment's lock: ``requirements/dev.txt``, resolved from ``requirements/dev.in``.

Why: the development toolchain and every test dependency were pinned by lower bounds only
(``mypy>=1.13``), so a clean machine installed the releases of its day, and a CI that passed on
one day failed on the next without a line of the project changing (a new types-protobuf turned
four mypy errors on). Now ``make venv`` (and so ``make test``, ``make demo`` and ``.ci/run``)
installs exactly what the lock says, hashes checked, and only ``make lock`` changes it: a newer
toolchain is one reviewed commit, never an accident. The published distributions keep their
lower bounds for their users.

The format is pip-tools' compiled requirements (``name==version`` with ``--hash`` lines and
``# via`` annotations), written by uv (``uv pip compile``) and installable by pip as well. The
projects of this repository are not in it (they are installed editable, without dependencies,
from ``dev.in``'s ``-e`` lines). A header records what the lock was resolved for: the Python
(``major.minor``), the platform, and a digest of every input (``dev.in`` and the dependency
tables of each project's ``pyproject.toml``).

Commands (standard library only; uv and pip do the work):

``python tools/lock.py compile [--upgrade] [--upgrade-package NAME ...]``
    ``make lock`` (``--upgrade``): re-resolve against today's releases; ``make lock UPGRADE=0``:
    keep every pin the inputs still allow and resolve only what changed (a new dependency).
    Also writes the locks of the separate interpreters the tests install (``requirements/upstream/``:
    OpenEnv's releases, verifiers with our core) and the npm lock of the agent CLIs (``tools/harness-tools/``).
``python tools/lock.py bootstrap``
    pip, setuptools, wheel and uv from the lock into this interpreter's venv (pip, hashes checked).
``python tools/lock.py install [--demo -e PROJECT[EXTRAS] ...]``
    exactly the lock (``uv pip sync``: what is not in it is removed), then every project of
    ``dev.in`` editable; with ``--demo``, only the projects given, their dependencies at the
    lock's versions. Refuses, saying why, when the lock is stale (the inputs changed since
    ``make lock``) or was resolved for another Python.
``python tools/lock.py check``
    the staleness check alone (exit 1 with the reason).
``python tools/lock.py constraints``
    prints the lock's pins without hashes (``name==version``), for ``--constraint`` files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pip_install  # a sibling script: pip's configuration as uv options

ROOT = Path(__file__).resolve().parents[1]
IN = ROOT / "requirements" / "dev.in"
LOCK = ROOT / "requirements" / "dev.txt"
UPSTREAM_DIR = ROOT / "requirements" / "upstream"
HARNESS_TOOLS = ROOT / "tools" / "harness-tools"
#: The Python version the locks are resolved for: the oldest that installs them. The environment
#: images install from requirements/dev.txt on Debian bookworm's python3, 3.11.2, and a package
#: whose Requires-Python a newer patch (3.11.7, this machine's) meets would fail there
#: (soupsieve 4.1.4: '>=3.11.5'). The development venv's 3.11.x installs whatever 3.11.2 does.
RESOLVE_PYTHON = "3.11.2"
#: Installed first, with pip, from the lock: the tools that install the rest.
BOOTSTRAP = ("pip", "setuptools", "wheel", "uv")
#: pip settings of this machine that neither shape a lock nor apply to installing one: a machine's
#: constraint file caps what lies on its disk (torch), dev.in pins torch itself, and a lock pins
#: every package exactly (uv's --require-hashes refuses a constraint that is not ``==``).
_MACHINE_ONLY = {"constraint"}
_HEADER = "# lock:"


class LockError(Exception):
    """The lock cannot be used as it stands; the message says what to do."""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _rel(path: Path) -> str:
    """A path as messages show it: relative to the repository when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# -- reading dev.in and the projects ------------------------------------------------------------


@dataclass(frozen=True)
class Editable:
    path: str  # as written, relative to the repository: "./python"
    extras: str  # "[dev]" or ""

    @property
    def project(self) -> Path:
        return ROOT / self.path

    def name(self) -> str:
        return canonical(tomllib.loads((self.project / "pyproject.toml").read_text())["project"]["name"])


def read_in(path: Path | None = None) -> tuple[list[str], list[Editable]]:
    """(plain requirement lines, editable projects) of a .in file (default: dev.in)."""
    path = path or IN
    plain, editables = [], []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            m = re.fullmatch(r"-e\s+(\S+?)(\[[^\]]*\])?", line)
            if m is None:
                raise LockError(f"{_rel(path)}: cannot read {raw!r}")
            editables.append(Editable(m.group(1), m.group(2) or ""))
        else:
            plain.append(line)
    return plain, editables


def projects() -> list[Path]:
    """Every project of the repository that the development environment must hold: the runtime,
    the certifier, the catalog and every environment (the Makefile's PROJECTS)."""
    found = [ROOT / "python", ROOT / "conformance", ROOT / "catalog"]
    found += sorted(p.parent for p in (ROOT / "envs").glob("*/pyproject.toml"))
    return [p for p in found if (p / "pyproject.toml").is_file()]


def inputs_digest(in_path: Path | None = None) -> str:
    """A digest of everything the resolution depends on: dev.in's lines and, for each project it
    names, the dependency tables of its pyproject.toml (not its comments or other tables)."""
    plain, editables = read_in(in_path)
    doc: dict[str, object] = {"python": RESOLVE_PYTHON, "requirements": plain, "editables": []}
    for e in editables:
        table = tomllib.loads((e.project / "pyproject.toml").read_text()).get("project", {})
        doc["editables"].append(  # type: ignore[union-attr]
            {
                "path": e.path,
                "extras": e.extras,
                "name": table.get("name"),
                "requires-python": table.get("requires-python"),
                "dependencies": table.get("dependencies", []),
                "optional-dependencies": table.get("optional-dependencies", {}),
            }
        )
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def target() -> str:
    """What a lock is resolved for: this interpreter's Python and platform."""
    return f"cpython-{sys.version_info[0]}.{sys.version_info[1]}-{sys.platform}-{platform.machine()}"


# -- reading a lock -----------------------------------------------------------------------------


@dataclass
class Lock:
    header: dict[str, str]
    pins: dict[str, str]  # canonical name -> version
    blocks: dict[str, str]  # canonical name -> the block of lines (pin, hashes, annotations)


def read_lock(path: Path | None = None) -> Lock:
    path = path or LOCK
    if not path.is_file():
        raise LockError(f"{_rel(path)} is missing: run `make lock`")
    header: dict[str, str] = {}
    pins: dict[str, str] = {}
    blocks: dict[str, str] = {}
    current = ""
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith(_HEADER):
            key, _, value = line[len(_HEADER) :].strip().partition(" ")
            header[key] = value.strip()
            continue
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?:\s|$)", line)
        if m:
            current = canonical(m.group(1))
            pins[current] = m.group(2)
            blocks[current] = ""
        if current and (m or line.startswith("    ")):
            blocks[current] += line
        elif not line.startswith("    "):
            current = ""
    return Lock(header, pins, blocks)


def staleness(lock: Lock, in_path: Path | None = None) -> str | None:
    """Why the lock cannot be installed here, or None."""
    in_path = in_path or IN
    rel = _rel(in_path)
    if lock.header.get("inputs") != inputs_digest(in_path):
        return (
            f"the lock is stale: {rel} or a project's dependencies (pyproject.toml) changed since it was "
            "resolved. Run `make lock UPGRADE=0` (keeps every other pin) and commit the lock with the change"
        )
    if lock.header.get("target") != target():
        return (
            f"the lock was resolved for {lock.header.get('target')}, this interpreter is {target()}: use that "
            "Python (make PYTHON=python3.11 ...), or resolve a lock for yours with `make lock` (not to be committed)"
        )
    return None


def check_projects_listed(in_path: Path | None = None) -> list[str]:
    """Projects of the repository that dev.in does not install (a new environment, say)."""
    _, editables = read_in(in_path)
    listed = {e.project.resolve() for e in editables}
    return [str(p.relative_to(ROOT)) for p in projects() if p.resolve() not in listed]


# -- installing ---------------------------------------------------------------------------------


def _uv_flags(python: str) -> tuple[str, list[str], dict[str, str]] | None:
    """(uv, flags, environment) translating pip's configuration, or None (then pip installs)."""
    if os.environ.get("OPENENV_PIP") == "pip":
        return None
    uv = pip_install._uv()
    if uv is None:
        return None
    settings = {k: v for k, v in pip_install.pip_settings(python).items() if k not in _MACHINE_ONLY}
    try:
        flags, env = pip_install.uv_options(settings)
    except pip_install.Untranslatable as e:
        print(f"pip's configuration sets {e.args[0]!r}, which uv has no equivalent for: pip installs", flush=True)
        return None
    return uv, flags, {**os.environ, **env}


def _run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    print("+ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    if rc != 0:
        raise LockError(f"`{cmd[0]} {' '.join(cmd[1:3])} ...` failed (exit {rc})")


def _write_subset(lock: Lock, names: list[str], dest: Path, hashes: bool = True) -> Path:
    lines = []
    for n in names:
        if n not in lock.pins:
            raise LockError(f"{n} is not in {_rel(LOCK)}: run `make lock`")
        lines.append(lock.blocks[n] if hashes else f"{n}=={lock.pins[n]}\n")
    dest.write_text("".join(lines))
    return dest


def constraints_text(lock: Lock) -> str:
    """The lock's pins as a constraints file (no hashes: pip refuses hashes in constraints)."""
    return "".join(f"{n}=={v}\n" for n, v in sorted(lock.pins.items()))


def bootstrap(python: str) -> None:
    lock = read_lock()
    with tempfile.TemporaryDirectory(prefix="openenv-lock-") as tmp:
        req = _write_subset(lock, list(BOOTSTRAP), Path(tmp) / "bootstrap.txt")
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-deps",
                "--require-hashes",
                "-r",
                str(req),
            ]
        )


def install(python: str, demo: list[str] | None) -> None:
    lock = read_lock()
    why = staleness(lock)
    if why:
        raise LockError(why)
    _, editables = read_in()
    uv = _uv_flags(python)
    with tempfile.TemporaryDirectory(prefix="openenv-lock-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(constraints_text(lock))
        if demo is not None:
            # Only the projects asked for, resolved within the lock's pins (hashes checked by uv).
            args = [a for p in demo for a in ("-e", p)]
            if uv:
                exe, flags, env = uv
                _run(
                    [exe, "pip", "install", "--python", python, *flags, "-c", str(LOCK), "-b", str(LOCK), *args],
                    env,
                )
            else:
                env = {**os.environ, "PIP_CONSTRAINT": str(constraints)}  # builds too
                _run(
                    [python, "-m", "pip", "install", "--disable-pip-version-check", "-c", str(constraints), *args], env
                )
            return
        # Exactly the lock (what is not in it is removed), then every project editable, no deps.
        local = [a for e in editables for a in ("-e", e.path)]
        if uv:
            exe, flags, env = uv
            _run([exe, "pip", "sync", "--python", python, *flags, "--require-hashes", "-b", str(LOCK), str(LOCK)], env)
            _run([exe, "pip", "install", "--python", python, *flags, "--no-deps", "-b", str(LOCK), *local], env)
        else:
            env = {**os.environ, "PIP_CONSTRAINT": str(constraints)}
            pip = [python, "-m", "pip", "install", "--disable-pip-version-check"]
            _run([*pip, "--require-hashes", "-r", str(LOCK)], env)
            _run([*pip, "--no-deps", *local], env)


# -- compiling ----------------------------------------------------------------------------------


def _compile(
    uv: tuple[str, list[str], dict[str, str]],
    python: str,
    in_path: Path,
    out: Path,
    no_emit: list[str],
    upgrade: bool,
    packages: list[str],
) -> None:
    exe, flags, env = uv
    with tempfile.TemporaryDirectory(prefix="openenv-lock-") as tmp:
        body = Path(tmp) / out.name
        if out.is_file() and not upgrade:
            shutil.copy(out, body)  # uv keeps the pins of an existing output where it can
        cmd = [exe, "pip", "compile", "--python", python, "--python-version", RESOLVE_PYTHON, *flags]
        cmd += ["--generate-hashes", "--no-header"]
        cmd += [a for n in no_emit for a in ("--no-emit-package", n)]
        cmd += ["--upgrade"] if upgrade else [a for p in packages for a in ("--upgrade-package", p)]
        cmd += [str(in_path.relative_to(ROOT)), "-o", str(body)]
        _run(cmd, env)
        header = (
            "# Every package pinned with its hashes. Do not edit: `make lock` resolves it from\n"
            f'# {in_path.relative_to(ROOT)} (tools/lock.py; docs/testing.md, "One lock").\n'
            f"{_HEADER} target {target()}\n"
            f"{_HEADER} inputs {inputs_digest(in_path)}\n"
        )
        out.write_text(header + body.read_text())
    print(f"wrote {out.relative_to(ROOT)}", flush=True)


def compile_all(python: str, upgrade: bool, packages: list[str]) -> None:
    missing = check_projects_listed()
    if missing:
        raise LockError(f"{_rel(IN)} does not install {', '.join(missing)}: add an `-e ./PATH` line")
    uv = _uv_flags(python)
    if uv is None:
        raise LockError("`make lock` needs uv (make venv installs it) and a pip configuration uv can follow")
    _, editables = read_in()
    _compile(uv, python, IN, LOCK, [e.name() for e in editables], upgrade, packages)
    for in_path in sorted(UPSTREAM_DIR.glob("*.in")):
        # An upstream .in may name this repository's projects (``-e ./python``: verifiers' venv holds
        # our core): their dependencies are locked, the projects themselves installed from the tree.
        _, local = read_in(in_path)
        _compile(uv, python, in_path, in_path.with_suffix(".txt"), [e.name() for e in local], upgrade, packages)
    npm = shutil.which("npm")
    if npm is None:
        print("npm not found: tools/harness-tools/package-lock.json left as it is", flush=True)
        return
    # A real install in a scratch directory (a lock-only resolution leaves out platform packages
    # this machine installs), of package.json alone when upgrading, else beside the current lock.
    with tempfile.TemporaryDirectory(prefix="openenv-npm-lock-") as tmp:
        names = ["package.json"] if upgrade else ["package.json", "package-lock.json"]
        for name in names:
            if (HARNESS_TOOLS / name).is_file():
                shutil.copy(HARNESS_TOOLS / name, Path(tmp) / name)
        _run([npm, "install", "--prefix", tmp, "--omit-lockfile-registry-resolved", "--no-audit", "--no-fund"])
        shutil.copy(Path(tmp) / "package-lock.json", HARNESS_TOOLS / "package-lock.json")
    print(f"wrote {(HARNESS_TOOLS / 'package-lock.json').relative_to(ROOT)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="resolve the locks (make lock)")
    c.add_argument("--upgrade", action="store_true", help="every package to its newest release the inputs allow")
    c.add_argument("--upgrade-package", action="append", default=[], metavar="NAME", help="this package only")
    sub.add_parser("bootstrap", help="pip, setuptools, wheel and uv from the lock")
    i = sub.add_parser("install", help="exactly the lock, then the projects editable")
    i.add_argument("--demo", action="store_true", help="only the projects given with -e, within the lock's pins")
    i.add_argument("-e", dest="editables", action="append", default=[], metavar="PROJECT", help="with --demo")
    sub.add_parser("check", help="is the lock fresh for the inputs and this Python?")
    sub.add_parser("constraints", help="print the lock's pins without hashes")
    ns = ap.parse_args(argv)
    python = sys.executable
    try:
        if ns.cmd == "compile":
            compile_all(python, ns.upgrade, ns.upgrade_package)
        elif ns.cmd == "bootstrap":
            bootstrap(python)
        elif ns.cmd == "install":
            if ns.editables and not ns.demo:
                ap.error("-e PROJECT goes with --demo (without it every project of dev.in is installed)")
            install(python, ns.editables if ns.demo else None)
        elif ns.cmd == "check":
            missing = check_projects_listed()
            if missing:
                raise LockError(f"{_rel(IN)} does not install {', '.join(missing)}: add them, then `make lock`")
            why = staleness(read_lock())
            if why:
                raise LockError(why)
            print(f"{_rel(LOCK)} is fresh for its inputs and {target()}")
        elif ns.cmd == "constraints":
            sys.stdout.write(constraints_text(read_lock()))
    except LockError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
