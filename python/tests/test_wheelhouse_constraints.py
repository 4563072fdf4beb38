"""An offline image's dependency wheels follow a constraints file (``openenv build --offline
--constraint requirements/dev.txt``): the image gets the versions the tests ran with, not the
newest the index holds that day; a pinned release published only as source is built here when
it is pure Python; a lock's hashes and comments are read past; a pin that is not ``==`` is refused.

Hermetic: pip reads a directory of wheels and sdists this test builds (``--no-index``), never a
package index."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from openenv.deploy import wheelhouse
from openenv.deploy.wheelhouse import Target, build_wheelhouse, read_constraints
from openenv.errors import FailedPrecondition


def _project(root: Path, name: str, version: str, deps: list[str] = ()) -> Path:
    src = root / f"{name}-{version}"
    pkg = src / name.replace("-", "_")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"VERSION = {version!r}\n")
    requires = ", ".join(f'"{d}"' for d in deps)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = [{requires}]\n'
    )
    return src


def _build(src: Path, out: Path, kind: str) -> None:
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)]
    if kind == "sdist":
        cmd = [sys.executable, "-c", "import sys, setuptools.build_meta as b; b.build_sdist(sys.argv[1])", str(out)]
        subprocess.run(cmd, cwd=src, check=True, capture_output=True)
        return
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local 'index' (a find-links directory): dep-a 1.0 and 2.0 as wheels, dep-b 1.0 as a
    source distribution only and 1.1 as a wheel; pip reads nothing else (no index, no
    configuration), and the wheelhouse cache is this test's own."""
    links = tmp_path / "links"
    links.mkdir()
    for version in ("1.0", "2.0"):
        _build(_project(tmp_path / "src", "dep-a", version), links, "wheel")
    _build(_project(tmp_path / "src", "dep-b", "1.0"), links, "sdist")
    _build(_project(tmp_path / "src", "dep-b", "1.1"), links, "wheel")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    # The builds use this venv's setuptools ("false" turns isolation off: pip's negated option).
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "false")
    for var in ("PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENENV_CACHE_DIR", str(tmp_path / "cache"))
    app = _project(tmp_path / "src", "app-env", "0.1", ["dep-a>=1", "dep-b>=1"])
    return app


def _host() -> Target:
    """This host's Python as an image's (an image built on the host's own distribution)."""
    libc, version = platform.libc_ver()
    return Target(f"{sys.version_info[0]}.{sys.version_info[1]}", platform.machine(), libc, version)


def _versions(deps: list[Path]) -> dict[str, str]:
    out = {}
    for w in deps:
        name, version = w.name.split("-")[:2]
        out[name] = version
    return out


def test_without_constraints_the_newest_release_with_a_wheel_is_taken(index: Path) -> None:
    wh = build_wheelhouse([index], _host(), echo=lambda m: None)
    assert _versions(wh.deps) == {"dep_a": "2.0", "dep_b": "1.1"}
    assert sorted(wh.requirements) == ["dep-a==2.0", "dep-b==1.1"]


def test_a_lock_pins_the_wheelhouse_and_a_source_only_pin_is_built_here(index: Path, tmp_path: Path) -> None:
    lock = tmp_path / "dev.txt"
    lock.write_text(
        "# a lock as make lock writes it\n"
        "dep-a==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via app-env\n"
        "dep-b==1.0 \\\n    --hash=sha256:" + "1" * 64 + "\n"
        "unrelated==3.0\n"
    )
    pins = read_constraints(lock)
    assert pins == ["dep-a==1.0", "dep-b==1.0", "unrelated==3.0"]
    wh = build_wheelhouse([index], _host(), echo=lambda m: None, constraints=pins)
    assert _versions(wh.deps) == {"dep_a": "1.0", "dep_b": "1.0"}
    assert sorted(wh.requirements) == ["dep-a==1.0", "dep-b==1.0"]
    # dep-b 1.0 exists only as a source distribution: its wheel was built here.
    built = next(w for w in wh.deps if w.name.startswith("dep_b"))
    assert built.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(built) as z:
        assert "dep_b/__init__.py" in z.namelist()
    # Another set of pins is another cache entry, not the first one's wheels.
    again = build_wheelhouse([index], _host(), echo=lambda m: None, constraints=["dep-a==2.0", "dep-b==1.1"])
    assert _versions(again.deps) == {"dep_a": "2.0", "dep_b": "1.1"}


def test_a_constraint_that_is_not_a_pin_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("dep-a>=1.0\n")
    with pytest.raises(FailedPrecondition, match="not pinned"):
        read_constraints(f)
    with pytest.raises(FailedPrecondition, match="cannot read the constraints file"):
        read_constraints(tmp_path / "missing.txt")


def test_the_repository_lock_reads_as_constraints() -> None:
    """requirements/dev.txt, as CI passes it to every image build, pins every locked package."""
    lock = Path(__file__).resolve().parents[2] / "requirements" / "dev.txt"
    pins = dict(p.split("==") for p in read_constraints(lock))
    assert pins["protobuf"] and pins["grpcio"] and pins["mypy"]
    assert "protoenv" not in pins  # the projects themselves are not in the lock
    assert wheelhouse.canonical_name("Typing_Extensions") in pins
