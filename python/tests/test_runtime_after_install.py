"""``openenv build`` after the README's own install (a non-editable ``pip install <repo>/python``),
in a fresh virtualenv: the runtime that goes into the image is found without
``--openenv-source`` (issue 33). First the directory pip installed from (PEP 610's
``direct_url.json``); once that directory is gone, a wheel packed from the installed files,
which installs as the original does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from openenv_testkit import REPO_ROOT

WAIT_S = 300.0

_PROBE = """
import json, site, sys
site.addsitedir(sys.argv[1])  # the dependencies (grpcio, ...), after this venv's own packages
import openenv
from openenv.deploy.project import runtime_source
from openenv.deploy.wheelhouse import _local_wheel
found = runtime_source()
print(json.dumps({"openenv": openenv.__file__, "runtime": str(found),
                  "staged": str(_local_wheel(found, print)) if found.suffix == ".whl" else None}))
"""


def _probe(venv: Path, env: dict[str, str]) -> dict[str, str]:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROBE, sysconfig.get_paths()["purelib"]],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env=env,
        cwd=str(venv.parent),
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    assert out["openenv"].startswith(str(venv)), out  # the installed copy, not this checkout
    return out


def test_the_runtime_is_found_after_a_non_editable_install_even_once_its_source_is_gone(tmp_path: Path) -> None:
    src = tmp_path / "protoenv-src"
    shutil.copytree(
        REPO_ROOT / "python", src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=WAIT_S)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPENENV_SOURCE")}
    env["OPENENV_CACHE_DIR"] = str(tmp_path / "cache")
    # Into the fresh venv's site-packages with this interpreter's pip and setuptools (no index):
    # --target installs beside, never over, what this interpreter has installed (--prefix would
    # uninstall this environment's own protoenv first).
    purelib = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-compile"]
    install = [*pip, "--no-build-isolation", "--no-index", "--ignore-installed", "--target", str(purelib), str(src)]
    subprocess.run(install, check=True, timeout=WAIT_S, env=env, capture_output=True)

    assert Path(_probe(venv, env)["runtime"]) == src.resolve()  # where pip installed it from

    shutil.rmtree(src)
    found = _probe(venv, env)
    wheel = Path(found["runtime"])
    assert wheel.name == "protoenv-0.2.0-py3-none-any.whl" and found["staged"] == str(wheel)
    installed = Path(found["openenv"]).parent
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read("protoenv-0.2.0.dist-info/METADATA").decode()
        entry_points = z.read("protoenv-0.2.0.dist-info/entry_points.txt").decode()
    package = {
        f"openenv/{p.relative_to(installed).as_posix()}"
        for p in installed.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert package <= names  # every file of the package, templates and generated stubs included
    assert "openenv/deploy/templates/Dockerfile" in names and "Name: protoenv" in meta
    assert "openenv = openenv.cli:main" in entry_points
    # It installs as any wheel does, command included.
    target = tmp_path / "reinstalled"
    subprocess.run([*pip, "--target", str(target), str(wheel)], check=True, timeout=WAIT_S, env=env)
    assert (target / "openenv" / "cli" / "build.py").is_file() and (target / "bin" / "openenv").is_file()
