#!/usr/bin/env python3
"""Install into this interpreter's environment with uv when it can, else with pip:
``python tools/pip_install.py [--python PY] [--no-build-isolation] REQUIREMENT...`` (the
Makefile's installs, and tools/openenv_upstream.py's into another virtualenv with ``--python``).

Why: ``make venv`` installed ~250 packages with pip in ~240 s on a 2-core machine; uv
(installed into the virtualenv beside pip, ``make venv`` does it; or on PATH) installs the same set, at the
same versions, in ~70 s, which is most of what a first ``make test`` and every CI run wait for.

uv does not read pip's configuration, and the machine's configuration decides where packages
come from (an index, a local mirror, a wheel directory, constraints). So pip's own reading of
it (``pip config list``: files and ``PIP_*`` variables, later ones overriding earlier ones) is
translated into uv's options, with pip's way of choosing among indexes (the best version on
any of them: ``--index-strategy unsafe-best-match``). A setting with no uv equivalent, or no
uv at all, makes this install with pip, exactly as before, and says why. ``OPENENV_PIP=pip``
forces pip.

Standard library only.
"""

from __future__ import annotations

import ast
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

# pip option -> uv command-line flag, given once per (whitespace-separated) value.
_LIST_FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
# pip option -> environment variable uv reads instead.
_ENV = {
    "cert": "SSL_CERT_FILE",
    "client-cert": "SSL_CLIENT_CERT",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "timeout": "UV_HTTP_TIMEOUT",
    "proxy": "HTTPS_PROXY",
}
# pip options that change nothing about what gets installed from where.
_IGNORED = {
    "disable-pip-version-check",
    "no-cache-dir",
    "cache-dir",
    "progress-bar",
    "quiet",
    "verbose",
    "no-input",
    "root-user-action",
    "require-virtualenv",
    "break-system-packages",
    "retries",
    "no-warn-script-location",
    "no-color",
    "config-file",  # PIP_CONFIG_FILE: pip has read that file into the other settings
}
# Sections of pip's configuration an install reads (``install`` overrides ``global``).
_SECTIONS = (":env:", "global", "install")


class Untranslatable(Exception):
    """pip's configuration holds a setting uv has no equivalent for."""


def pip_settings(python: str) -> dict[str, str]:
    """pip's effective configuration for an install, as ``{option: value}``."""
    out = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    settings: dict[str, str] = {}
    # pip lists files first (global, user, site), then the environment: the last value wins,
    # and within one origin ``install.X`` overrides ``global.X``.
    ranked: list[tuple[int, int, str, str]] = []
    for line in out.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, option = key.rpartition(".")
        if not sep or not dot or section not in _SECTIONS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        ranked.append((2 if section == ":env:" else 1, 1 if section == "install" else 0, option, str(value)))
    # A stable sort: within one rank, pip's own order (files before later files) is kept.
    for _origin, _section, option, value in sorted(ranked, key=lambda r: (r[0], r[1])):
        settings[option] = value
    return settings


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's flags and environment for pip's settings; raises Untranslatable."""
    flags = ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    for option, value in settings.items():
        if option in _LIST_FLAGS:
            for item in value.split():
                flags += [_LIST_FLAGS[option], item]
        elif option in _ENV:
            env[_ENV[option]] = value
        elif option == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                flags.append("--no-index")
        elif option == "pre":
            if value.lower() in ("1", "true", "yes", "on"):
                flags += ["--prerelease", "allow"]
        elif option not in _IGNORED:
            raise Untranslatable(option)
    return flags, env


def _uv() -> str | None:
    """uv beside the running interpreter (``make venv`` installs it there), else on PATH."""
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")


def split_args(argv: list[str]) -> tuple[str, bool, list[str]]:
    """(interpreter, no build isolation, what to install): this script's two options wherever
    they are, everything else passed to the installer as it stands (``-e PATH`` included)."""
    python, no_isolation, rest = sys.executable, False, []
    args = iter(argv)
    for arg in args:
        if arg == "--no-build-isolation":
            no_isolation = True
        elif arg == "--python":
            python = next(args, "")
        elif arg.startswith("--python="):
            python = arg.partition("=")[2]
        else:
            rest.append(arg)
    return python, no_isolation, rest


def main(argv: list[str]) -> int:
    python, no_isolation, reqs = split_args(argv)
    if not python or not reqs:
        print("usage: pip_install.py [--python PY] [--no-build-isolation] REQUIREMENT...", file=sys.stderr)
        return 2
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]
    pip += ["--no-build-isolation"] if no_isolation else []
    uv = _uv()
    why = None
    if os.environ.get("OPENENV_PIP") == "pip":
        why = "OPENENV_PIP=pip"
    elif uv is None:
        why = f"no uv beside {sys.executable} nor on PATH"
    else:
        try:
            settings = pip_settings(python)
            flags, env = uv_options(settings)
        except Untranslatable as e:
            why = f"pip's configuration sets {e.args[0]!r}, which uv has no equivalent for"
        except subprocess.CalledProcessError as e:
            why = f"`pip config list` failed ({e.returncode})"
    if why is None and uv is not None:
        cmd = [uv, "pip", "install", "--python", python, *flags]
        cmd += ["--no-build-isolation"] if no_isolation else []
        cmd += reqs
        print(f"installing with uv (pip's configuration: {', '.join(sorted(settings)) or 'none'})", flush=True)
        print("+ " + shlex.join(cmd), flush=True)
        return subprocess.call(cmd, env={**os.environ, **env})
    print(f"installing with pip: {why}", flush=True)
    return subprocess.call(pip + reqs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
