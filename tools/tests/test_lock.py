"""The development lock (requirements/dev.txt, tools/lock.py): what `make venv` installs is exactly
what the lock says, the lock answers every requirement the projects declare, a change to those
requirements makes it stale (and `make venv` then refuses it, naming `make lock`), and nothing
of the day's package index leaks in.

Offline: the lock and the projects' pyproject.toml files are read, never an index."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import lock  # noqa: E402  (tools/ is not a package)


def test_the_lock_is_fresh_for_every_project_and_this_python() -> None:
    """dev.in names every project of the repository, and the lock was resolved from exactly
    today's dev.in and pyproject.toml dependency tables, for this Python: else `make lock UPGRADE=0`."""
    assert lock.check_projects_listed() == []
    assert lock.staleness(lock.read_lock()) is None


def _declared(project: Path, extras: set[str], seen: set[tuple[str, str]]) -> list[Requirement]:
    """The requirements a project asks of others with these extras, following its own extras
    (``protoenv[dev]`` -> ``protoenv[all]`` -> ...) and the other local projects it names."""
    table = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    name = canonicalize_name(table["name"])
    out: list[Requirement] = []
    env = default_environment()
    for extra in ("", *sorted(extras)):
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        reqs = table.get("dependencies", []) if not extra else table.get("optional-dependencies", {}).get(extra, [])
        for raw in reqs:
            req = Requirement(raw)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
                continue
            local = _LOCAL.get(canonicalize_name(req.name))
            if local is not None:
                out += _declared(local, set(req.extras), seen)
            else:
                out.append(req)
    return out


_LOCAL = {
    canonicalize_name(tomllib.loads((p / "pyproject.toml").read_text())["project"]["name"]): p for p in lock.projects()
}


def test_every_requirement_the_projects_declare_is_met_by_a_pin_of_the_lock() -> None:
    """For each project of dev.in with its extras, every requirement on a package outside the
    repository has a pin in the lock that satisfies its version range (and its extras' packages
    are pinned too): an edit of a pyproject.toml without `make lock` fails here."""
    pins = {n: Version(v) for n, v in lock.read_lock().pins.items()}
    plain, editables = lock.read_in()
    wanted = [Requirement(r) for r in plain]
    seen: set[tuple[str, str]] = set()
    for e in editables:
        wanted += _declared(e.project, {x.strip() for x in e.extras.strip("[]").split(",") if x.strip()}, seen)
    assert len(wanted) > 50
    unmet = []
    for req in wanted:
        name = canonicalize_name(req.name)
        if name not in pins or not req.specifier.contains(pins[name], prereleases=True):
            unmet.append(f"{req} (lock: {pins.get(name, 'absent')})")
    assert unmet == []
    assert lock.BOOTSTRAP and all(n in pins for n in lock.BOOTSTRAP)
    assert str(pins["torch"]).endswith("+cpu"), "dev.in's torch must resolve to the CPU build"


def test_the_installed_environment_is_the_lock() -> None:
    """Every locked package is installed at exactly its pinned version (make venv syncs to the
    lock; a package of the day's index would differ here)."""
    wrong = []
    for name, version in lock.read_lock().pins.items():
        try:
            got = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed (lock {version})")
            continue
        if Version(got) != Version(version):
            wrong.append(f"{name}: {got} installed, lock {version}")
    assert wrong == []


def test_every_locked_package_installs_on_the_images_python() -> None:
    """The images install the lock on Debian bookworm's Python (3.11.2, older than this
    machine's): every locked package's Requires-Python admits it (soupsieve 4.1.4's
    '>=3.11.5' failed the browser_env image once the lock was resolved for 3.11.7)."""
    from packaging.specifiers import SpecifierSet

    refused = []
    for name in lock.read_lock().pins:
        requires = importlib.metadata.metadata(name).get("Requires-Python")
        if requires and not SpecifierSet(requires).contains(lock.RESOLVE_PYTHON, prereleases=True):
            refused.append(f"{name}: Requires-Python {requires}")
    assert refused == []


def _tmp_project(root: Path, deps: list[str]) -> Path:
    proj = root / "proj"
    proj.mkdir(exist_ok=True)
    (proj / "pyproject.toml").write_text(f'[project]\nname = "proj"\nversion = "1"\ndependencies = {deps!r}\n')
    return proj


def test_a_changed_requirement_makes_the_lock_stale(tmp_path: Path) -> None:
    """The inputs digest covers dev.in's lines and each project's dependency tables, not comments
    or unrelated tables: a new dependency, a changed range or a new line makes the lock stale."""
    proj = _tmp_project(tmp_path, ["numpy>=1"])
    dev_in = tmp_path / "dev.in"
    dev_in.write_text(f"# comment\npip\n-e {proj}[x]\n")
    first = lock.inputs_digest(dev_in)
    (proj / "pyproject.toml").write_text((proj / "pyproject.toml").read_text() + "\n# a comment\n[tool.x]\ny = 1\n")
    assert lock.inputs_digest(dev_in) == first
    _tmp_project(tmp_path, ["numpy>=2"])
    assert lock.inputs_digest(dev_in) != first
    second = lock.inputs_digest(dev_in)
    dev_in.write_text(f"pip\nuv\n-e {proj}[x]\n")
    assert lock.inputs_digest(dev_in) != second


def test_make_venv_refuses_a_stale_lock_and_says_what_to_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """`tools/lock.py install` (make venv) stops before installing anything when the lock's inputs
    digest is not today's, naming `make lock`; and when it was resolved for another Python."""
    stale = tmp_path / "dev.txt"
    text = lock.LOCK.read_text()
    digest = lock.read_lock().header["inputs"]
    stale.write_text(text.replace(digest, "0" * 64, 1))
    monkeypatch.setattr(lock, "LOCK", stale)
    assert lock.main(["install"]) == 1
    err = capsys.readouterr().err
    assert "the lock is stale" in err and "make lock UPGRADE=0" in err
    stale.write_text(text.replace(f"target {lock.target()}", "target cpython-3.99-linux-x86_64", 1))
    assert lock.main(["install"]) == 1
    assert "resolved for cpython-3.99" in capsys.readouterr().err


def test_a_missing_lock_names_make_lock(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(lock, "LOCK", tmp_path / "nowhere.txt")
    assert lock.main(["check"]) == 1
    assert "run `make lock`" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "requirements").rglob("*.txt")), ids=lambda p: p.name)
def test_every_lock_pins_each_package_with_hashes_and_names_no_index(path: Path) -> None:
    """Each lock file pins every package (``==``) with at least one sha256, is fresh for its .in
    file and this Python, and holds no address of a package index or local path of the machine."""
    text = path.read_text()
    parsed = lock.read_lock(path)
    assert parsed.pins and lock.staleness(parsed, path.with_suffix(".in")) is None
    for name, block in parsed.blocks.items():
        assert "--hash=sha256:" in block, name
    for marker in ("://", "--index-url", "--find-links", "/opt/", "/tmp/", "/etc/"):
        assert marker not in text, marker
    assert not any(line.startswith("-e ") for line in text.splitlines())
