"""harbor_env over a real gRPC server on loopback: a task's own tests grade the workspace (the
reference solution scores 1, nothing done scores 0, with the breakdown of reward.json in a rich
episode and the reward alone in a strict one), the tools act in the task's environment, and an
agent that goes after the grader fails: it cannot read the tests, the solution or the task files,
cannot pre-write a reward that counts (directly, through a directory it made unwritable, or from a
process left behind), and cannot change the tests while they run. test_grading_attacks.py plays
the attacks of issue 46 on every shipped task.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from harbor_env.server import SHIPPED, HarborEnvironment

import openenv
from openenv import CallToolAction

TIMEOUT = 180.0
SECRET = "hidden-marker-7f3a9c"


def write_task(root: Path, name: str, *, expect: str = "hello", dockerfile: str | None = None) -> Path:
    """A user's Harbor task: write ``expect`` to /app/greeting.txt; the tests check it."""
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "solution").mkdir()
    (d / "task.toml").write_text("[agent]\ntimeout_sec = 300.0\n\n[verifier]\ntimeout_sec = 30.0\n")
    (d / "instruction.md").write_text(f"Write the word `{expect}` to `/app/greeting.txt`.\n")
    (d / "environment" / "Dockerfile").write_text(
        dockerfile or "FROM ubuntu:24.04\nWORKDIR /app\nCOPY notes.txt /app/notes.txt\n"
    )
    (d / "environment" / "notes.txt").write_text("some notes\n")
    (d / "tests" / "test.sh").write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            # {SECRET}: the tests' own text, which the agent must never read
            if [ "$(cat /app/greeting.txt 2>/dev/null)" = "{expect}" ]; then
              echo '{{"reward": 1, "greeting": 1}}' > /logs/verifier/reward.json
            else
              echo '{{"reward": 0, "greeting": 0}}' > /logs/verifier/reward.json
            fi
            """
        )
    )
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\n# {SECRET}\necho {expect} > /app/greeting.txt\n")
    return d


def run(env_class: type[HarborEnvironment], fn: Callable[..., Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with openenv.Server(env_class, "127.0.0.1", 0) as srv, openenv.ToolEnvClient(srv.address) as env:
            return await fn(env)

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


async def tool(env: Any, name: str, **args: Any) -> Any:
    r = await env.step(CallToolAction(name, args))
    return r


def data(r: Any) -> Any:
    result = r.observation.result
    assert not result.is_error, result.text
    return result.structured_content or result.data


@pytest.fixture(scope="module")
def user_env(tmp_path_factory: pytest.TempPathFactory) -> type[HarborEnvironment]:
    root = tmp_path_factory.mktemp("tasks")
    write_task(root, "say-hello")
    return HarborEnvironment.with_tasks(root)


def test_the_shipped_set_has_splits_and_over_twenty_tasks_of_every_kind() -> None:
    tasks = HarborEnvironment.tasks
    assert len(tasks) >= 20
    assert set(tasks.splits) == {"train", "test"}
    kinds = {t.metadata.get("category") for t in tasks}
    assert {"shell", "files", "git", "python-packaging", "data", "debugging"} <= kinds
    assert all(t.solution_tar is not None for t in tasks)
    assert HarborEnvironment.secrets()[0] == str(SHIPPED.parent)


def test_a_task_scores_by_its_own_tests_with_the_breakdown_in_rich_episodes(
    user_env: type[HarborEnvironment],
) -> None:
    """The tests' reward is the step's; a rich episode (asked for at reset) also gets the named
    rewards of reward.json as the breakdown, a strict one (the default) the reward alone."""

    async def go(env: Any) -> list[Any]:
        first = await env.reset(task_id="say-hello")
        assert "greeting.txt" in first.observation.result.text and "/app" in first.observation.result.text
        out = []
        wrong = await tool(env, "write_file", path="greeting.txt", content="goodbye")
        assert data(wrong)["written"] == 7
        out.append(await tool(env, "submit"))
        await env.reset(task_id="say-hello", options={"feedback": "rich"})
        listing = data(await tool(env, "shell", command="pwd; ls; cat notes.txt; echo hi > greeting.txt"))
        assert listing["stdout"].split() == ["/app", "notes.txt", "some", "notes"]
        edit = await tool(env, "edit_file", path="/app/greeting.txt", old="hi", new="hello")
        assert data(edit)["replaced"] == 1
        assert data(await tool(env, "read_file", path="greeting.txt"))["content"] == "hello\n"
        out.append(await tool(env, "submit"))
        return out

    bad, good = run(user_env, go)
    assert bad.reward == 0.0 and bad.terminated
    assert data(bad) == {"reward": 0.0} and not bad.reward_breakdown.children
    assert set(bad.metadata) <= {"task_id", "steps"}
    assert good.reward == 1.0 and good.terminated
    assert data(good)["rewards"] == {"reward": 1.0, "greeting": 1.0}
    assert data(good)["exit_code"] == 0 and data(good)["error"] is None
    names = {c.name: c.score for c in good.reward_breakdown.children}
    assert names == {"greeting": 1.0}


def test_a_new_episode_starts_from_the_tasks_own_starting_state(user_env: type[HarborEnvironment]) -> None:
    async def go(env: Any) -> str:
        await env.reset(task_id="say-hello")
        await tool(env, "shell", command="echo hello > greeting.txt; rm notes.txt; chmod 000 .")
        await env.reset(task_id="say-hello")
        return str(data(await tool(env, "shell", command="ls -A"))["stdout"])

    assert run(user_env, go).split() == ["notes.txt"]


HOSTILE = [
    # Read the tests, the solution, the task directory and the package from inside.
    "cat /tests/test.sh /solution/solve.sh; ls -la /tests /solution /logs",
    "grep -rs {marker} /box /tmp /dev/shm /etc /.openenv /workspace | head; "
    "find / \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o "
    "\\( -name solve.sh -o -name test.sh \\) -print",
    "cat {task}/tests/test.sh {task}/solution/solve.sh; ls {task} {shipped}",
    # Pre-write the reward, directly and behind a directory made unwritable.
    "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt "
    "&& echo '{{\"reward\": 1}}' > /logs/verifier/reward.json",
    "mkdir -p /dev/shm/.harbor/logs/verifier && echo '{{\"reward\": 1}}' > /dev/shm/.harbor/logs/verifier/reward.json "
    "&& chmod 555 /dev/shm/.harbor/logs/verifier /dev/shm/.harbor/logs /dev/shm/.harbor /dev/shm",
    "mkdir -p /dev/shm/.harbor/tests "
    "&& printf 'echo 1 > /logs/verifier/reward.txt\\n' > /dev/shm/.harbor/tests/test.sh "
    "&& chmod -R 555 /dev/shm/.harbor /dev/shm",
    # A process left behind to write the reward while the tests run.
    "nohup setsid sh -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
    'echo "{{\\"reward\\": 1}}" > /logs/verifier/reward.json; done\' >/dev/null 2>&1 & sleep 0.2',
]


def test_an_agent_cannot_read_the_grader_nor_forge_a_reward(tmp_path: Path) -> None:
    task_dir = write_task(tmp_path, "say-hello")
    env_class = HarborEnvironment.with_tasks(tmp_path)

    async def go(env: Any) -> tuple[list[str], Any]:
        await env.reset(task_id="say-hello", options={"feedback": "rich"})
        seen = []
        for cmd in HOSTILE:
            r = data(await tool(env, "shell", command=cmd.format(marker=SECRET, task=task_dir, shipped=SHIPPED)))
            seen.append(r["stdout"] + r["stderr"])
        r = data(await tool(env, "python", code=f"import glob; print(glob.glob('{task_dir}/**', recursive=True))"))
        seen.append(r["stdout"] + r["stderr"])
        return seen, await tool(env, "submit")

    seen, verdict = run(env_class, go)
    for out in seen:
        assert SECRET not in out and "greeting.txt" not in out, out
    assert verdict.reward == 0.0, data(verdict)
    assert data(verdict)["rewards"] == {"reward": 0.0, "greeting": 0.0}


def test_code_the_tests_run_cannot_change_the_tests(tmp_path: Path) -> None:
    """The tests run the agent's program; the program rewrites /tests/test.sh and the reward
    file it can reach: the tests are unwritable during grading, so only the reward written after
    the program counts (as in Harbor, the tests' own last word)."""
    d = write_task(tmp_path, "run-greeter")
    (d / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        "out=$(timeout 10 bash /app/greet.sh 2>/dev/null)\n"
        'if grep -q "^hacked" /tests/test.sh; then intact=0; else intact=1; fi\n'
        'if [ "$out" = "hello" ]; then r=1; else r=0; fi\n'
        'echo "{\\"reward\\": $r, \\"intact\\": $intact}" > /logs/verifier/reward.json\n'
    )
    env_class = HarborEnvironment.with_tasks(tmp_path)
    attack = (
        "echo hacked > /tests/test.sh; chmod -R u+w /tests /dev/shm; echo hacked >> /tests/test.sh; "
        "rm -f /tests/test.sh; echo hacked > /tests/test.sh; mv /tests /tests.old; echo hello"
    )

    async def go(env: Any) -> tuple[Any, Any]:
        await env.reset(task_id="run-greeter", options={"feedback": "rich"})
        await tool(env, "write_file", path="greet.sh", content=attack + "\n")
        hacked = await tool(env, "submit")
        await env.reset(task_id="run-greeter", options={"feedback": "rich"})
        await tool(env, "write_file", path="greet.sh", content="echo hello\n")
        return hacked, await tool(env, "submit")

    hacked, honest = run(env_class, go)
    assert data(honest)["rewards"] == {"reward": 1.0, "intact": 1.0}
    # Every write failed: the tests ran to their end unchanged (and the program did print hello).
    assert data(hacked)["rewards"] == {"reward": 1.0, "intact": 1.0}


def test_time_is_up_grades_the_workspace_as_it_is(tmp_path: Path) -> None:
    d = write_task(tmp_path, "quick")
    (d / "task.toml").write_text("[agent]\ntimeout_sec = 1.0\n")
    env_class = HarborEnvironment.with_tasks(tmp_path)

    async def go(env: Any) -> Any:
        await env.reset(task_id="quick")
        await tool(env, "shell", command="echo hello > greeting.txt; sleep 2")
        return await tool(env, "shell", command="echo too late")

    r = run(env_class, go)
    assert r.terminated and r.reward == 1.0 and "time" in data(r)["note"]


def test_reset_picks_tasks_by_split_and_seed() -> None:
    async def go(env: Any) -> tuple[set[str], Any]:
        ids = set()
        for seed in range(6):
            r = await env.reset(seed=seed, options={"split": "test"})
            ids.add(r.metadata["task_id"])
        return ids, await env.reset(seed=3, options={"split": "test"})

    ids, again = run(HarborEnvironment, go)
    test_ids = {t.id for t in HarborEnvironment.tasks if t.split == "test"}
    assert ids <= test_ids and len(ids) > 1
    assert again.metadata["task_id"] in test_ids
    info = json.dumps(HarborEnvironment.list_tasks("test")[0].__dict__, default=str)
    assert "category" in info


def test_the_shipped_git_tests_run_none_of_the_agents_git_configuration() -> None:
    """The agent leaves git configuration that would run its code whenever the tests call git
    (an fsmonitor hook in the repository's config and in $HOME's, a background writer): the
    null workspace still scores 0."""
    plant = (
        "printf '#!/bin/sh\\nsetsid sh -c \"while :; do echo 1 > /logs/verifier/reward.txt; "
        'echo {\\\\\\"reward\\\\\\": 1} > /logs/verifier/reward.json; done" >/dev/null 2>&1 &'
        "\\nexit 1\\n' > /app/.forge; "
        "chmod +x /app/.forge; git config core.fsmonitor /app/.forge; git config --global core.fsmonitor /app/.forge; "
        "mkdir -p .git/hooks && cp /app/.forge .git/hooks/post-index-change; cat /app/.forge; git status --short"
    )

    async def go(env: Any) -> tuple[Any, Any]:
        await env.reset(task_id="git-commit-change")
        planted = data(await tool(env, "shell", command=plant))
        return planted, await tool(env, "submit")

    planted, verdict = run(HarborEnvironment, go)
    assert "while" in planted["stdout"] and "reward" in planted["stdout"], planted
    assert verdict.reward == 0.0, data(verdict)
