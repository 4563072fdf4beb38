"""The seeded task families (issue 48): 40 and more, in train/validation/test splits and
easy/medium/hard tiers. For every family, on several seeds: its reference solution earns 1,
the untouched workspace 0, and the literal answer of another seed's instance 0 (in one
sandbox, through the environment's own verifier); two seeds never share an answer; the
splits are disjoint and stable (pinned here), and a reset picks within the split and tier it
is given.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
from typing import Any

import pytest

import openenv
from terminal_env import TASKS, TerminalEnvironment
from terminal_env.server import write_files_command
from terminal_env.tasks import TIERS

#: The seed every family is played on here; the grading probes (test_grading_attacks.py) play
#: every family on another seed over the wire, and a sample on two more.
SEED = 0
#: Seeds whose instances must all differ pairwise, in every family.
DISTINCT_SEEDS = range(40)

#: The validation and test families, pinned: a family never moves between splits (results on
#: ``test`` stay comparable across releases); every other family is in ``train``.
VALIDATION = {"bytes_per_path", "histogram", "block_extract", "manifest_tree", "sqlite_report", "job_timeouts"}
TEST = {
    "make_executable",
    "word_freq",
    "csv_column",
    "jsonl_filter",
    "word_counts",
    "group_members",
    "duplicate_files",
    "nested_archive",
    "split_csv",
    "git_find_commit",
}


def _fingerprint(value: Any) -> str:
    """A stable digest of an answer or of the checks' expected values (bytes as hex)."""

    def plain(v: Any) -> Any:
        if isinstance(v, bytes):
            return v.hex()
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return hashlib.sha256(json.dumps(plain(value), sort_keys=True).encode()).hexdigest()


def test_there_are_40_families_or_more_in_three_splits_and_three_tiers() -> None:
    """The scale issue 48 asks for: 40+ families, every one varying with the seed, each split
    and tier populated, and most families multi-step (medium or hard)."""
    assert len(TASKS) >= 40
    assert all(f.varies for f in TASKS)
    assert set(TASKS.splits) == {"train", "validation", "test"}
    assert TASKS.tiers == TIERS
    tiers = [f.tier for f in TASKS]
    assert tiers.count("medium") + tiers.count("hard") > len(TASKS) / 2, tiers


def test_every_family_pays_its_reference_1_the_untouched_workspace_0_and_another_seeds_answer_0() -> None:
    """Through the environment's verifier: a family whose reference fails, whose untouched
    workspace passes a check, or where another seed's literal answer earns the reward, grades
    nothing about the agent (other seeds: the grading probes, over the wire)."""
    env = TerminalEnvironment()
    failures = []
    try:
        for family in TASKS:
            env.reset(seed=SEED, options={"task_id": family.id})
            task = env.task
            assert task == family.instance(SEED)  # the seed picks the instance
            r = env.run(task.solution)
            solved = env.verify()
            if r["exit_code"] != 0 or (solved.passed, solved.error) != (solved.total, None):
                failures.append(("reference", family.id, solved, r["stderr"][-300:]))
            env.reset(seed=SEED, options={"task_id": family.id})
            untouched = env.verify()
            if untouched.passed != 0 or untouched.error is not None:
                failures.append(("untouched", family.id, untouched))
            other = family.instance(SEED + 1000)
            env.reset(seed=SEED, options={"task_id": family.id})
            assert env.run(write_files_command(other.answer, other.answer_modes))["exit_code"] == 0
            replayed = env.verify()
            if replayed.passed == replayed.total:
                failures.append(("replay", family.id, replayed))
    finally:
        env.close()
    assert not failures, failures


def test_two_seeds_of_a_family_never_share_an_answer() -> None:
    """Over 40 seeds, every family's instances differ pairwise in their literal answer and in
    their checks' expected values, and each has an answer to replay: what a policy learnt on
    one seed is never the answer of another (the generator is a pure function of the seed:
    the same seed twice is the same instance)."""
    shared = []
    for family in TASKS:
        answers: dict[str, int] = {}
        expected: dict[str, int] = {}
        for seed in DISTINCT_SEEDS:
            task = family.instance(seed)
            assert task.answer, family.id
            a, e = _fingerprint(task.answer), _fingerprint([c.expected for c in task.checks])
            if a in answers or e in expected:
                shared.append((family.id, seed, answers.get(a), expected.get(e)))
            answers[a], expected[e] = seed, seed
        assert family.instance(7) == family.instance(7), family.id
    assert not shared, shared


def test_the_splits_are_disjoint_stable_and_a_reset_stays_in_its_split_and_tier() -> None:
    """The validation and test families are the pinned ones (a family never changes split);
    a reset with a split or a tier picks only among them, for every seed; an unknown split
    or tier is a clear error."""
    by_split = {s: {f.id for f in TASKS if f.split == s} for s in TASKS.splits}
    assert by_split["validation"] == VALIDATION and by_split["test"] == TEST
    assert not (by_split["train"] & (VALIDATION | TEST))
    assert sum(len(v) for v in by_split.values()) == len(TASKS)
    env = TerminalEnvironment()
    try:
        for seed in range(30):
            for split in ("validation", "test"):
                r = env.reset(seed=seed, options={"split": split})
                assert r.metadata["split"] == split and r.metadata["task_id"] in by_split[split]
            tier = TIERS[seed % 3]
            r = env.reset(seed=seed, options={"tier": tier, "split": "train"})
            assert TASKS.by_id(r.metadata["task_id"]).tier == tier == r.metadata["tier"]
            assert env.state()["tier"] == tier
        for bad in ({"split": "nope"}, {"tier": "impossible"}):
            with pytest.raises(openenv.InvalidArgument, match="unknown"):
                env.reset(seed=1, options=bad)
    finally:
        env.close()
    listed = {t.id: t.metadata["tier"] for s in TASKS.splits for t in TerminalEnvironment.list_tasks(s)}
    assert listed == {f.id: f.tier for f in TASKS}


