#!/usr/bin/env python3
"""Generate Python bindings from every .proto of the project (``make generate``).

The single generator is grpcio-tools' bundled protoc (libprotoc 35.1 for grpcio-tools
1.85.1), producing ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` next to the Python
package of each proto root. ``--check`` generates into a temporary directory and exits 1
when the committed files differ (the freshness test runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import shutil
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


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = [p for p in fresh if not (ROOT / p).exists()
                 or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)]
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
    shutil.rmtree(ROOT / "python" / "src" / "openenv" / "__pycache__", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
