"""The catalog's certification design (openenv_catalog.certify, docs/catalog.md): a full
certificate per importer's representatives, an entry certificate for every other entry, which
catches what differs between entries; `openenv catalog` groups by kind and filters."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from click.testing import CliRunner

import openenv
from openenv_catalog import entries
from openenv_catalog.certify import certify_entry
from openenv_catalog.cli import catalog_command, plan


class Unseeded(openenv.Environment):
    """Claims determinism, but reset ignores its seed: same seed, another episode."""

    deterministic = True
    action_type: ClassVar[Any] = {"type": "integer", "minimum": 0, "maximum": 1}
    observation_type: ClassVar[Any] = {"type": "integer", "minimum": 0, "maximum": 1_000_000}
    example_actions = (0, 1)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> int:
        return random.SystemRandom().randrange(1_000_000)

    def step(self, action: int) -> openenv.StepResult:
        return openenv.StepResult(random.SystemRandom().randrange(1_000_000), reward=0.0, terminated=True)


class OutOfItsBounds(openenv.Environment):
    """Declares per-dimension bounds (RFC 0014) and breaks the second one."""

    deterministic = True
    action_type: ClassVar[Any] = {"type": "integer", "minimum": 0, "maximum": 1}
    observation_type = openenv.TensorSpec(np.float32, (2,), [-1.0, 0.0], [1.0, 0.5])
    example_actions = (0, 1)

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return np.array([0.5, 0.75], dtype=np.float32)  # 0.75 > 0.5, within the envelope [-1, 1]

    def step(self, action: int) -> openenv.StepResult:
        return openenv.StepResult(np.zeros(2, dtype=np.float32), reward=0.0, terminated=True)


def _failed(cert: dict[str, Any]) -> set[str]:
    return {r["id"] for r in cert["results"]}


def test_an_entry_certificate_certifies_a_good_entry_over_grpc() -> None:
    cert = certify_entry("import:gymnasium:FrozenLake-v1", seed=1, max_examples=3, timeout=60)
    assert cert["exit_code"] == 0, cert
    assert "CERTIFIED (entry, grpc" in cert["line"] and cert["counts"]["pass"] >= 10


def test_an_entry_certificate_catches_a_broken_seed_and_a_broken_per_dimension_bound() -> None:
    cert = certify_entry(f"{__name__}:Unseeded", seed=1, max_examples=3, timeout=60)
    assert cert["exit_code"] == 1 and "determinism.same_seed" in _failed(cert), cert
    cert = certify_entry(f"{__name__}:OutOfItsBounds", seed=1, max_examples=3, timeout=60)
    assert cert["exit_code"] == 1 and "schema.observations" in _failed(cert), cert
    assert any("element 1" in r["reason"] for r in cert["results"]), cert


def test_the_plan_certifies_representatives_in_full_and_the_rest_by_entry() -> None:
    every = entries()
    frozen = [e for e in every if e.name == "gymnasium-frozenlake-v1"]
    full, light, covered = plan(every, frozen)
    assert light == frozen and covered == {"gymnasium": ["gymnasium-blackjack-v1", "gymnasium-pendulum-v1"]}
    assert sorted(e.name for e in full) == covered["gymnasium"]  # brought in though not selected
    full, light, _ = plan(every, frozen, full_all=True)
    assert not light and "gymnasium-frozenlake-v1" in {e.name for e in full}
    natives = [e for e in every if not e.importer]
    assert natives and all(e.representative for e in natives)
    # Every importer has a representative, so every entry certificate stands on a full one.
    assert {e.importer for e in every if e.importer} == {e.importer for e in every if e.representative and e.importer}


def test_certified_records_say_which_certificate_and_what_covers_it() -> None:
    every = {e.name: e for e in entries()}
    for e in every.values():
        if not e.certified:
            continue  # test_every_catalog_entry_is_recorded_as_certified names it
        scope = e.certified.get("certificate", "full")
        assert scope == ("full" if e.representative else "entry"), e.name
        for rep in e.certified.get("covered_by", []):
            assert every[rep].certified and every[rep].certified.get("certificate", "full") == "full", (e.name, rep)


def test_openenv_catalog_groups_by_kind_and_filters() -> None:
    runner = CliRunner()
    r = runner.invoke(catalog_command, ["--kind", "toy-text", "--search", "FROZEN"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    # Grouped by kind of work first (FrozenLake is control work of kind toy-text).
    groups = [line for line in lines if not line.startswith(" ") and "(" in line]
    assert groups == ["control (2)"] and "gymnasium-frozenlake-v1" in r.output and "taxi" not in r.output
    assert all("toy-text" in line for line in lines if line.startswith("  "))
    assert lines[-1].startswith("2 of ") and "environments" in lines[-1]
    r = runner.invoke(catalog_command, ["--search", "sudoku"])
    groups = [line for line in r.output.splitlines() if not line.startswith(" ") and "(" in line]
    # reasoning-gym's and TextArena's sudoku: two kinds of work, each a group, agentic-first order.
    assert [g.split(" (")[0] for g in groups] == ["reasoning", "game"]
    r = runner.invoke(catalog_command, ["--kind", "no-such-kind"])
    assert r.exit_code != 0 and "kinds:" in r.output and "toy-text" in r.output
