"""Every reference environment in envs/ passes every check (skips only with a reason).

Environments are discovered from ``envs/*/pyproject.toml``: the factory is
``[tool.openenv] factory = "module:Class"``, or, when an environment does not declare it,
the single ``openenv.Environment`` subclass defined in ``<package>.server``.

The ``sandbox`` level (RFC 0010) is left to test_sandbox_level.py, which certifies it, over
both transports, for every environment here that runs submitted code, and checks that it
skips for one that does not; the ``grading`` level (RFC 0015) to test_grading_level.py."""

from __future__ import annotations

import fnmatch
import importlib
import itertools
import tomllib
from pathlib import Path

import pytest
from conformance_testlib import factory_of, image_report, quick_serve_args, reference_factories

from openenv_catalog.certify import ENTRY_CHECKS
from openenv_conformance.registry import LEVELS
from openenv_conformance.runner import certify
from openenv_conformance.targets import TargetOptions

#: Every level but sandbox and grading (their own files certify them: test_sandbox_level.py,
#: test_grading_level.py).
NOT_SANDBOX = [lv for lv in LEVELS if lv not in ("sandbox", "grading")]
#: Examples per property search. CI also certifies each reference environment's image (.ci/run:
#: with its [tool.openenv] certify-args, 20 or 30 for most, else the suite's 100) and the catalog
#: at 10: here, 25 cover both transports and tools-only mode, each run with the whole suite
#: (100 cost ~1,800 s of CPU per CI run, over half of it the HTTP side's).
EXAMPLES = 25
#: Examples per search of the HTTP side's and tools-only mode's certifications. What they add to
#: the image's gRPC certification (its certify-args' examples, or 100) is the translation of the
#: environment's types to OpenEnv's JSON and back, the parity of the two sides, and the tools-only
#: rules: generic code, each environment's types exercised by every search at 10 examples as the
#: catalog's are (CI time: the HTTP side was over half of this file's CPU when last measured).
SIDE_EXAMPLES = 10


#: The HTTP side's checks for an environment whose [tool.openenv] says ``certify-http = "entry"``
#: (browser_env, harbor_env: every step drives Chromium or a sandboxed shell). The bridge's code
#: is the same for every environment and is certified in full over HTTP on the others (and by
#: test_transports.py); what differs per environment is its types through OpenEnv's JSON, as the
#: catalog's entry certificates say (openenv_catalog.certify.ENTRY_CHECKS: descriptors,
#: observations, actions, rewards, tools, the lifecycle's basics), plus the HTTP endpoints, the
#: whole state machine over HTTP, and the parity of the two sides.
HTTP_ENTRY_CHECKS = (*ENTRY_CHECKS, "protocol.http_endpoints", "lifecycle.state_machine", "parity.*")


def _openenv_table(env_dir: Path) -> dict[str, object]:
    return tomllib.loads((env_dir / "pyproject.toml").read_text()).get("tool", {}).get("openenv", {})


def _certify_args(env_dir: Path) -> dict[str, str]:
    """The environment's [tool.openenv] certify-args (what its image's certification is given),
    as ``{flag: value}``."""
    args = _openenv_table(env_dir).get("certify-args", [])
    assert isinstance(args, list)
    return dict(itertools.pairwise(str(a) for a in args))


def _examples(env_dir: Path, most: int = EXAMPLES) -> int:
    """``most``, or fewer when the environment's [tool.openenv] certify-args ask its image's
    certification for fewer (an environment whose every step runs sandboxed code)."""
    value = _certify_args(env_dir).get("--max-examples")
    return min(most, int(value)) if value else most


def _timeout(env_dir: Path) -> float:
    """The certifier's per-answer wait: the default (10 s), or more when the environment's
    certify-args ask for more (browser_env: every step drives Chromium, 60 s)."""
    value = _certify_args(env_dir).get("--timeout")
    return max(10.0, float(value)) if value else 10.0


def _fallback_factory(env_dir: Path) -> str | None:
    return factory_of(env_dir, None)


def reference_envs() -> list:
    return [pytest.param(d, f, id=d.name) for d, f in reference_factories()]