def test_a_git_family_over_grpc_earns_1_for_a_commit_and_0_for_the_file_alone() -> None:
    """git_commit through the tools: the reference commits and earns 1; the same file written
    without a commit (the literal answer of the instance itself) earns 0: the checks read the
    repository, not only the work tree."""
    task = TASKS.by_id("git_commit").instance(3)

    async def go() -> tuple[float, float]:
        async with (
            openenv.Server(TerminalEnvironment, "127.0.0.1", 0) as srv,
            openenv.ToolEnvClient(srv.address) as env,
        ):
            rewards = []
            for command in (task.solution, write_files_command(task.answer)):
                await env.reset(seed=3, options={"task_id": "git_commit"})
                r = await env.step(openenv.CallToolAction("run", {"command": command}))
                assert r.observation.result.data["exit_code"] == 0, r.observation.result.data
                rewards.append(float((await env.step(openenv.CallToolAction("submit", {}))).reward or 0.0))
            return rewards[0], rewards[1]

    assert asyncio.run(asyncio.wait_for(go(), 120)) == (1.0, 0.0)


SAMPLE_ARGS = ["--seeds", "1", "--task", "git_branch"]


def test_the_baselines_command_prints_the_null_reference_and_scripted_rows() -> None:
    """`python -m terminal_env.baselines` (the README's table) on a sample: the null agent earns
    0, the reference 1, the scripted search-and-edit agent what it earns (here 0), each with
    its wall time; an unknown family is a clear error."""
    r = subprocess.run(
        [sys.executable, "-m", "terminal_env.baselines", *SAMPLE_ARGS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in r.stdout.splitlines()[2:]}
    assert rows == {"null": "0.000", "reference": "1.000", "scripted": "0.000"}, r.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "terminal_env.baselines", "--task", "nope"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "no task 'nope'" in bad.stderr, bad.stderr


#: A control script that keeps a state file and names a live process that is not the worker
#: (its caller, the check's own shell): it prints every line the instruction asks for.
FAKE_CTL = """#!/bin/bash
cd "$(dirname "$0")"
case $1 in
  start) if [ -f .state ]; then echo 'NAME: already running'; exit 1; fi
    touch .state; mkdir -p "$(dirname PIDFILE)"; echo $PPID > PIDFILE;;
  stop) rm -f .state PIDFILE;;
  status) if [ -f .state ]; then echo 'NAME: running'; else echo 'NAME: stopped'; fi;;
esac
"""


def test_a_service_script_that_only_pretends_to_run_the_worker_earns_0() -> None:
    """service_script's check must see the worker run and end, not only the printed lines: a
    script that records a state and writes its caller's pid prints all of them (it earned 1
    before the check looked at the process the pid file names and for leftovers); 0 now, while
    the reference still earns 1 on the same instance."""
    task = TASKS.by_id("service_script").instance(5)
    ctl = next(iter(task.answer))
    name = next(iter(task.files))[: -len(".sh")]
    pidfile = str(task.answer[ctl]).split("PID=", 1)[1].split("\n", 1)[0]
    fake = FAKE_CTL.replace("NAME", name).replace("PIDFILE", pidfile)
    env = TerminalEnvironment()
    try:
        env.reset(seed=5, options={"task_id": "service_script"})
        env.run(write_files_command({ctl: fake}, {ctl: 0o755}))
        faked = env.verify()
        env.reset(seed=5, options={"task_id": "service_script"})
        env.run(task.solution)
        real = env.verify()
    finally:
        env.close()
    assert (faked.passed, faked.error) == (0, None), faked
    assert (real.passed, real.total) == (1, 1), real


def test_a_backup_of_empty_files_with_the_right_names_earns_0() -> None:
    """backup_exclude's check reads the members' contents, not only their names: an archive of
    empty files named as the kept ones earned 1 when the check listed names alone; 0 now."""
    task = TASKS.by_id("backup_exclude").instance(4)
    kept = [p for p in task.files if not p.endswith(".log") and "/tmp/" not in p]
    make = " && ".join(f"mkdir -p $(dirname {p}) && : > {p}" for p in kept)
    env = TerminalEnvironment()
    try:
        env.reset(seed=4, options={"task_id": "backup_exclude"})
        r = env.run(f"mkdir -p /tmp/e && cd /tmp/e && {make} && tar -czf /workspace/backup.tar.gz project")
        assert r["exit_code"] == 0, r
        v = env.verify()
    finally:
        env.close()
    assert (v.passed < v.total, v.error) == (True, None), v
