"""``openenv init NAME``: scaffold a new environment that builds and certifies as it stands.

The new directory holds the ``.proto`` of its action, observation and state (with the
generated Python bindings), the server (an :class:`openenv.Environment`), a typed client,
tests over a real gRPC server, a README and a ``pyproject.toml`` whose ``[tool.openenv]
factory`` names what the image serves. No Dockerfile: ``openenv build`` renders the packaged
template (the image contract of docs/images.md); lines of the environment's own go in an
``image.Dockerfile`` beside it.

Two templates: ``messages`` (the default; ``openenv/deploy/templates/env``) is the above;
``tools`` (``openenv/deploy/templates/tools``) is a tool environment (``@openenv.tool``
methods, MCP-shaped calls, no ``.proto`` and so nothing to generate). Both declare a ``test``
extra (pytest) for their own tests.

The templates are package data; placeholders are ``{{name}}``
(the Python package, snake case), ``{{class_name}}``, ``{{dist_name}}``, ``{{title}}``,
``{{image_tag}}`` and ``{{openenv_requirement}}``. Generating the bindings needs
grpcio-tools (``pip install grpcio-tools``), which is checked first.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import importlib.util
import keyword
import re
from pathlib import Path

from openenv.deploy.project import DISTRIBUTION
from openenv.errors import FailedPrecondition, Internal, InvalidArgument

__all__ = ["TEMPLATES", "next_steps", "scaffold"]

_TEMPLATES = Path(__file__).parent / "templates"
# template -> (its directory under templates/, {template path -> output path}); {{name}} is
# substituted in both
_LAYOUTS: dict[str, tuple[str, dict[str, str]]] = {
    "messages": (
        "env",
        {
            "pyproject.toml.tmpl": "pyproject.toml",
            "README.md.tmpl": "README.md",
            "proto/env.proto.tmpl": "proto/{{name}}/v1/{{name}}.proto",
            "src/__init__.py.tmpl": "src/{{name}}/__init__.py",
            "src/server.py.tmpl": "src/{{name}}/server.py",
            "src/client.py.tmpl": "src/{{name}}/client.py",
            "tests/test_env.py.tmpl": "tests/test_{{name}}.py",
        },
    ),
    "tools": (
        "tools",
        {
            "pyproject.toml.tmpl": "pyproject.toml",
            "README.md.tmpl": "README.md",
            "src/__init__.py.tmpl": "src/{{name}}/__init__.py",
            "src/server.py.tmpl": "src/{{name}}/server.py",
            "tests/test_env.py.tmpl": "tests/test_{{name}}.py",
        },
    ),
}
TEMPLATES = tuple(_LAYOUTS)
"""The templates of ``openenv init --template``: ``messages`` (typed protobuf actions and
observations) and ``tools`` (a tool environment)."""


MAX_NAME_CHARS = 64
"""Longest environment name: it becomes a directory, a module, a class, an image tag and file
names such as ``tests/test_<name>.py`` (file systems cap a name at 255 bytes)."""


def _names(raw: str) -> dict[str, str]:
    name = raw.strip().replace("-", "_").lower()
    if (
        not re.fullmatch(r"[a-z][a-z0-9_]*", name, flags=re.ASCII)
        or len(name) > MAX_NAME_CHARS
        or keyword.iskeyword(name)
        or name.endswith("_")
    ):
        shown = raw if len(raw) <= 80 else f"{raw[:80]}... ({len(raw)} characters)"
        raise InvalidArgument(
            f"{shown!r} is not a usable environment name: use at most {MAX_NAME_CHARS} lowercase letters, "
            "digits and underscores, starting with a letter (e.g. my_env)"
        )
    class_name = "".join(part.capitalize() for part in name.split("_") if part)
    dist_name = name.replace("_", "-")
    major, minor = (int(x) for x in importlib.metadata.version(DISTRIBUTION).split(".")[:2])
    return {
        "name": name,
        "class_name": class_name,
        "dist_name": dist_name,
        "title": " ".join(part.capitalize() for part in name.split("_") if part),
        "image_tag": f"openenv-{dist_name}:0.1.0",
        "openenv_requirement": f"{DISTRIBUTION}[http]>={major}.{minor},<{major}.{minor + 1}",
    }


def _render(text: str, names: dict[str, str]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: names[m.group(1)], text)


def scaffold(name: str, parent: str | Path = ".", *, force: bool = False, template: str = "messages") -> Path:
    """Create ``parent/name`` from ``template`` (:data:`TEMPLATES`) and, for ``messages``,
    generate its bindings; return its path.

    Raises:
        InvalidArgument: unusable name or unknown template. FailedPrecondition: the directory
        exists and is not empty, a module of that name is already importable (unless
        ``force``), or grpcio-tools is missing (``messages``). Internal: protoc failed.
    """
    if template not in _LAYOUTS:
        raise InvalidArgument(f"unknown template {template!r}: use one of {', '.join(TEMPLATES)}")
    names = _names(name)
    root = Path(parent).resolve() / names["name"]
    if root.exists() and any(root.iterdir()):
        raise FailedPrecondition(f"{root} exists and is not empty")
    if not force and importlib.util.find_spec(names["name"]) is not None:
        raise FailedPrecondition(
            f"a module named {names['name']!r} is already importable here; pick another name (or --force)"
        )
    directory, layout = _LAYOUTS[template]
    if template == "messages":
        try:
            from grpc_tools import protoc
        except ImportError:
            raise FailedPrecondition(
                "openenv init generates protobuf bindings with grpcio-tools: pip install grpcio-tools "
                "(or --template tools: a tool environment, nothing to generate)"
            ) from None
    for src, dst in layout.items():
        out = root / _render(dst, names)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_render((_TEMPLATES / directory / src).read_text(), names))
    pkg = root / "src" / names["name"]
    (pkg / "py.typed").write_text("")
    if template != "messages":
        return root
    (pkg / "v1").mkdir(exist_ok=True)
    (pkg / "v1" / "__init__.py").write_text("")
    wkt = importlib.resources.files("grpc_tools") / "_proto"
    proto = f"{names['name']}/v1/{names['name']}.proto"
    rc = protoc.main(
        [
            "protoc",
            f"-I{root / 'proto'}",
            f"-I{wkt}",
            f"--python_out={root / 'src'}",
            f"--pyi_out={root / 'src'}",
            proto,
        ]
    )
    if rc != 0:
        raise Internal(f"protoc failed ({rc}) on {root / 'proto' / proto}")
    return root


def next_steps(root: Path, name: str, cwd: Path | None = None) -> list[str]:
    """The commands that take a new environment from its directory to a certified image, each
    working from a documented install of protoenv (the ``test`` extra brings pytest): those
    that need no Docker first (install, certify the class in this Python, test, play), then
    the image's build and certification."""
    names = _names(name)
    here = Path.cwd() if cwd is None else cwd
    shown = root.relative_to(here) if root.is_relative_to(here) else root
    tag = names["image_tag"]
    target = f"{names['name']}.server:{names['class_name']}Environment"
    return [
        f"pip install -e '{shown}[test]'",
        f"openenv certify python:{target}   # the conformance checks, no Docker needed",
        f"python -m pytest {shown / 'tests'}",
        f"openenv play {target}   # by hand, in the terminal",
        f"openenv build {shown} --offline --debootstrap-base   # -> {tag} (Docker)",
        f"openenv certify docker:{tag}",
    ]
