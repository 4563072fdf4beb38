"""An image per package, ``factory-<package>:<tag>``: repo_env's image (built from this tree
with ``openenv build envs/repo_env --offline``) plus the package's pristine tree and pytest for
the sandbox, serving that package's instances (``REPO_FACTORY_PACKAGES``). The build needs no
network: the tree and pytest are copied from this host's cache and interpreter."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from repo_env.factory.sources import fetch, load_packages

__all__ = ["build_images", "dockerfile"]


def dockerfile(base: str, key: str, name: str, tag: str, wheel: str | None = None) -> str:
    install = ""
    if wheel:  # this repo-env over the base's (a base built before the factory existed)
        install = (
            f"COPY {wheel} /tmp/{wheel}\n"
            f"RUN /opt/openenv/bin/python -m pip install -q --no-deps --no-index --force-reinstall /tmp/{wheel} "
            f"&& rm /tmp/{wheel}\n"
        )
    return f"""FROM {base}
USER 0
{install}COPY tree/ /opt/repo-factory/trees/{key}/
COPY testdeps/ /opt/repo-factory/testdeps/
RUN chmod -R a+rX /opt/repo-factory
ENV REPO_FACTORY_CACHE=/opt/repo-factory \\
    REPO_FACTORY_TESTDEPS=/opt/repo-factory/testdeps \\
    REPO_FACTORY_PACKAGES={name} \\
    OPENENV_FACTORY=repo_env.factory.env:FactoryEnvironment
LABEL org.opencontainers.image.title="factory-{name}" \\
      openenv.env.name="repo_factory" \\
      openenv.env.version="{tag}" \\
      openenv.factory="repo_env.factory.env:FactoryEnvironment" \\
      openenv.repo_factory.package="{key}"
USER 10001:10001
"""


def build_images(
    names: Sequence[str],
    *,
    base: str,
    tag: str = "0.1.0",
    cache: str | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> Iterator[tuple[str, str]]:
    """Build ``factory-<name>:<tag>`` for each package; yields (name, image reference).
    RuntimeError naming the package when a build fails."""
    from repo_env.factory.env import testdeps

    deps = Path(testdeps())
    wheel = _this_wheel()
    for pkg in load_packages(names=list(names)):
        tree = fetch(pkg, cache)
        ref = f"factory-{pkg.name}:{tag}"
        with tempfile.TemporaryDirectory(prefix="factory-image-") as ctx:
            c = Path(ctx)
            shutil.copytree(tree, c / "tree")
            (c / "tree" / ".complete").write_text((tree / ".complete").read_text(), encoding="utf-8")
            shutil.copytree(deps, c / "testdeps")
            if wheel is not None:
                shutil.copyfile(wheel, c / wheel.name)
            (c / "Dockerfile").write_text(
                dockerfile(base, pkg.key, pkg.name, tag, wheel.name if wheel else None), encoding="utf-8"
            )
            log(f"building {ref} on {base}")
            r = subprocess.run(
                ["docker", "build", "-q", "--network", "none", "-t", ref, ctx],
                capture_output=True,
                text=True,
                check=False,
            )
            if r.returncode != 0:
                raise RuntimeError(f"{ref}: docker build failed: {(r.stderr or r.stdout)[-800:]}")
        yield pkg.name, ref


_WHEEL: list[Path] = []


def _this_wheel() -> Path | None:
    """A wheel of this repo-env when it runs from a source tree (an editable install): the
    image then serves this code, whatever its base's repo-env is. None for an installed wheel."""
    import repo_env

    src = Path(repo_env.__file__).resolve().parents[2]
    if not (src / "pyproject.toml").is_file():
        return None
    if not _WHEEL:
        out = Path(tempfile.mkdtemp(prefix="factory-wheel-"))
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"building the repo-env wheel failed: {(r.stderr or r.stdout)[-500:]}")
        _WHEEL.append(next(out.glob("repo_env-*.whl")))
    return _WHEEL[0]
