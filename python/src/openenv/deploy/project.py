"""Environment projects: a directory with ``pyproject.toml`` (``[project]`` and ``[tool.openenv]``)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from openenv.deploy.wheelhouse import canonical_name
from openenv.errors import FailedPrecondition, NotFound

__all__ = ["DISTRIBUTION", "EnvProject", "runtime_source"]

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
    """The source tree of the running ``openenv`` package (its directory with pyproject.toml)."""
    candidates = [Path(explicit)] if explicit else []
    if os.environ.get("OPENENV_SOURCE"):
        candidates.append(Path(os.environ["OPENENV_SOURCE"]))
    candidates.append(Path(__file__).resolve().parents[3])  # python/src/openenv/deploy/project.py -> python/
    for c in candidates:
        py = c / "pyproject.toml"
        if py.is_file() and tomllib.loads(py.read_text()).get("project", {}).get("name") == DISTRIBUTION:
            return c.resolve()
    raise FailedPrecondition(
        f"cannot find the source tree of the {DISTRIBUTION} distribution (needed to put it "
        "in the image): pass --openenv-source DIR or set OPENENV_SOURCE"
    )
