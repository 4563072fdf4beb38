#!/usr/bin/env python3
"""Generate Python bindings from every .proto of the project (``make generate``).

The single generator is grpcio-tools' bundled protoc (libprotoc 35.1 for grpcio-tools
1.85.1), producing ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` next to the Python
package of each proto root. ``--check`` generates into a temporary directory and exits 1
when the committed files differ (the freshness test runs it).

TypeScript bindings (``typescript/src/gen/``) come from ``buf generate`` with the template
``buf.gen.yaml`` and the locally installed ``protoc-gen-es`` (``npm ci`` in ``typescript/``
first when ``node_modules`` is missing). Without Node.js/npm on PATH that step is skipped
with a warning, except under CI (env ``CI`` set), where it is an error.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent

# (proto root, output root): protos under ``proto root`` generate into ``output root``
# so that e.g. proto/openenv/v1/x.proto becomes the module openenv.v1.x_pb2.
TARGETS: list[tuple[Path, Path]] = [
    (ROOT / "proto", ROOT / "python" / "src"),
    (ROOT / "envs" / "gridworld" / "proto", ROOT / "envs" / "gridworld" / "src"),
]
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
TS_ROOT = ROOT / "typescript"
TS_GEN = TS_ROOT / "src" / "gen"  # the `out` of buf.gen.yaml's protoc-gen-es plugin


def _protos(root: Path) -> list[Path]:
    return sorted(root.rglob("*.proto"))


def generate(out_override: Path | None = None) -> list[Path]:
    """Generate every target; return the generated files (relative to their output root)."""
    wkt = importlib.resources.files("grpc_tools") / "_proto"
    written: list[Path] = []
    for proto_root, out_root in TARGETS:
        out = out_override / out_root.relative_to(ROOT) if out_override else out_root
        out.mkdir(parents=True, exist_ok=True)
        files = [str(p.relative_to(proto_root)) for p in _protos(proto_root)]
        include = [f"-I{proto_root}", f"-I{ROOT / 'proto'}", f"-I{wkt}"]
        args = ["protoc", *include, f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", *files]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed for {proto_root}")
        for f in files:
            stem = f[: -len(".proto")]
            for suffix in SUFFIXES:
                p = out / (stem + suffix)
                if suffix == "_pb2_grpc.py" and not p.exists():
                    continue
                written.append(p.relative_to(out_override) if out_override else p.relative_to(ROOT))
            for pkg in Path(stem).parents:  # regular packages, so imports resolve in every tool
                if str(pkg) != ".":
                    init = out / pkg / "__init__.py"
                    if not init.exists():
                        init.write_text("")
    return written


def _typescript_toolchain() -> tuple[str, Path] | None:
    """(buf, protoc-gen-es), installing typescript/'s pinned npm packages when missing;
    None (with a warning) when Node.js is not installed, outside CI."""
    plugin = TS_ROOT / "node_modules" / ".bin" / "protoc-gen-es"
    npm = shutil.which("npm")
    if shutil.which("node") is None or (npm is None and not plugin.exists()):
        if os.environ.get("CI"):
            raise SystemExit("Node.js and npm are required on PATH to generate typescript/src/gen")
        print("warning: Node.js/npm not on PATH: TypeScript bindings not generated", file=sys.stderr)
        return None
    if not plugin.exists():
        subprocess.run([str(npm), "ci", "--no-audit", "--no-fund"], cwd=TS_ROOT, check=True)
    local = Path(sys.executable).parent / "buf"
    buf = str(local) if local.exists() else shutil.which("buf")
    if buf is None:
        raise SystemExit("buf is required (pip install buf-bin, part of python[dev])")
    return buf, plugin


def generate_typescript(out_override: Path | None = None) -> list[Path] | None:
    """Run ``buf generate`` (buf.gen.yaml); return the generated files relative to the
    output base, or None when skipped (no Node.js outside CI)."""
    tools = _typescript_toolchain()
    if tools is None:
        return None
    args = [tools[0], "generate", "--template", str(ROOT / "buf.gen.yaml")]
    if out_override is not None:
        args += ["--output", str(out_override)]
    subprocess.run(args, cwd=ROOT, check=True)
    base = out_override or ROOT
    gen = base / TS_GEN.relative_to(ROOT)
    return sorted(p.relative_to(base) for p in gen.rglob("*") if p.is_file())


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [p for p in fresh if not (ROOT / p).exists()
                 or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)]
        ts = generate_typescript(Path(tmp))
        if ts is not None:
            stale += [p for p in ts if not (ROOT / p).exists()
                      or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)]
            committed = {p.relative_to(ROOT) for p in TS_GEN.rglob("*") if p.is_file()}
            stale += sorted(committed - set(ts))  # generated once, no longer produced
            fresh += ts
    if stale:
        print("generated code is stale; run `make generate`:", *stale, sep="\n  ", file=sys.stderr)
        return 1
    print(f"generated code is up to date ({len(fresh)} files)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if committed code is stale")
    ns = ap.parse_args()
    if ns.check:
        return check()
    for p in generate():
        print("wrote", p)
    for p in generate_typescript() or []:
        print("wrote", p)
    shutil.rmtree(ROOT / "python" / "src" / "openenv" / "__pycache__", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
