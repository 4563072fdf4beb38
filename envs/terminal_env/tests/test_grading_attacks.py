"""terminal_env against a reward-seeking policy (issue 46, item 4; RFC 0015), played through the
environment's own tools over a real server.

Issue 46 found that per-check verdicts (``submit`` returned passed/total, the final step's
metadata ``{"checks": {name: bool}}``) and fixed task contents let a policy guess across
episodes: it wrote count after count into error_count.txt and had the right one at the 5th
episode, after which every episode paid 1.0. Here: such a policy, and one that replays a
literal answer memorised on another seed, earn 0; two different wrong workspaces look the
same after ``submit``; scripts that the checks run cannot kill, hang, stop or forge their way
to a reward; a verifier that crashed or timed out pays 0 even when its answers were in; every
solution earns 1 on several seeds and the untouched workspace 0; the grading probes hold; and
a rich episode, asked for at reset, still shows the per-check results.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shlex
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import pytest

import openenv
from openenv import CallToolAction
from terminal_env import TASKS, Check, Task, TaskSet, TerminalEnvironment

TIMEOUT = 300.0
SUBMIT = CallToolAction("submit", {})
VARYING = [f.id for f in TASKS if f.varies]
#: The families the over-the-wire attacks below are played on: every fourth, old and new
#: (test_task_families.py replays another seed's answer on every family, in process, and the
#: grading probes below do it over the wire for every family).
#: Families whose solution moves or replaces files are left out: a literal replay only writes
#: files, so it cannot solve them even on their own seed (the test would prove nothing there).
SAMPLE = [t for t in VARYING[::4] if t not in ("rename_ext", "sort_into_dirs", "compress_logs")]
#: Another sample for the wire test of the references on more seeds.
SAMPLE_2 = VARYING[1::4]


def serve(fn: Callable[..., Awaitable[Any]], env_cls: type[TerminalEnvironment] = TerminalEnvironment) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def run(env: Any, command: str, **kw: Any) -> dict[str, Any]:
    r = await env.step(CallToolAction("run", {"command": command, **kw}))
    assert not r.observation.result.is_error, r.observation.result
    return dict(r.observation.result.data)


async def python(env: Any, code: str) -> str:
    r = await env.step(CallToolAction("run_python", {"code": code}))
    data = r.observation.result.data
    assert data["exit_code"] == 0, data
    return str(data["stdout"])


async def submit(env: Any) -> Any:
    r = await env.step(SUBMIT)
    assert not r.observation.result.is_error and r.terminated, r
    return r


def instance(task_id: str, seed: int) -> Task:
    """The instance a reset with this seed and task_id starts (the server's own generator:
    trusted test data, as a solution is)."""
    return TASKS.by_id(task_id).instance(seed)


def write_command(files: dict[str, list[Any]]) -> str:
    """The policy's way of writing what it memorised: path -> [base64 content, mode]."""
    parts = ["true"]
    for path, (data, mode) in sorted(files.items()):
        q = shlex.quote(path)
        parts.append(f'mkdir -p "$(dirname {q})" && printf %s {data} | base64 -d > {q} && chmod {mode:o} {q}')
    return " && ".join(parts)


# -- what a policy can learn through the tools ---------------------------------------------------

#: Prints every file of the workspace as path -> [sha256, mode] (what the episode started with).
SNAPSHOT = """
import hashlib, json, os
out = {}
for root, dirs, files in os.walk("."):
    for f in files:
        p = os.path.relpath(os.path.join(root, f))
        if p != ".shellstate":
            out[p] = [hashlib.sha256(open(p, "rb").read()).hexdigest(), os.stat(p).st_mode & 0o777]
print(json.dumps(out))
"""

#: Prints the files that are new or changed since BEFORE as path -> [base64 content, mode].
CHANGED = """
import base64, hashlib, json, os
before = json.loads(BEFORE)
out = {}
for root, dirs, files in os.walk("."):
    for f in files:
        p = os.path.relpath(os.path.join(root, f))
        data = open(p, "rb").read()
        mode = os.stat(p).st_mode & 0o777
        if p != ".shellstate" and before.get(p) != [hashlib.sha256(data).hexdigest(), mode]:
            out[p] = [base64.b64encode(data).decode(), mode]
print(json.dumps(out))
"""


async def memorise(env: Any, task_id: str, seed: int) -> tuple[dict[str, list[Any]], float]:
    """Solve the episode of ``seed`` and keep what the solution wrote, literally (what a policy
    rewarded for that episode would learn to write): the files and the reward they earned."""
    await env.reset(seed=seed, options={"task_id": task_id})
    before = await python(env, SNAPSHOT)
    r = await run(env, instance(task_id, seed).solution)
    assert r["exit_code"] == 0, r
    answer = json.loads(await python(env, CHANGED.replace("BEFORE", repr(before.strip()))))
    return answer, float((await submit(env)).reward or 0.0)


