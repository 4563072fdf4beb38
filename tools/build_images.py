#!/usr/bin/env python3
"""Build every environment image (envs/*/ with a ``[tool.openenv]`` table) offline:
``make images`` (``IMAGE_JOBS=N`` builds N at once; .ci/run uses 2).

Each build is ``openenv build DIR --offline --debootstrap-base``; with several at once every
line is prefixed by its environment, and the run fails (exit 1) naming each image that did not
build, after all have finished. The dependency-wheel cache these builds share is filled through
a staging directory renamed into place (openenv.deploy.wheelhouse), so concurrent builds are safe.

``--certify-reports DIR`` (.ci/run) also certifies each image as soon as it is built, in the
same job slot (``openenv certify docker:TAG --seed S`` plus the environment's ``[tool.openenv]
certify-args``, the JSON report in ``DIR/<env>.json``): no slot waits for the slowest build
before certifying starts. Certification logs are printed whole, in order, at the end.
The slowest images (``[tool.openenv] build-weight``, default 1) are started first.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "dev.txt"
_print = threading.Lock()


@dataclass
class Image:
    env_dir: Path
    certify_args: list[str]
    weight: float


@dataclass
class Result:
    name: str
    built: int
    build_s: float
    certified: int | None = None
    certify_s: float = 0.0
    certify_log: str = ""


def images() -> list[Image]:
    out = []
    for pp in sorted((ROOT / "envs").glob("*/pyproject.toml")):
        table = tomllib.loads(pp.read_text()).get("tool", {}).get("openenv")
        if table is not None:
            args = [str(a) for a in table.get("certify-args", [])]
            out.append(Image(pp.parent, args, float(table.get("build-weight", 1))))
    # Longest first (a stable sort: equal weights stay alphabetical).
    return sorted(out, key=lambda i: -i.weight)


def env_dirs() -> list[Path]:
    return [i.env_dir for i in images()]


def _tag(env_dir: Path) -> str:
    from openenv.deploy.project import EnvProject

    return EnvProject.load(env_dir).image_tag


def build(image: Image, prefix: bool, reports: Path | None, seed: str) -> Result:
    env_dir = image.env_dir
    t0 = time.monotonic()
    openenv = Path(sys.executable).with_name("openenv")
    # Within the lock: an image holds the versions the tests ran with (requirements/dev.txt).
    cmd = [str(openenv), "build", str(env_dir.relative_to(ROOT)), "--offline", "--debootstrap-base"]
    cmd += ["--constraint", str(LOCK.relative_to(ROOT))]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            with _print:
                print(f"[{env_dir.name}] {line}" if prefix else line, end="", flush=True)
    result = Result(env_dir.name, proc.returncode, time.monotonic() - t0)
    if reports is None or proc.returncode != 0:
        return result
    t1 = time.monotonic()
    cmd = [
        str(openenv),
        "certify",
        f"docker:{_tag(env_dir)}",
        "--seed",
        seed,
        *image.certify_args,
        "--report",
        str(reports / f"{env_dir.name}.json"),
    ]
    with tempfile.TemporaryFile("w+") as log:
        rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.seek(0)
        result.certify_log = f"--- openenv certify {' '.join(cmd[2:])}\n{log.read()}"
    result.certified, result.certify_s = rc, time.monotonic() - t1
    with _print:
        print(f"[{env_dir.name}] certified: exit {rc} after {result.certify_s:.0f}s", flush=True)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1, help="images built at once (default 1)")
    ap.add_argument("--certify-reports", type=Path, help="certify each image once built; JSON reports here")
    ap.add_argument("--seed", default="20261202", help="the certifications' seed (with --certify-reports)")
    ap.add_argument("names", nargs="*", help="only these environments (envs/NAME; default: every one)")
    ns = ap.parse_args()
    todo = images()
    unknown = set(ns.names) - {i.env_dir.name for i in todo}
    if unknown:
        ap.error(f"no environment image named {', '.join(sorted(unknown))} (envs/*/ with [tool.openenv])")
    if ns.names:
        todo = [i for i in todo if i.env_dir.name in ns.names]
    if ns.certify_reports is not None:
        ns.certify_reports.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, ns.jobs)) as pool:
        results = list(pool.map(lambda i: build(i, ns.jobs > 1, ns.certify_reports, ns.seed), todo))
    for r in results:
        if r.certify_log:
            print(r.certify_log, end="" if r.certify_log.endswith("\n") else "\n")
    for r in results:
        line = f"{'built ' if r.built == 0 else 'FAILED'} {r.name:<16} {r.build_s:6.1f}s"
        if r.certified is not None:
            line += f"   {'certified' if r.certified == 0 else 'NOT CERTIFIED'} {r.certify_s:6.1f}s"
        print(line)
    failed = [r.name for r in results if r.built != 0]
    if failed:
        print(f"images not built: {', '.join(failed)}", file=sys.stderr)
    uncertified = [r.name for r in results if r.certified not in (None, 0)]
    if uncertified:
        print(f"images not certified (their logs above): {', '.join(uncertified)}", file=sys.stderr)
    return 1 if failed or uncertified else 0


if __name__ == "__main__":
    sys.exit(main())
