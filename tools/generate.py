#!/usr/bin/env python3
"""Generate Python bindings from every .proto of the project (``make generate``).

The single generator is grpcio-tools' bundled protoc (libprotoc 35.1 for grpcio-tools
1.85.1), producing ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` next to the Python
package of each proto root. ``--check`` generates into a temporary directory and exits 1
when the committed files differ (the freshness test runs it).

Environment protos (``envs/*/proto``) also get betterproto2 dataclasses, the opt-in typed
facade of ``openenv.runtime.betterproto`` (docs/betterproto.md): the same grpcio-tools protoc
runs the ``protoc-gen-python_betterproto2`` plugin of betterproto2-compiler (pinned in
python[dev]; it formats its output with the ``ruff`` of the same venv and this repo's
ruff.toml) into ``envs/X/src/<package>/bp/``, a package of its own because the generated code
imports relatively (``gridworld.bp.gridworld.v1``). Offline: no remote plugin.

The contract's tables (``proto/tables/*.json``) and the bindings' declarations
(``*/openenv-binding.json``) give ``python/src/openenv/_contract.py``, the generated tables of
docs/protocol.md and the bindings matrix of docs/bindings.md (``tools/contract_tables.py``).

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

import contract_tables  # tools/contract_tables.py: the contract's tables as data
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent

# (proto root, output root): protos under ``proto root`` generate into ``output root``
# so that e.g. proto/openenv/v1/x.proto becomes the module openenv.v1.x_pb2.
TARGETS: list[tuple[Path, Path]] = [
    (ROOT / "proto", ROOT / "python" / "src"),
    (ROOT / "envs" / "gridworld" / "proto", ROOT / "envs" / "gridworld" / "src"),
    (ROOT / "envs" / "browser_env" / "proto", ROOT / "envs" / "browser_env" / "src"),
]
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
# betterproto2 dataclasses of each environment's protos: envs/X/proto -> envs/X/src/<pkg>/bp/.
BP_SUBPACKAGE = "bp"
BP_PLUGIN = "protoc-gen-python_betterproto2"
BP_OPTIONS = "client_generation=none"  # messages only: the runtime's gRPC stays on grpcio/upb
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
        args = ["protoc", *include, f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *files]
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


def bp_targets() -> list[tuple[Path, Path]]:
    """(proto root, output package) of every environment with protos: ``envs/X/proto`` into
    ``envs/X/src/<pkg>/bp``, where ``<pkg>`` is the environment's Python package named like
    a top-level directory of its protos (``proto/gridworld/v1`` -> ``src/gridworld``)."""
    targets = []
    for proto_root in sorted(ROOT.glob("envs/*/proto")):
        protos = _protos(proto_root)
        if not protos:
            continue
        src = proto_root.parent / "src"
        tops = sorted({p.relative_to(proto_root).parts[0] for p in protos})
        pkgs = [t for t in tops if (src / t / "__init__.py").exists()]
        if len(pkgs) != 1:
            raise SystemExit(
                f"{proto_root.relative_to(ROOT)}: expected one Python package src/<name> named like a "
                f"top-level proto directory ({', '.join(tops)}), found {pkgs or 'none'}"
            )
        targets.append((proto_root, src / pkgs[0] / BP_SUBPACKAGE))
    return targets


def _bp_plugin() -> Path:
    plugin = Path(sys.executable).parent / BP_PLUGIN
    if not plugin.exists():
        found = shutil.which(BP_PLUGIN)
        if found is None:
            raise SystemExit(f"{BP_PLUGIN} not found: pip install 'protoenv[dev]' (betterproto2-compiler)")
        plugin = Path(found)
    return plugin


def generate_betterproto(out_override: Path | None = None) -> list[Path]:
    """betterproto2 dataclasses of every environment's protos (:func:`bp_targets`); return the
    generated files relative to the repository (or to ``out_override``)."""
    wkt = importlib.resources.files("grpc_tools") / "_proto"
    plugin = _bp_plugin()
    # The plugin runs `ruff check --fix` and `ruff format` on its output: the venv's ruff, with
    # this repository's ruff.toml (found from the working directory), as `make lint` runs it.
    env = {**os.environ, "PATH": os.pathsep.join([str(plugin.parent), os.environ.get("PATH", "")])}
    written: list[Path] = []
    for proto_root, pkg in bp_targets():
        out = out_override / pkg.relative_to(ROOT) if out_override else pkg
        shutil.rmtree(out, ignore_errors=True)  # nothing stale survives a removed proto
        out.mkdir(parents=True)
        files = [str(p.relative_to(proto_root)) for p in _protos(proto_root)]
        args = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"-I{ROOT / 'proto'}",
            f"-I{wkt}",
            f"--plugin={BP_PLUGIN}={plugin}",
            f"--python_betterproto2_out={out}",
            f"--python_betterproto2_opt={BP_OPTIONS}",
            *files,
        ]
        r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"betterproto2 generation failed for {proto_root}:\n{r.stdout}{r.stderr}")
        base = out_override or ROOT
        for p in sorted(out.rglob("*.py")):
            _mark_generated(p)
        written += sorted(p.relative_to(base) for p in out.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return written


def _mark_generated(path: Path) -> None:
    """Exempt a generated module from this repository's lint rules (its dataclass fields are
    ``betterproto2.field(...)`` calls, RUF009), as ruff.toml does for ``*_pb2.py``; it is
    formatted already (the plugin ran ``ruff format`` with ruff.toml)."""
    text = path.read_text()
    if not text or "# ruff: noqa" in text:
        return
    lines = text.splitlines(keepends=True)
    at = next((i + 1 for i, line in enumerate(lines[:10]) if "@generated" in line), 0)
    lines.insert(at, "# ruff: noqa\n")
    path.write_text("".join(lines))


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
        stale = [p for p in fresh if not (ROOT / p).exists() or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)]
        bp = generate_betterproto(Path(tmp))
        stale += [p for p in bp if not (ROOT / p).exists() or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)]
        committed_bp = {
            p.relative_to(ROOT)
            for _, pkg in bp_targets()
            if pkg.exists()
            for p in pkg.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        stale += sorted(committed_bp - set(bp))  # generated once, no longer produced
        fresh += bp
        ts = generate_typescript(Path(tmp))
        if ts is not None:
            stale += [
                p for p in ts if not (ROOT / p).exists() or not filecmp.cmp(Path(tmp) / p, ROOT / p, shallow=False)
            ]
            committed = {p.relative_to(ROOT) for p in TS_GEN.rglob("*") if p.is_file()}
            stale += sorted(committed - set(ts))  # generated once, no longer produced
            fresh += ts
    tables = [p.relative_to(ROOT) for p in contract_tables.stale()]
    stale += tables
    fresh += [p.relative_to(ROOT) for p in contract_tables.outputs()]
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
    for p in generate_betterproto():
        print("wrote", p)
    for p in generate_typescript() or []:
        print("wrote", p)
    for p in contract_tables.write():  # proto/tables/*.json and */openenv-binding.json
        print("wrote", p.relative_to(ROOT))
    shutil.rmtree(ROOT / "python" / "src" / "openenv" / "__pycache__", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