@pytest.mark.slow
@pytest.mark.parametrize(("env_dir", "factory"), reference_envs())
def test_reference_environment_passes_every_check(env_dir: Path, factory: str | None) -> None:
    factory = factory or _fallback_factory(env_dir)
    assert factory, (
        f'{env_dir.name}: declare [tool.openenv] factory = "module:Class" in its pyproject.toml '
        "(or define a single Environment subclass in <package>.server)"
    )
    image = image_report(env_dir.name)
    if image is not None:
        # The image's certification in this CI run: the same assertions, on its report.
        assert image["target"].startswith("docker:") and image["transport"] == "grpc", image["target"]
        bad = [(r["id"], r["status"], r["reason"]) for r in image["results"] if r["status"] in ("fail", "error")]
        assert not bad and image["unusable"] is None, bad or image["unusable"]
        assert image["exit_code"] == 0 and image["certified"], image["verdict"]
        assert {r["level"] for r in image["results"]} >= set(NOT_SANDBOX), "the image was certified at fewer levels"
        for r in image["results"]:
            if r["status"] == "skip":
                assert r["reason"], f"{r['id']} skipped without a reason"
        return
    report = certify(
        f"python:{factory}",
        levels=NOT_SANDBOX,
        seed=20261129,
        max_examples=_examples(env_dir),
        timeout=_timeout(env_dir),
        target_options=TargetOptions(serve_args=quick_serve_args(factory)),
    )
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    bad = [(r.id, r.status, r.reason, r.example) for r in report.results if r.status in ("fail", "error")]
    assert not bad, bad
    assert report.exit_code == 0
    for r in report.results:
        if r.status == "skip":
            assert r.reason, f"{r.id} skipped without a reason"


@pytest.mark.slow
@pytest.mark.parametrize(("env_dir", "factory"), reference_envs())
def test_reference_environment_passes_over_http(env_dir: Path, factory: str | None) -> None:
    """The same environment certified over OpenEnv's JSON protocol (the HTTP side of
    `openenv serve`), compared with its gRPC side by the parity check."""
    factory = factory or _fallback_factory(env_dir)
    assert factory
    mode = _openenv_table(env_dir).get("certify-http", "full")
    assert mode in ("full", "entry"), f'{env_dir.name}: certify-http is "full" or "entry", not {mode!r}'
    report = certify(
        f"python:{factory}",
        levels=NOT_SANDBOX,
        checks=HTTP_ENTRY_CHECKS if mode == "entry" else None,
        seed=20261129,
        max_examples=_examples(env_dir, SIDE_EXAMPLES),
        timeout=_timeout(env_dir),
        target_options=TargetOptions(transport="http", serve_args=quick_serve_args(factory)),
    )
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    bad = [(r.id, r.status, r.reason, r.example) for r in report.results if r.status in ("fail", "error")]
    assert not bad, bad
    assert report.exit_code == 0 and report.transport == "http" and report.target_url.startswith("http://")
    for cid in (
        "protocol.http_endpoints",
        "lifecycle.state_machine",
        "schema.observations",
        "schema.invalid_actions",
    ):
        assert report.result(cid).status == "pass", (cid, report.result(cid).reason)
    # An environment that declares itself nondeterministic (coding_env: measured run times;
    # chess_env: the engine's timing) has its descriptions and tool lists compared only.
    parity = report.result("parity.grpc_vs_http")
    assert parity.status == ("skip" if report.declared_nondeterministic else "pass"), parity.reason
    if mode == "full":
        assert report.result("protocol.request_ids").status == "skip"
    else:  # the entry checks ran, and nothing else
        extra = [r.id for r in report.results if not any(fnmatch.fnmatchcase(r.id, p) for p in HTTP_ENTRY_CHECKS)]
        assert not extra, extra


@pytest.mark.slow
@pytest.mark.parametrize(("env_dir", "factory"), reference_envs())
def test_reference_tool_environment_passes_in_tools_only_mode(env_dir: Path, factory: str | None) -> None:
    factory = factory or _fallback_factory(env_dir)
    assert factory
    module, _, name = factory.partition(":")
    if not getattr(importlib.import_module(module), name).tools():
        pytest.skip(f"{env_dir.name} has no tools: tools-only mode does not apply")
    report = certify(
        f"python:{factory}",
        levels=NOT_SANDBOX,
        seed=20261129,
        max_examples=_examples(env_dir, SIDE_EXAMPLES),
        timeout=_timeout(env_dir),
        target_options=TargetOptions(serve_args=["--tools-only", *quick_serve_args(factory)]),
    )
    bad = [(r.id, r.status, r.reason) for r in report.results if r.status in ("fail", "error")]
    assert report.exit_code == 0, bad or report.unusable
    assert report.result("lifecycle.tools_only").status == "pass"
    assert report.result("tools.valid_arguments").status == "pass"


def test_reference_environments_are_discovered() -> None:
    names = {p.id for p in reference_envs()}
    assert {"echo_env", "gridworld"} <= names, names
