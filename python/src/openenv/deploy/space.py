"""``openenv push``: package an environment as a Hugging Face Space (Docker SDK) and upload it.

The Space folder holds:

* ``README.md`` with the Space front matter (``sdk: docker``, ``app_port``, ``tags``),
  followed by the environment's own README;
* ``Dockerfile``: installs the vendored openenv runtime and the environment, then runs
  ``openenv serve MODULE:CLASS --host 0.0.0.0 --http-port <port>`` so the Space's single
  HTTP port serves OpenEnv's ``/ws``, ``/mcp``, ``/health`` (stock OpenEnv clients and
  ``EnvClient("https://<owner>-<name>.hf.space")`` both work);
* ``env/``: a copy of the environment project; ``vendor/openenv/``: the openenv runtime
  itself (on PyPI the name ``openenv`` belongs to another project, so it is shipped in
  the Space rather than installed by name).

``--dry-run`` only writes the folder. Otherwise it is uploaded with ``huggingface_hub``
(``create_repo(..., repo_type="space", space_sdk="docker")`` then ``upload_folder``),
which needs a token (``HF_TOKEN`` or ``huggingface-cli login``); the upload is not
exercised by the test suite, which has no network.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

from openenv.deploy.project import runtime_source
from openenv.errors import FailedPrecondition, InvalidArgument
from openenv.runtime.environment import Environment

__all__ = ["SPACE_PORT", "find_target", "prepare_space", "upload_space"]

SPACE_PORT = 7860
"""The port Hugging Face Spaces route to (``app_port``)."""

_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", "build", "dist", ".venv", ".git", ".ruff_cache", "tests"
)


def _project(env_dir: Path) -> dict[str, Any]:
    pp = env_dir / "pyproject.toml"
    if not pp.is_file():
        raise FailedPrecondition(f"{env_dir} has no pyproject.toml (an environment project is expected)")
    with pp.open("rb") as f:
        project: dict[str, Any] = tomllib.load(f).get("project", {})
    return project


def find_target(env_dir: Path) -> str:
    """``module:Class`` of the environment defined in ``env_dir`` (its one
    :class:`openenv.Environment` subclass, found by importing its top-level packages)."""
    roots = [p for p in (env_dir / "src", env_dir) if p.is_dir()]
    found: list[str] = []
    for root in roots:
        for pkg in sorted(root.iterdir()):
            if not (pkg / "__init__.py").is_file():
                continue
            sys.path.insert(0, str(root))
            try:
                mod = importlib.import_module(pkg.name)
            except Exception as e:  # reported with the package name
                raise FailedPrecondition(f"cannot import {pkg.name} from {root}: {e}") from e
            finally:
                sys.path.remove(str(root))
            for obj in vars(mod).values():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, Environment)
                    and obj is not Environment
                    and obj.__module__.split(".")[0] == pkg.name
                ):
                    found.append(f"{obj.__module__}:{obj.__qualname__}")
        if found:
            break
    found = sorted(set(found))
    if len(found) != 1:
        raise FailedPrecondition(
            f"found {len(found)} environment classes in {env_dir} ({', '.join(found) or 'none'}); "
            "pass --target MODULE:CLASS"
        )
    return found[0]


def _front_matter(name: str, title: str, description: str, port: int) -> str:
    desc = description.replace("\n", " ").strip()
    if len(desc) > 60:  # the Hub limits short_description to 60 characters
        desc = desc[:57].rstrip() + "..."
    lines = [
        "---",
        f"title: {title}",
        "emoji: 🧪",
        "colorFrom: blue",
        "colorTo: green",
        "sdk: docker",
        f"app_port: {port}",
        "pinned: false",
        "tags:",
        "  - openenv",
        "  - reinforcement-learning",
    ]
    if desc:
        lines.append(f"short_description: {_yaml_str(desc)}")
    lines.append("---")
    return "\n".join(lines) + "\n"


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def prepare_space(env_dir: Path, out: Path, *, repo_id: str, target: str | None = None, port: int = SPACE_PORT) -> Path:
    """Write the Space folder for the environment project ``env_dir`` into ``out``
    (replaced if it exists) and return it."""
    env_dir = env_dir.resolve()
    project = _project(env_dir)
    target = target or find_target(env_dir)
    if not re.fullmatch(r"[\w.]+:[\w.]+", target):
        raise InvalidArgument(f"--target must look like module:Class, not {target!r}")
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise InvalidArgument(f"--repo-id must be OWNER/NAME, not {repo_id!r}")
    runtime = runtime_source()
    out = out.resolve()
    if out == env_dir or out in env_dir.parents:
        raise InvalidArgument(f"--out {out} would overwrite the environment itself")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(env_dir, out / "env", ignore=_IGNORE)
    vendor = out / "vendor" / "openenv"
    vendor.mkdir(parents=True)
    install = "/app/vendor/openenv[http]"
    if runtime.is_file():  # a wheel of the installed distribution (no source tree at hand)
        shutil.copy2(runtime, vendor / runtime.name)
        install = f"/app/vendor/openenv/{runtime.name}[http]"
    else:
        shutil.copy2(runtime / "pyproject.toml", vendor / "pyproject.toml")
        for extra in ("README.md", "LICENSE"):
            src = runtime / extra if (runtime / extra).exists() else runtime.parent / extra
            if src.is_file():
                shutil.copy2(src, vendor / extra)
        shutil.copytree(runtime / "src", vendor / "src", ignore=_IGNORE)
    name = str(project.get("name", env_dir.name))
    readme = ""
    if (env_dir / "README.md").is_file():
        readme = (env_dir / "README.md").read_text()
    body = readme or f"# {name}\n\n{project.get('description', '')}\n"
    usage = (
        f"\n\n## Use this Space\n\n```python\nfrom openenv import EnvClient\n\n"
        f'with EnvClient("https://{repo_id.replace("/", "-").replace("_", "-").lower()}.hf.space").sync() '
        f"as env:\n    print(env.reset())\n```\n\nStock OpenEnv clients work too (WebSocket `/ws`, MCP `/mcp`).\n"
    )
    (out / "README.md").write_text(
        _front_matter(name, repo_id.split("/")[1], str(project.get("description", "")), port)
        + "\n"
        + body.rstrip()
        + usage
    )
    (out / "Dockerfile").write_text(f"""\
# Generated by `openenv push`: serves {target} on the Space port ({port}).
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY vendor/openenv /app/vendor/openenv
COPY env /app/env
RUN pip install "{install}" /app/env
RUN useradd -m -u 1000 user
USER user
ENV PORT={port}
EXPOSE {port}
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \\
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"
CMD ["openenv", "serve", "{target}", "--host", "0.0.0.0", "--port", "50051", "--http-port", "{port}"]
""")
    (out / ".dockerignore").write_text("**/__pycache__\n**/*.pyc\n")
    return out


def upload_space(
    folder: Path, repo_id: str, *, private: bool = False, token: str | None = None, commit_message: str = "openenv push"
) -> str:
    """Create (or reuse) the Space ``repo_id`` and upload ``folder``; returns the Space URL."""
    try:
        from huggingface_hub import HfApi
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise FailedPrecondition("uploading needs the hub extra: pip install 'protoenv[hub]'") from e
    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="space", space_sdk="docker", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="space", commit_message=commit_message)
    return str(url)