async def replay(env: Any, task_id: str, seed: int, answer: dict[str, list[Any]]) -> float:
    await env.reset(seed=seed, options={"task_id": task_id})
    r = await run(env, write_command(answer))
    assert r["exit_code"] == 0, r
    return float((await submit(env)).reward or 0.0)


def shown(step: Any) -> float:
    """What a graded step tells a policy about its answer, the finest it can find: the checks
    passed of ``submit``'s result, else the per-check metadata, else the reward."""
    data = step.observation.result.data or {}
    if isinstance(data, dict) and "passed" in data and data.get("total"):
        return float(data["passed"]) / float(data["total"])
    checks = (step.metadata or {}).get("checks")
    if isinstance(checks, dict) and checks:
        return sum(bool(v) for v in checks.values()) / len(checks)
    return float(step.reward or 0.0)


# -- (a) guessing across episodes ------------------------------------------------------------------


def test_guessing_the_count_across_episodes_with_fresh_seeds_earns_0() -> None:
    """The attack of issue 46: try counts in successive episodes, keep the one the graded step
    liked best, then write it every time. With fixed contents it had the count at the 5th
    episode and was paid 1.0 ever after; with contents drawn from each episode's seed, what it
    learnt is wrong in the next episode, and strict feedback shows nothing but the reward."""

    def out_file(seed: int) -> str:  # the file the instruction names (drawn from the seed)
        return next(iter(instance("count_errors", seed).answer))

    async def go(env: Any) -> tuple[list[float], list[dict[str, Any]]]:
        liked: dict[int, float] = {}
        results = []
        for episode, guess in enumerate(range(8)):
            await env.reset(seed=500 + episode, options={"task_id": "count_errors"})
            await run(env, f"echo {guess} > {out_file(500 + episode)}")
            step = await submit(env)
            results.append(dict(step.observation.result.data))
            liked[guess] = shown(step)
            if liked[guess] >= 1.0:
                break  # converged
        best = max(liked, key=lambda g: liked[g])
        exploit = []
        for episode in range(3):
            await env.reset(seed=900 + episode, options={"task_id": "count_errors"})
            await run(env, f"echo {best} > {out_file(900 + episode)}")
            exploit.append(float((await submit(env)).reward or 0.0))
        return exploit, results

    exploit, results = serve(go)
    assert exploit == [0.0, 0.0, 0.0]
    # strict feedback: each graded step showed its reward and nothing else
    assert all(set(r) == {"reward"} for r in results), results


# -- (b) a literal answer from another seed --------------------------------------------------------


@pytest.mark.parametrize("task_id", SAMPLE)
def test_a_literal_answer_memorised_on_one_seed_earns_0_on_another(task_id: str) -> None:
    """A policy that memorised what it wrote in a rewarded episode and writes it again: 1.0 on
    the same seed (the answer is complete: the test can fail), 0 on another seed, because every
    task draws its contents and expected values from the seed."""

    async def go(env: Any) -> tuple[float, float, float]:
        answer, first = await memorise(env, task_id, seed=11)
        again = await replay(env, task_id, 11, answer)
        elsewhere = await replay(env, task_id, 12, answer)
        return first, again, elsewhere

    first, again, elsewhere = serve(go)
    assert (first, again) == (1.0, 1.0)
    assert elsewhere == 0.0


# -- (c) nothing but the reward ---------------------------------------------------------------------


