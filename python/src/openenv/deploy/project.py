"""Environment projects: a directory with ``pyproject.toml`` (``[project]`` and ``[tool.openenv]``)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import tomllib
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from openenv.deploy.wheelhouse import cache_dir, canonical_name
from openenv.errors import FailedPrecondition, NotFound

__all__ = ["DISTRIBUTION", "EnvProject", "installed_wheel", "runtime_source"]

DISTRIBUTION = "protoenv"
"""The distribution that provides the ``openenv`` import package (not the index's ``openenv``)."""


@dataclass(frozen=True)
class EnvProject:
    """An environment directory: its ``pyproject.toml`` ``[project]`` and ``[tool.openenv]`` tables."""

    path: Path
    name: str  # canonical distribution name, e.g. "echo-env"
    version: str
    factory: str  # "module:Class", from [tool.openenv] factory
    description: str = ""
    sandbox: bool = False  # [tool.openenv] sandbox: it runs submitted code in openenv.sandbox

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
                f'{py}: [tool.openenv] factory = "module:Class" is required (what the image serves)'
            )
        sandbox = data.get("tool", {}).get("openenv", {}).get("sandbox", False)
        if not isinstance(sandbox, bool):
            raise FailedPrecondition(f"{py}: [tool.openenv] sandbox must be true or false")
        return cls(
            p, canonical_name(project["name"]), project["version"], factory, project.get("description", ""), sandbox
        )

    @property
    def image_tag(self) -> str:
        """The default tag, ``openenv-<name>:<version>``."""
        return f"openenv-{self.name}:{self.version}"


def runtime_source(explicit: str | os.PathLike[str] | None = None) -> Path:
    """What puts the running ``openenv`` in an image: its source tree (the directory with
    pyproject.toml), or, when no source tree is at hand, a wheel of the installed distribution.

    Looked for in order: ``explicit`` (``--openenv-source``), ``$OPENENV_SOURCE``, the tree this
    module runs from (a checkout or an editable install), the directory a non-editable
    ``pip install DIR`` was made from (PEP 610's ``direct_url.json``), and else the installed
    files themselves, packed back into a wheel (:func:`installed_wheel`): ``openenv build``
    works after any install, with or without the repository.
    """
    candidates = [Path(explicit)] if explicit else []
    if os.environ.get("OPENENV_SOURCE"):
        candidates.append(Path(os.environ["OPENENV_SOURCE"]))
    candidates.append(Path(__file__).resolve().parents[3])  # python/src/openenv/deploy/project.py -> python/
    installed_from = _installed_from()
    if installed_from is not None:
        candidates.append(installed_from)
    for c in candidates:
        if _is_runtime_tree(c):
            return c.resolve()
    if explicit:
        raise FailedPrecondition(f"--openenv-source {explicit} is not the source tree of {DISTRIBUTION}")
    return installed_wheel()


def _is_runtime_tree(path: Path) -> bool:
    py = path / "pyproject.toml"
    try:
        return py.is_file() and tomllib.loads(py.read_text()).get("project", {}).get("name") == DISTRIBUTION
    except (OSError, tomllib.TOMLDecodeError):
        return False


def _installed_from() -> Path | None:
    """The local directory the installed distribution was built from (``pip install DIR``), if
    its installer recorded one (``direct_url.json``, PEP 610)."""
    try:
        text = importlib.metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
        url = json.loads(text or "{}").get("url", "")
    except (importlib.metadata.PackageNotFoundError, ValueError, AttributeError):
        return None
    if not isinstance(url, str) or not url.startswith("file://"):
        return None
    return Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))


# Files of an installed distribution that are the installer's, not the wheel's.
_INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def installed_wheel() -> Path:
    """A wheel of the installed ``protoenv``, packed from the files its RECORD lists (cached
    under :func:`openenv.deploy.wheelhouse.cache_dir` by their hash): what an image installs
    when no source tree of it is at hand (a plain ``pip install``, the source since removed).

    Raises:
        FailedPrecondition: the distribution is not installed, or is an editable install whose
        source tree is gone.
    """
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise FailedPrecondition(
            f"{DISTRIBUTION} is not installed and its source tree was not found (needed to put it in the "
            "image): pass --openenv-source DIR or set OPENENV_SOURCE"
        ) from None
    files: list[tuple[str, Path]] = []
    for f in dist.files or []:
        name = f.as_posix()
        parts = f.parts
        if name.startswith("..") or "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
            continue
        if parts[0].endswith(".dist-info") and parts[-1] in _INSTALLER_FILES:
            continue
        if parts[0].startswith("__editable__"):
            raise FailedPrecondition(
                f"{DISTRIBUTION} is an editable install whose source tree is gone: reinstall it, or pass "
                "--openenv-source DIR"
            )
        files.append((name, Path(str(dist.locate_file(f)))))
    if not any(n.startswith("openenv/") for n, _ in files):
        raise FailedPrecondition(f"the installed {DISTRIBUTION} lists no openenv/ files: reinstall it")
    digest = hashlib.sha256()
    for name, path in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    version = dist.version
    out = cache_dir() / "wheels" / "installed" / f"{DISTRIBUTION}-{version}-{digest.hexdigest()[:24]}"
    wheel = out / f"{DISTRIBUTION}-{version}-py3-none-any.whl"
    if wheel.is_file():
        return wheel
    out.mkdir(parents=True, exist_ok=True)
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    record: list[str] = []
    tmp = wheel.with_name(f".{wheel.name}.{os.getpid()}")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path in sorted(files):
            data = path.read_bytes()
            arcname = name if not name.split("/")[0].endswith(".dist-info") else f"{dist_info}/{name.split('/', 1)[1]}"
            z.writestr(zipfile.ZipInfo(arcname, (1980, 1, 1, 0, 0, 0)), data)
            h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={h},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        z.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", (1980, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    os.replace(tmp, wheel)
    return wheel
