"""Helpers of the suite's own tests: mutant servers as targets (tests/ is put on sys.path by conftest.py)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tomllib
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parents[1]
_NOT_MUTANTS = {
    "__init__",
    "__main__",
    "base",
    "grading_base",
    "grading_steps",
    "grading_workspace",
    "gradinglib",
    "proxy",
    "reaping",
    "sandboxlib",
    "slow_steps",
    "slow_steps_cpu",
    "slow_steps_await",
    "inert",
    "offers_slow_action",
    "old_binding",
}


def mutant_names() -> list[str]:
    """Every mutant module in tests/mutants (the healthy ``base`` and the controls excluded)."""
    return sorted(
        p.stem
        for p in (TESTS_DIR / "mutants").glob("*.py")
        if p.stem not in _NOT_MUTANTS and not p.stem.startswith("control_")
    )


def control_names() -> list[str]:
    """The controls in tests/mutants (``control_*``): correct environments making unusual but
    valid declarations, which must certify."""
    return sorted(p.stem for p in (TESTS_DIR / "mutants").glob("control_*.py"))


def mutant_target(name: str, transport: str = "grpc"):  # -> ProcessTarget
    """A server of ``mutants.NAME`` in a subprocess, as a certification target: its gRPC and
    HTTP sides, the checks speaking ``transport`` (the other side is the parity peer)."""
    from openenv_conformance.targets import ProcessTarget, TargetOptions

    target = ProcessTarget(
        lambda ready, http: [sys.executable, "-m", "mutants", f"mutants.{name}", ready, http],
        spec=f"mutant:{name}",
        options=TargetOptions(cwd=str(TESTS_DIR), ready_timeout=60.0),
        http_ready=True,
        factory=f"mutants.{name}:Env",  # the grading level reads its probes with it
    )
    target.use(transport)
    return target


def mutant_module(name: str):
    return importlib.import_module(f"mutants.{name}")


def reference_factories() -> list[tuple[Path, str | None]]:
    """Every environment in envs/ (its directory) with its ``[tool.openenv] factory`` (None
    when it declares none: :func:`factory_of` finds it)."""
    out = []
    for pp in sorted((ROOT / "envs").glob("*/pyproject.toml")):
        data = tomllib.loads(pp.read_text())
        out.append((pp.parent, data.get("tool", {}).get("openenv", {}).get("factory")))
    return out


def factory_of(env_dir: Path, factory: str | None) -> str | None:
    """``factory``, else the single ``openenv.Environment`` subclass defined in ``<package>.server``."""
    if factory:
        return factory
    import openenv

    for server in sorted(env_dir.glob("src/*/server.py")):
        module = f"{server.parent.name}.server"
        mod = importlib.import_module(module)
        classes = [
            c
            for _, c in inspect.getmembers(mod, inspect.isclass)
            if issubclass(c, openenv.Environment) and c.__module__ == module
        ]
        if len(classes) == 1:
            return f"{module}:{classes[0].__name__}"
    return None


def runs_code(factory: str) -> bool:
    """Whether the environment ``module:Class`` declares a tool running submitted code (its
    tools' annotations carry ``openenv/sandbox``, RFC 0010)."""
    module, _, name = factory.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return any("openenv/sandbox" in (t.descriptor.annotations or {}) for t in cls.tools().values())


#: .ci/run certifies every environment's image (all levels, over gRPC) before the tests, with
#: the suite's default examples or the environment's certify-args, and writes each report here
#: as ``<env dir name>.json``. That certification is the gRPC one test_reference_envs makes of
#: the same code (same transport, as many examples), so in CI it makes its assertions on that
#: report instead of certifying the environment again. (Not test_sandbox_level: its canary and
#: process checks observe the host, which an image's certification cannot.)
IMAGE_REPORTS = "OPENENV_CI_IMAGE_REPORTS"


def image_report(env_name: str) -> dict | None:
    """The report of ``envs/<env_name>``'s image certified in this CI run, or None (not in CI,
    or an environment without an image: the test certifies the module)."""
    where = os.environ.get(IMAGE_REPORTS)
    if not where:
        return None
    path = Path(where) / f"{env_name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


#: The capacity a test serves a reference environment with when it declares more. echo_env and
#: gridworld declare 1024 sessions (catch, math_env and wordle 256), and the capacity checks open
#: every slot (concurrency.disconnect_frees_slot twice): ~7 s of a gRPC certification and ~13 s
#: of an HTTP one on a quiet machine, twice that on CI's, for the same code as at 64. CI's image
#: certifications (.ci/run) keep each environment's declared capacity.
TEST_CAPACITY = 64
#: The handshake deadline a test serves with: protocol.handshake_deadline waits it out (the
#: runtime's default is 10 s; the image certifications keep it).
TEST_HANDSHAKE_TIMEOUT_S = 3


def quick_serve_args(factory: str) -> list[str]:
    """``openenv serve`` arguments for certifying ``module:Class`` in a test: the handshake
    deadline above, and the capacity above when the class declares more (never raised)."""
    module, _, name = factory.partition(":")
    cls = getattr(importlib.import_module(module), name)
    args = [f"--handshake-timeout={TEST_HANDSHAKE_TIMEOUT_S}"]
    if getattr(cls, "concurrent_sessions", True) and getattr(cls, "max_sessions", 0) > TEST_CAPACITY:
        args.append(f"--max-sessions={TEST_CAPACITY}")
    return args