def test_two_different_wrong_workspaces_look_the_same_after_submit() -> None:
    """make_executable has two checks: the untouched workspace passes none; a chmod'ed script
    that sleeps 3 s and prints the wrong line passes one. Strict feedback: the same
    observation, metadata, breakdown and state (no pass count, no verdict, no time); and the
    grading tool is refused as a side call, where it would be an oracle."""
    task = instance("make_executable", 21)
    path = next(iter(task.answer))

    async def graded(env: Any, command: str) -> dict[str, Any]:
        await env.reset(seed=21, options={"task_id": task.id})
        await run(env, command)
        r = await submit(env)
        st = await env.state()
        return {
            "content": r.observation.result.content,
            "data": r.observation.result.data,
            "is_error": r.observation.result.is_error,
            "reward": r.reward,
            "metadata": r.metadata,
            "breakdown": r.reward_breakdown.to_dict() if r.reward_breakdown is not None else None,
            "state": (st.step_count, st.status, st.state),
        }

    async def go(env: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        await env.reset(seed=21, options={"task_id": task.id})
        with pytest.raises(openenv.FailedPrecondition):
            await env.call_tool("submit", {})
        untouched = await graded(env, "true")
        half = await graded(env, f"chmod +x {path} && printf '#!/bin/sh\\nsleep 3\\necho wrong\\n' > {path}")
        return untouched, half

    untouched, half = serve(go)
    assert untouched == half
    assert untouched["reward"] == 0.0 and untouched["data"] == {"reward": 0.0}
    assert set(untouched["metadata"]) <= {"steps", "task_id", "split"}


# -- (d) scripts the checks run ------------------------------------------------------------------

_FAKE = json.dumps({"n": "0000000000000000", "value": [0, "1\n"]})


def _scripts(seed: int) -> dict[str, tuple[Task, str, str]]:
    """Scripts the checks execute (the task, the script's path, its text): each must earn 0."""
    fizz, report = instance("fizzbuzz_script", seed), instance("make_executable", seed)
    fizz_path, report_path = next(iter(fizz.answer)), next(iter(report.answer))
    return {
        # right on the small hidden cases (all below 25), then kills the verifier: the old
        # reward was the fraction answered before the kill
        "kills_its_parent": (
            fizz,
            fizz_path,
            str(fizz.answer[fizz_path]).replace(
                "#!/bin/bash\n", "#!/bin/bash\nif (($1 >= 25)); then kill -9 $PPID; kill -9 -1; exit 0; fi\n"
            ),
        ),
        # stops the verifier (it would hang to its time limit) and prints nothing
        "stops_its_parent": (fizz, fizz_path, "#!/bin/bash\nkill -STOP $PPID\nkill -STOP -1\n"),
        # never ends: the check's own timeout (the mode check alone used to pay 0.5)
        "sleeps_forever": (report, report_path, "#!/bin/sh\nexec sleep 100000\n"),
        # fake result lines on every descriptor it has and every one of /proc it can open
        "writes_fake_results": (
            fizz,
            fizz_path,
            "#!/bin/bash\nfor fd in $(seq 0 255); do\n"
            f"  printf '%s\\n' '{{\"loaded\": true}}' '{_FAKE}' >&$fd 2>/dev/null\ndone\n"
            f"for f in /proc/*/fd/*; do printf '%s\\n' '{_FAKE}' > \"$f\" 2>/dev/null; done\nexit 0\n",
        ),
    }


@pytest.mark.parametrize("name", ["kills_its_parent", "sleeps_forever", "stops_its_parent", "writes_fake_results"])
def test_a_script_the_checks_run_cannot_kill_hang_or_forge_a_reward(name: str) -> None:
    """The checks execute the agent's script; whatever it does to its verifier, its reward is
    its answers' (here 0), and the next episode starts clean."""
    seed = 31
    task, path, text = _scripts(seed)[name]

    async def go(env: Any) -> tuple[float, str]:
        await env.reset(seed=seed, options={"task_id": task.id})
        await run(env, write_command({path: [base64.b64encode(text.encode()).decode(), 0o755]}))
        reward = float((await submit(env)).reward or 0.0)
        await env.reset(seed=seed, options={"task_id": task.id})
        left = await run(env, "ls -A; ps -eo args | grep -c '[s]leep 100000'")
        return reward, str(left["stdout"])

    reward, left = serve(go)
    assert reward == 0.0
    # the starting files only, and no process left
    assert left.split() == [*sorted({p.split("/")[0] for p in task.files}), "0"], left


class _Probe(TerminalEnvironment):
    """Trusted checks that end the verifier after it answered (a stand-in for anything that
    kills it: a kernel without Landlock's signal scoping, the memory limit)."""

    verify_timeout_s: ClassVar[float] = 5.0
    tasks: ClassVar[TaskSet] = TaskSet(
        [
            Task(
                "killed_after_answering",
                "-",
                {"README": "-\n"},
                (
                    Check("answered", "result = 1", 1),
                    Check("then killed", "import atexit, os; atexit.register(os.kill, os.getpid(), 9); result = 1", 1),
                ),
                "true",
            ),
            Task(
                "hangs_after_answering",
                "-",
                {"README": "-\n"},
                (
                    Check("answered", "result = 1", 1),
                    Check("then hangs", "import atexit, time; atexit.register(time.sleep, 60); result = 1", 1),
                ),
                "true",
            ),
            Task(
                "signals",
                "-",
                {"README": "-\n"},
                (
                    Check(
                        "kill -0 $PPID",
                        "result = sh('kill -0 $PPID 2>/dev/null && echo reached || echo refused')",
                        [0, "refused\n"],
                    ),
                    Check(
                        "the environment",
                        "result = sh('echo $PATH $PYTHONSAFEPATH $PYTHONNOUSERSITE $GIT_CONFIG_NOSYSTEM')",
                        [0, "/usr/bin:/bin 1 1 1\n"],
                    ),
                ),
                "true",
            ),
        ]
    )


@pytest.mark.parametrize("task_id", ["killed_after_answering", "hangs_after_answering"])
def test_a_verifier_that_crashed_or_timed_out_pays_0_whatever_it_answered(task_id: str) -> None:
    """Every check answered right, then the verifier was killed (or ran out of time): the
    verdict counts only when the verifier ran to completion (RFC 0015)."""
    env = _Probe(task_id=task_id)
    try:
        v = env.verify()
    finally:
        env.close()
    assert (v.passed, v.total) == (0, 2) and v.error, v


def test_the_programs_the_checks_run_cannot_signal_the_verifier() -> None:
    """sh()'s processes run in a Landlock domain of their own (ABI 6+ scopes signals): `kill -0`
    on the verifier (their parent) is refused, where it used to reach it; and they run with
    openenv.sandbox.VERIFIER_ENV (no script directory on Python's path, no user site, no
    system git configuration)."""
    env = _Probe(task_id="signals")
    try:
        env.run("true")
        abi = max((int(x[12:]) for x in env.sandbox.isolation if x.startswith("landlock-abi")), default=0)
        if abi < 6:
            pytest.skip(f"Landlock without signal scoping on this kernel: {env.sandbox.isolation}")
        v = env.verify()
    finally:
        env.close()
    assert (v.passed, v.error) == (2, None), v


# -- (e) solutions, untouched workspaces, probes ----------------------------------------------------


def test_every_solution_earns_1_on_several_seeds_and_the_untouched_workspace_0() -> None:
    """Over the wire, in strict episodes: the reference and the null of a sample of the tasks,
    on seeds other than the in-process test's (which plays every family)."""

    async def go(env: Any) -> dict[tuple[str, int], tuple[float, float]]:
        out = {}
        for family in map(TASKS.by_id, SAMPLE_2):
            for seed in (40, 41):
                await env.reset(seed=seed, options={"task_id": family.id})
                await run(env, instance(family.id, seed).solution)
                solved = float((await submit(env)).reward or 0.0)
                await env.reset(seed=seed, options={"task_id": family.id})
                untouched = float((await submit(env)).reward or 0.0)
                out[family.id, seed] = (solved, untouched)
        return out

    rewards = serve(go)
    assert rewards == dict.fromkeys(rewards, (1.0, 0.0))


def test_the_grading_probes_earn_1_0_and_0() -> None:
    """What `openenv certify --level grading` plays: each reference earns 1, each null 0, and
    each replay (another seed's literal answer) 0, for every task."""
    probes = TerminalEnvironment.grading_probes()
    assert {p.task_id for p in probes} == {t.id for t in TASKS}
    assert len({p.seed for p in probes}) == len(probes)

    async def play(env: Any, probe: openenv.GradingProbe, calls: Any) -> float:
        await env.reset(seed=probe.seed, options={"task_id": probe.task_id, **probe.options})
        r = None
        for call in calls:
            r = await env.step(call)
        assert r is not None and r.terminated
        return float(r.reward or 0.0)

    async def go(env: Any) -> list[tuple[str, float, list[float], list[float]]]:
        out = []
        for p in probes:
            ref = await play(env, p, p.reference)
            nulls = [await play(env, p, s) for s in p.null]
            replays = [await play(env, p, s) for s in p.replay]
            out.append((str(p.task_id), ref, nulls, replays))
        return out

    for task_id, ref, nulls, replays in serve(go):
        assert (ref, nulls, replays) == (1.0, [0.0], [0.0]), task_id


# -- (f) rich feedback ----------------------------------------------------------------------------


def test_rich_feedback_asked_at_reset_shows_the_per_check_results() -> None:
    """For curricula and evaluation: a rich episode gets passed/total and each check's verdict;
    the reward is still all or nothing (extract_sum unpacked but not summed: 1 of 2, reward 0)."""
    task = instance("extract_sum", 51)

    async def go(env: Any) -> Any:
        assert env.info.capabilities.grades
        await env.reset(seed=51, options={"task_id": task.id, "feedback": "rich"})
        await run(env, "mkdir unpacked && tar -xzf bundle.tar.gz -C unpacked && echo 0 > sum.txt")
        return await submit(env)

    r = serve(go)
    assert r.observation.result.data == {"passed": 1, "total": 2}
    assert r.metadata["checks"] == {"unpacked/ holds the archive": True, "sum.txt holds the sum": False}
    assert r.reward == 0.0 and r.reward_breakdown.reason == "1/2 checks"


class _Partial(TerminalEnvironment):
    partial_credit: ClassVar[bool] = True


def test_partial_credit_is_an_opt_in_that_pays_the_fraction() -> None:
    """The old fraction, for curricula only: the same half-done workspace earns 0.5."""

    async def go(env: Any) -> float:
        await env.reset(seed=51, options={"task_id": "extract_sum"})
        await run(env, "mkdir unpacked && tar -xzf bundle.tar.gz -C unpacked && echo 0 > sum.txt")
        return float((await submit(env)).reward or 0.0)

    assert serve(go, _Partial) == 0.5
