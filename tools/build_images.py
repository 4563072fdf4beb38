#!/usr/bin/env python3
"""Build every environment image (envs/*/ with a ``[tool.openenv]`` table) offline:
``make images`` (``IMAGE_JOBS=N`` builds N at once; .ci/run uses 2).

Each build is ``openenv build DIR --offline --debootstrap-base``; with several at once every
line is prefixed by its environment, and the run fails (exit 1) naming each image that did not
build, after all have finished. The dependency-wheel cache these builds share is filled through
a staging directory renamed into place (openenv.deploy.wheelhouse), so concurrent builds are safe.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_print = threading.Lock()


def env_dirs() -> list[Path]:
    out = []
    for pp in sorted((ROOT / "envs").glob("*/pyproject.toml")):
        if "openenv" in tomllib.loads(pp.read_text()).get("tool", {}):
            out.append(pp.parent)
    return out


def build(env_dir: Path, prefix: bool) -> tuple[str, int, float]:
    t0 = time.monotonic()
    openenv = Path(sys.executable).with_name("openenv")
    cmd = [str(openenv), "build", str(env_dir.relative_to(ROOT)), "--offline", "--debootstrap-base"]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            with _print:
                print(f"[{env_dir.name}] {line}" if prefix else line, end="", flush=True)
    return env_dir.name, proc.returncode, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1, help="images built at once (default 1)")
    ns = ap.parse_args()
    dirs = env_dirs()
    with ThreadPoolExecutor(max(1, ns.jobs)) as pool:
        results = list(pool.map(lambda d: build(d, ns.jobs > 1), dirs))
    for name, rc, secs in results:
        print(f"{'built ' if rc == 0 else 'FAILED'} {name:<16} {secs:6.1f}s")
    failed = [name for name, rc, _ in results if rc != 0]
    if failed:
        print(f"images not built: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
