"""Environments of the snapshot tests (``test_snapshot_safety.py``): their state is made of
their own types, so the default snapshot hooks pickle classes of this module.

Importable by reference as ``openenv_snapshot_envs`` (``conftest.py`` puts this directory on
``sys.path``), so ``--isolation process`` workers can build them.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import ipaddress
import os
import random
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import openenv
from openenv.rubrics import ExponentialDiscountingTrajectoryRubric


class Side(enum.Enum):
    """Which way an entry moves the balance."""

    CREDIT = "credit"
    DEBIT = "debit"


@dataclasses.dataclass
class Entry:
    """One booked step."""

    step: int
    amount: Decimal
    side: Side


@dataclasses.dataclass(frozen=True)
class Account:
    """Whose ledger it is (frozen: restored without calling its constructor)."""

    owner: str
    opened: datetime.date


def _episode_score(trajectory: list[tuple[Any, Any]]) -> float:
    """The final balance, read from the last observation (a module-level function: rubric
    configuration, which snapshots leave out)."""
    return float(trajectory[-1][1]["balance"])


class Ledger(openenv.Environment):
    """Books integer amounts (credit when positive, debit when negative; 0 closes the episode).

    Its state holds instances of this module's dataclasses and enum, a ``random.Random`` (the
    ``noise`` of every observation), a ``collections.Counter`` and ``Decimal`` amounts, and a
    trajectory rubric keeps per-episode state: the default hooks snapshot all of it. The
    observation carries the id of the process it runs in (``--isolation process``)."""

    name = "ledger"
    action_type = int
    deterministic = True
    snapshots = True
    max_sessions = 8
    rubric = ExponentialDiscountingTrajectoryRubric(_episode_score, gamma=0.5, name="episode")

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.account = Account("ada", datetime.date(2024, 1, 1))
        self._start(None)

    def _start(self, seed: int | None) -> None:
        self.rng = random.Random(seed)
        self.entries: list[Entry] = []
        self.totals: collections.Counter[Side] = collections.Counter()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self._start(seed)
        return self._observe()

    def step(self, action: int) -> openenv.StepResult:
        side = Side.CREDIT if action >= 0 else Side.DEBIT
        entry = Entry(len(self.entries) + 1, Decimal(abs(action)) / 4, side)
        self.entries.append(entry)
        self.totals[side] += entry.amount
        return openenv.StepResult(self._observe(), terminated=action == 0)

    def _balance(self) -> float:
        return float(self.totals[Side.CREDIT] - self.totals[Side.DEBIT])

    def _observe(self) -> dict[str, Any]:
        return {
            "balance": self._balance(),
            "entries": len(self.entries),
            "noise": self.rng.random(),
            "pid": os.getpid(),
        }

    def state(self) -> dict[str, Any]:
        entries = getattr(self, "entries", [])
        return {
            "owner": self.account.owner,
            "opened": self.account.opened.isoformat(),
            "entries": [[e.step, str(e.amount), e.side.value] for e in entries],
            "balance": self._balance(),
        }


class Hosts(openenv.Environment):
    """Keeps the addresses it was sent as ``ipaddress.IPv4Address`` objects: a standard-library
    class the snapshot rules do not admit by default."""

    name = "hosts"
    action_type = str
    snapshots = True
    max_sessions = 4

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.seen: list[ipaddress.IPv4Address] = []
        return {"seen": []}

    def step(self, action: str) -> dict[str, Any]:
        self.seen.append(ipaddress.IPv4Address(action))
        return {"seen": [str(a) for a in self.seen]}

    def state(self) -> dict[str, Any]:
        return {"seen": [str(a) for a in getattr(self, "seen", [])]}


class AdmittedHosts(Hosts):
    """:class:`Hosts` naming the class in ``snapshot_globals``."""

    name = "admitted_hosts"
    snapshot_globals = ("ipaddress:IPv4Address",)


class Judged(openenv.Environment):
    """A counter graded by an LLM judge whose API key and URL are the server's secrets; it
    snapshots with the default hooks (the judge is never called by these tests)."""

    name = "judged"
    snapshots = True
    rubric = openenv.rubrics.LLMJudge(
        "Rate {action}.",
        base_url="http://judge.invalid/v1",
        model="judge",
        api_key="sk-the-servers-secret",
        headers={"X-Org": "the-servers-org"},
    )

    def reset(self, *, seed: int | None = None, episode_id: str | None = None, options: Any = None) -> Any:
        self.total = 0
        return openenv.StepResult(self.total, reward=0.0)

    def step(self, action: Any) -> Any:
        self.total += int(action)
        return openenv.StepResult(self.total, reward=0.0)
