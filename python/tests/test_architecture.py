"""The package's layers and its install footprint, checked by machine (docs/architecture.md).

* The import-linter contracts of python/pyproject.toml hold (each layer imports only the ones
  below it; no import cycle between the modules of a package), and they do catch an upward
  import and a cycle: a copy of the package with one deliberate violation breaks them.
* No function-level import of the package's own modules remains except for the optional
  extras and type checking.
* The client's modules import each other in one direction, counting the imports made for type
  checking and on first use, and the client reaches deployment only through the launcher
  deployment registers (an entry point), never by an import.
* The 0.1 module paths still import, with a DeprecationWarning naming the new path.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import openenv

SRC = Path(openenv.__file__).resolve().parent
PYPROJECT = SRC.parents[1] / "pyproject.toml"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

#: Function-level imports of our own modules that are there on purpose: an optional extra
#: imported only when used.
OPTIONAL_EXTRA_IMPORTS = {
    ("openenv.host", "openenv.http"),
    ("openenv.host", "openenv.bridge"),
    ("openenv.host", "openenv.http.binary_listener"),  # picows, in the http extra
    ("openenv.cli.bridge", "openenv.http"),
    ("openenv.cli.collect", "openenv.record"),  # the collect extra
    ("openenv.cli.collect", "openenv.harness"),  # the harness extra: --export-training's capture proxy
    ("openenv.cli.harness", "openenv.harness"),  # the harness extra
    ("openenv.gym", "openenv.gym.sb3"),  # stable-baselines3 (and torch), the rl extra: SB3VecEnv on first use
    ("openenv.grpc_libraries", "openenv.grpc_libraries.grpclib_server"),  # the grpclib extra
    ("openenv.client.env", "openenv.client.grpclib"),  # the grpclib extra
    ("openenv", "openenv.client"),  # on first use: a server never needs it (idle RSS, test_lazy_imports.py)
}


def _lint_imports(src_root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package found under ``src_root`` with the project's contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), str(PYPROJECT), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=src_root,
        env={"PYTHONPATH": str(src_root), "PATH": "/usr/bin:/bin"},
    )


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "openenv", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_the_layers_and_acyclic_contracts_hold() -> None:
    r = _lint_imports(SRC.parent)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 kept, 0 broken" in r.stdout


def test_a_core_import_of_a_training_library_breaks_the_forbidden_contract(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    client = root / "openenv" / "client" / "env.py"
    client.write_text(client.read_text() + "\nimport gymnasium as _heavy  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "The core never imports a training integration's library BROKEN" in r.stdout, r.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    session = root / "openenv" / "runtime" / "session.py"
    session.write_text(session.read_text() + "\nfrom openenv.cli import main as _upward  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "BROKEN" in r.stdout and "openenv.runtime.session -> openenv.cli" in r.stdout, r.stdout


def test_the_core_importing_ray_or_kubernetes_breaks_the_extras_contract(tmp_path: Path) -> None:
    """Ray and the Kubernetes client are extras: only their fleet providers may import them."""
    root = _copy(tmp_path)
    client = root / "openenv" / "fleet" / "client.py"
    client.write_text(client.read_text() + "\nimport ray as _heavy  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "import ray and kubernetes BROKEN" in r.stdout and "openenv.fleet.client -> ray" in r.stdout, r.stdout


def test_a_cycle_inside_a_layer_is_caught(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    codec = root / "openenv" / "runtime" / "codec.py"
    codec.write_text(codec.read_text() + "\nfrom openenv.runtime import session as _cycle  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "No import cycles between the modules of a package BROKEN" in r.stdout, r.stdout


def test_the_client_importing_deployment_breaks_the_product_contract(tmp_path: Path) -> None:
    """The core must not reach up into a product: EnvClient.from_docker_image used to import
    openenv.deploy.run (on first use, an ignored exception to the layers); the contract now
    forbids any such import, direct or not, so it cannot come back unnoticed."""
    root = _copy(tmp_path)
    env = root / "openenv" / "client" / "env.py"
    env.write_text(env.read_text() + "\nfrom openenv.deploy import run as _upward  # noqa\n")
    r = _lint_imports(root)
    assert r.returncode != 0
    assert "The client never imports a product BROKEN" in r.stdout, r.stdout


def test_no_import_cycle_among_the_client_modules_type_checking_imports_included() -> None:
    """import-linter skips imports made for type checking, where client/env.py <-> client/sync.py
    once ran in a circle: every import of one client module by another (at module level, for
    type checking or on first use) goes one way, so each can be read and tested alone."""
    import grimp

    graph = grimp.build_graph("openenv", exclude_type_checking_imports=False, cache_dir=None)
    modules = {m for m in graph.find_children("openenv.client")}
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    cycles = [
        (a, b, chain)
        for a in sorted(modules)
        for b in sorted(edges[a])
        if (chain := graph.find_shortest_chain(importer=b, imported=a)) is not None and set(chain) <= modules
    ]
    assert not cycles, cycles


def test_from_docker_image_reaches_the_launcher_deployment_registers() -> None:
    """EnvClient.from_docker_image's container is deployment's: the client looks its launcher up
    by name (entry points "openenv.launchers"), and the installed distribution registers
    openenv.deploy.run.client_from_image there."""
    from openenv.client.env import launcher
    from openenv.deploy.run import client_from_image

    assert launcher("docker") is client_from_image
    with pytest.raises(ImportError, match="no 'podman' launcher is installed"):
        launcher("podman")


def _function_level_imports() -> set[tuple[str, str]]:
    found = set()
    for path in SRC.rglob("*.py"):
        if "v1" in path.relative_to(SRC).parts:
            continue
        module = ".".join(("openenv", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        type_checking = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if id(node) in type_checking:
                    continue
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("openenv"):
                    found.add((module, node.module or ""))
                elif isinstance(node, ast.Import):
                    found.update((module, a.name) for a in node.names if a.name.startswith("openenv"))
    return found


def test_no_function_level_import_of_our_own_modules_but_optional_extras() -> None:
    assert _function_level_imports() == OPTIONAL_EXTRA_IMPORTS


def test_the_0_1_module_paths_still_import_with_a_warning() -> None:
    sys.modules.pop("openenv.session", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import openenv.session as old

    assert old.PROTOCOL_VERSION == openenv.PROTOCOL_VERSION
    assert old.SessionManager.__module__ == "openenv.runtime.session"
    assert any(
        issubclass(w.category, DeprecationWarning) and "openenv.runtime.session" in str(w.message) for w in caught
    )
    from openenv._compat import MOVED

    for name in MOVED:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            __import__(name)
    with pytest.raises(AttributeError, match="is gone"):
        import openenv.images as images

        images.no_such_name  # noqa: B018


def test_the_0_2_renames_still_import_with_a_warning() -> None:
    """openenv.wire is openenv.json_protocol, openenv.engines is openenv.grpc_libraries, the HTTP
    side is openenv.http (openenv.bridge keeps the remote proxy), Runtime is EnvironmentRuntime
    (issue 29): the old names give the same objects (one module loaded once), with a
    DeprecationWarning."""
    import openenv.http
    import openenv.http.ws
    import openenv.json_protocol.frames as frames
    import openenv.runtime.session as session
    from openenv._compat import MOVED

    for name in MOVED:  # imported by an earlier test of this process: the warning comes once per import
        sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import openenv.wire.frames as old_frames
        from openenv.bridge import BridgeApp, RemoteBackend
        from openenv.bridge.ws import WsStream
        from openenv.engines import server_class
        from openenv.runtime import Runtime

    assert old_frames.FrameTranslator is frames.FrameTranslator
    assert Runtime is session.EnvironmentRuntime
    assert BridgeApp is openenv.http.BridgeApp and WsStream is openenv.http.ws.WsStream
    assert RemoteBackend.__module__ == "openenv.bridge.remote"  # what bridges stays a bridge
    assert server_class("grpcio") is openenv.Server
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any("openenv.json_protocol" in m for m in messages), messages
    assert any("EnvironmentRuntime" in m for m in messages), messages
    assert any("openenv.http.BridgeApp" in m for m in messages), messages
    assert any("openenv.grpc_libraries" in m for m in messages), messages
    assert not any("RemoteBackend" in m for m in messages), messages
    assert type(sys.modules["openenv.wire.frames"]).__name__ == "_Forwarder"  # not a second copy
