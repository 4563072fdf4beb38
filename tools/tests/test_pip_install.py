"""tools/pip_install.py (the Makefile's installs): pip's configuration, as pip itself reads it,
becomes uv's options; a setting uv cannot follow sends the install to pip, saying why.

pip runs for real here (``pip config list`` on configuration files the tests write, and an
install of what is already installed); nothing is downloaded."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "pip_install.py"


def _module():  # tools/ is not a package: load the script as a module
    spec = importlib.util.spec_from_file_location("pip_install", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _env_with_config(tmp_path: Path, text: str, **extra: str) -> dict[str, str]:
    """This process's environment without PIP_* variables, pip reading ``text`` as its file."""
    conf = tmp_path / "pip.conf"
    conf.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": str(conf), **extra}


def test_pips_files_and_variables_become_uvs_flags_the_variable_winning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = _module()
    env = _env_with_config(
        tmp_path,
        "[global]\n"
        "index-url = file:///srv/main/simple\n"
        "extra-index-url = file:///srv/a/simple file:///srv/b/simple\n"
        "find-links = /srv/wheels\n"
        "trusted-host = mirror.invalid\n"
        "cert = /srv/ca.pem\n"
        "[install]\n"
        "constraint = /srv/constraints.txt\n",
        PIP_FIND_LINKS="/srv/other-wheels",
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("PIP_") and k not in env]:
        monkeypatch.delenv(key)
    settings = mod.pip_settings(sys.executable)
    assert settings["find-links"] == "/srv/other-wheels"  # PIP_FIND_LINKS over the file
    flags, uv_env = mod.uv_options(settings)
    pairs = list(zip(flags[::2], flags[1::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs
    assert ("--index-url", "file:///srv/main/simple") in pairs
    assert ("--extra-index-url", "file:///srv/a/simple") in pairs
    assert ("--extra-index-url", "file:///srv/b/simple") in pairs
    assert ("--find-links", "/srv/other-wheels") in pairs
    assert ("--find-links", "/srv/wheels") not in pairs
    assert ("--constraint", "/srv/constraints.txt") in pairs
    assert ("--allow-insecure-host", "mirror.invalid") in pairs
    assert uv_env["SSL_CERT_FILE"] == "/srv/ca.pem"


def test_a_setting_uv_cannot_follow_sends_the_install_to_pip_naming_it(tmp_path: Path) -> None:
    """`only-binary` has no uv flag of the same meaning here: pip installs (what is already
    installed, so nothing is fetched), and the first line says why."""
    env = _env_with_config(tmp_path, "[global]\nonly-binary = :all:\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "pip"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    if shutil.which("uv", path=str(Path(sys.executable).parent)) is None:
        assert first.startswith("installing with pip: no uv beside"), first
    else:
        assert first == "installing with pip: pip's configuration sets 'only-binary', which uv has no equivalent for"
    assert "Requirement already satisfied: pip" in out.stdout


def test_uv_installs_with_this_machines_pip_configuration() -> None:
    """With the machine's own configuration (make venv installs uv beside pip): uv is chosen,
    and an install of what is installed succeeds without changing anything."""
    if shutil.which("uv", path=str(Path(sys.executable).parent)) is None:
        if os.environ.get("CI"):
            pytest.fail("make venv installs uv beside pip, and CI runs make venv")
        pytest.skip("no uv in this virtualenv (created before make venv installed it)")
    out = subprocess.run([sys.executable, str(SCRIPT), "packaging"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("installing with uv"), out.stdout
    assert re.search(r"(Checked|Audited) 1 package", out.stdout + out.stderr), out.stdout + out.stderr


def test_editable_paths_and_options_pass_through_in_any_order() -> None:
    mod = _module()
    assert mod.split_args(["-e", "python[dev]", "--no-build-isolation", "-e", "envs/x", "torch==2.13.0"]) == (
        sys.executable,
        True,
        ["-e", "python[dev]", "-e", "envs/x", "torch==2.13.0"],
    )
    assert mod.split_args(["--python", "/v/bin/python", "pkg"]) == ("/v/bin/python", False, ["pkg"])
    assert mod.split_args(["--python=/v/bin/python", "pkg"]) == ("/v/bin/python", False, ["pkg"])
    assert mod.main(["--no-build-isolation"]) == 2  # nothing to install: usage, no installer run
