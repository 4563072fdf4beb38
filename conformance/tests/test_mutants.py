"""The suite is tested by mutation: each deliberately broken environment in ``mutants/``
must be caught by the check named in its ``CAUGHT_BY``, and only that check and the ones
listed in its ``COLLATERAL`` may fail. The healthy base environment and the controls
(``control_*``: correct environments with unusual declarations) pass everything.

Every mutant misbehaves deterministically (its docstring says why), so the verdict never
depends on scheduling. The file is marked ``timing`` and stressed by ``make test-stress``
(a CPU hog per core, each timing test repeated): ``make test-stress STRESS_ARGS="--no-full
--pytest-args 'conformance/tests/test_mutants.py'"`` runs it 5 times in a row under load."""

from __future__ import annotations

import dataclasses
import os

import pytest
from conformance_testlib import control_names, mutant_module, mutant_names, mutant_target

from openenv_conformance.context import RunOptions
from openenv_conformance.registry import LEVELS, all_checks
from openenv_conformance.runner import certify

pytestmark = pytest.mark.timing

SEED = 20261129
# Small searches keep the whole file within a couple of minutes. The bound on freeing a dropped
# client's slot keeps its default (10 s) here: healthy servers must meet it on a loaded machine;
# the leaking mutant shortens it for itself (its RUN_OPTIONS), so it does not wait 10 s per probe.
OPTIONS = RunOptions(seed=SEED, max_examples=20)


def _needs(name: str) -> None:
    """Skip a mutant that cannot be built here (the sandbox mutants wrap coding_env)."""
    if name.startswith("typed_"):
        pytest.importorskip("gridworld", reason="the typed mutants wrap the gridworld reference environment")
    if name.startswith("sandbox_"):
        pytest.importorskip("coding_env", reason="the sandbox mutants wrap the coding_env reference environment")


def test_there_are_enough_mutants_each_naming_a_real_check() -> None:
    names = mutant_names()
    assert len(names) >= 12, names
    ids = {c.id for c in all_checks()}
    for name in names:
        if name.startswith("sandbox_"):
            pytest.importorskip("coding_env", reason="the sandbox mutants wrap the coding_env reference environment")
        mod = mutant_module(name)
        assert mod.__doc__ and "Rule broken" in mod.__doc__, f"{name}: say which rule it breaks"
        assert mod.CAUGHT_BY in ids, f"{name}: CAUGHT_BY {mod.CAUGHT_BY!r} is not a check id"
        assert set(mod.COLLATERAL) <= ids, f"{name}: unknown ids in COLLATERAL"
        assert mod.CAUGHT_BY not in mod.COLLATERAL
        levels = getattr(mod, "LEVELS", LEVELS)
        assert set(levels) <= set(LEVELS), f"{name}: unknown LEVELS {levels}"
        assert mod.CAUGHT_BY.split(".")[0] in levels, f"{name}: its check's level is not among its LEVELS"


def test_every_sandbox_check_has_a_mutant() -> None:
    """Each check of the sandbox level (RFC 0010) catches a sandbox with one layer removed."""
    caught = set()
    for name in mutant_names():
        if name.startswith("sandbox_"):
            pytest.importorskip("coding_env", reason="the sandbox mutants wrap the coding_env reference environment")
            caught.add(mutant_module(name).CAUGHT_BY)
    assert caught == {c.id for c in all_checks() if c.level == "sandbox"}


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_the_healthy_base_environment_passes_every_check(transport: str) -> None:
    with mutant_target("base", transport) as target:
        report = certify(target, run_options=OPTIONS)
    assert report.exit_code == 0, [(r.id, r.reason) for r in report.results if not r.ok]
    assert report.counts()["fail"] == 0
    assert report.transport == transport
    ran = {r.id for r in report.results if r.status == "pass"}
    assert "parity.grpc_vs_http" in ran  # the other transport is the parity peer
    if transport == "grpc":
        assert {
            "vector.batch_matches_sequential",
            "vector.validation_is_atomic",
            "vector.autoreset_modes",
            "vector.capacity",
            "vector.request_rules",
        } <= ran
    else:
        assert {"protocol.http_endpoints", "lifecycle.state_machine", "schema.invalid_actions"} <= ran


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["grpc", "http"])
@pytest.mark.parametrize("name", control_names())
def test_control_certifies(name: str, transport: str) -> None:
    with mutant_target(name, transport) as target:
        report = certify(target, run_options=OPTIONS)
    assert report.exit_code == 0, [(r.id, r.reason) for r in report.results if not r.ok]


@pytest.mark.slow
def test_the_healthy_base_environment_reaps_idle_sessions_on_time() -> None:
    """The control of ``idle_never_reaped``: the same server, reaping, passes the check."""
    with mutant_target("reaping") as target:
        report = certify(target, run_options=OPTIONS, checks=["concurrency.idle_reaped"])
    result = report.result("concurrency.idle_reaped")
    assert result.status == "pass", result.reason


@pytest.mark.slow
def test_http_side_mutant_is_caught_from_either_side() -> None:
    """The parity check compares the transports whichever one the checks speak."""
    with mutant_target("http_reward_perturbed", "http") as target:
        report = certify(target, run_options=OPTIONS)
    assert report.failed_ids() == ["parity.grpc_vs_http"], [(r.id, r.reason) for r in report.results if not r.ok]
    assert "2.5" in report.result("parity.grpc_vs_http").reason


@pytest.mark.slow
@pytest.mark.parametrize("name", mutant_names())
def test_mutant_is_caught_by_its_check(name: str) -> None:
    _needs(name)
    mod = mutant_module(name)
    if getattr(mod, "REQUIRES_ROOT", False) and os.geteuid() != 0:
        pytest.skip(f"{name} can only be built as root (see its docstring)")
    options = dataclasses.replace(OPTIONS, **getattr(mod, "RUN_OPTIONS", {}))
    with mutant_target(name) as target:
        report = certify(target, levels=getattr(mod, "LEVELS", None), run_options=options)
    assert report.unusable is None, report.unusable
    failed = set(report.failed_ids())
    caught = report.result(mod.CAUGHT_BY)
    assert caught.status == "fail", f"{name} was not caught by {mod.CAUGHT_BY}: {caught.status} {caught.reason}"
    assert caught.reason
    assert report.exit_code == 1
    unexpected = failed - {mod.CAUGHT_BY} - set(mod.COLLATERAL)
    assert not unexpected, {r.id: r.reason for r in report.results if r.id in unexpected}
    errors = [r for r in report.results if r.status == "error"]
    assert not errors, [(r.id, r.reason) for r in errors]


def test_the_pipelined_messages_check_runs_only_where_the_capability_is_advertised() -> None:
    """RFC 0009: a server without Capabilities.pipelined_requests is never sent one; the check
    skips there, and passes on the same server offering it."""
    checks = ["protocol.pipelined_messages"]
    with mutant_target("control_no_pipelined") as target:
        without = certify(target, run_options=OPTIONS, checks=checks).result("protocol.pipelined_messages")
    assert without.status == "skip" and "pipelined_requests" in without.reason, (without.status, without.reason)
    for name in ("base", "control_pipelined_limit_three"):
        with mutant_target(name) as target:
            offered = certify(target, run_options=OPTIONS, checks=checks).result("protocol.pipelined_messages")
        assert offered.status == "pass", (name, offered.reason)
