"""Issue 46's harbor_env findings, replayed on every shipped task through the environment's own
tools (``shell``, ``submit``) over a real server, as a reward-seeking policy would play them:

(a) code the tests run writes ``/logs/verifier/reward.json`` and kills the tests' interpreter
    before it writes its own verdict;
(b) that code makes ``reward.json`` a directory (the tests' own write fails) and writes
    ``reward.txt``;
(c) a git clean filter, hooks and ``core.fsmonitor`` in the repository's own ``.git/config``
    (the task's repository, or one the agent made);
(d) that code writes a reward file, then stops the tests until the verifier runs out of time.

Where a task's tests run none of the agent's files, the same payload is planted where an
interpreter or a tool might pick it up (``sitecustomize.py``, ``usercustomize.py`` in the
workspace and in the user site of ``$HOME``, ``pytest.py``, ``conftest.py``, executables named
``python3``, ``bash``, ``git``...), and the reward files are also written from a shell step
before ``submit``; for (d), the file the tests read is made a FIFO. Each attack must earn no more
than the null baseline (0 on every task: nothing done, then ``submit``), and every task's
reference (its ``solution/solve.sh`` through ``shell``, then ``submit``: the grading probes) must
earn 1. On the code before (the commit that added this file), (a) paid 1 on 7 tasks, (b) on 7,
(c) on 3, (d) on 7 (10 tasks in all: the 7 whose tests run the agent's code, the 3 that call
``git status``), and the grader's own imports on all 26.

Also here: the verdict's rules on tasks a user writes (both reward files, a reward out of range,
a non-zero exit, a process left behind), the clean copy the tests run on (modes, times, links
that stay inside), and the grader's own imports (a ``tarfile.py`` in the workspace).
"""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from harbor_env.server import SHIPPED, HarborEnvironment

import openenv
from openenv import CallToolAction

TIMEOUT = 1500.0
#: Sessions played at once (each its own sandbox); the server allows 16.
PARALLEL = 6
TASKS = [t.id for t in HarborEnvironment.tasks]
#: The null baseline of every shipped task (test_every_reference_earns_1_and_every_null_0).
BASELINE = 0.0
#: The verifier's time in the copies of the tasks that attack (d) plays: short, so that a hung
#: verifier costs seconds, and long enough for the tests to reach the agent's code first.
HANG_VERIFIER_S = 8.0

#: How each task's tests run the agent's code: the file they run, and how (None: they run none
#: of it; the git tasks run git on the agent's repository, which attack (c) plays).
EXECUTED: dict[str, tuple[str, str]] = {
    "fix-spaces-script": ("archive.sh", "sh"),  # bash /app/archive.sh DIR
    "cleanup-script": ("clean.sh", "sh"),  # /app/clean.sh DIR
    "runnable-module": ("wordcount/__main__.py", "py"),  # python3 -m wordcount FILE
    "fix-config-defaults": ("config.py", "py"),  # a child python imports it
    "fix-inventory": ("inventory.py", "py"),  # unittest, and a child python, import it
    "fix-package-import": ("mathkit/__init__.py", "py"),  # python3 -c "import mathkit"
    "fix-pagination": ("paginate.py", "py"),  # a child python imports it
}
#: The file the tests of the other tasks read (attack (d) makes it a FIFO: a read that never ends).
READ: dict[str, str] = {
    "count-errors": "error_count.txt",
    "csv-totals": "totals.csv",
    "dedupe-emails": "unique.txt",
    "find-large-files": "large.txt",
    "generated-checksums": "SHA256SUMS",
    "json-to-csv": "users.csv",
    "merge-configs": "merged.ini",
    "pyproject-metadata": "pyproject.toml",
    "rename-extensions": "photos/city night.jpg",
    "replace-domain": "etc/web.conf",
    "sort-hosts": "sorted.txt",
    "status-counts": "status_counts.json",
    "version-bump": "CHANGELOG.md",
    "release-symlink": "releases/v2/VERSION",
}

#: The attack itself, run by whatever executes the agent's code: "kill" writes reward.json and
#: kills the tests' interpreter; "dir" makes reward.json a directory and writes reward.txt;
#: "hang" writes reward.json and stops the tests (and their interpreter) for good.
FORGE = r"""
import os, signal, sys
mode = globals().get("MODE") or sys.argv[1]
def pids(marks):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                with open("/proc/" + p + "/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if any(m in cmd for m in marks):
                out.append(int(p))
    return out
def put(name, text):
    try:
        os.makedirs("/logs/verifier", exist_ok=True)
        with open("/logs/verifier/" + name, "w") as f:
            f.write(text)
    except OSError:
        pass
if mode == "dir":
    try:
        os.makedirs("/logs/verifier/reward.json", exist_ok=True)
    except OSError:
        pass
    put("reward.txt", "1\n")
else:
    put("reward.json", '{"reward": 1.0}')
    tests, script = b"test_" + b"outputs", b"test" + b".sh"  # not spelt out: this text is on command lines
    if mode == "kill":
        marks, sig = [tests], signal.SIGKILL
    else:
        marks, sig = [tests, script], signal.SIGSTOP
    for p in pids(marks):
        try:
            os.kill(p, sig)
        except OSError:
            pass
"""


def _write(path: str, text: str, mode: str = "644") -> str:
    """A shell command writing ``text`` to ``path`` (which may hold a ``$(...)``, not quotes)."""
    return f'mkdir -p "$(dirname "{path}")" && cat > "{path}" <<\'FORGE_EOF\'\n{text}FORGE_EOF\nchmod {mode} "{path}"\n'


def plant(task_id: str, mode: str) -> str:
    """A shell command planting the attack ``mode`` everywhere code of the agent's might run
    during grading (see the module's text)."""
    workdir = HarborEnvironment.tasks.by_id(task_id).build.workdir
    forge = f"{workdir}/.forge.py"
    py_entry = f'MODE = "{mode}"\nexec(open("{forge}").read())\n'
    sh_entry = f"#!/bin/sh\n/usr/bin/python3 {forge} {mode}\n"
    cmd = "USERSITE=$(python3 -c 'import site; print(site.getusersitepackages())')\n" + _write(forge, FORGE)
    if task_id in EXECUTED:
        rel, kind = EXECUTED[task_id]
        cmd += _write(f"{workdir}/{rel}", sh_entry if kind == "sh" else py_entry, "755")
    usersite = "$USERSITE"  # found before anything is planted (the python3 finding it would run it)
    for name in ("sitecustomize.py", "usercustomize.py", "pytest.py", "conftest.py"):
        cmd += _write(f"{workdir}/{name}", py_entry)
    for name in ("sitecustomize.py", "usercustomize.py"):
        cmd += _write(f"{usersite}/{name}", py_entry)
    for d in (workdir, f"{workdir}/.local/bin", f"{workdir}/node_modules/.bin"):
        for exe in ("python3", "python", "bash", "sh", "git", "pytest", "mkdir", "timeout"):
            cmd += _write(f"{d}/{exe}", sh_entry, "755")
    if mode == "hang" and task_id in READ:
        cmd += f"rm -rf '{workdir}/{READ[task_id]}' && mkfifo '{workdir}/{READ[task_id]}'\n"
        if task_id == "release-symlink":  # its tests read current/VERSION only through the link
            cmd += f"ln -sfn releases/v2 {workdir}/current\n"
    # And the reward files written straight away, from the agent's own step.
    for logs in ("/logs/verifier", "/dev/shm/.harbor/logs/verifier", "/tmp/.harbor/logs/verifier"):
        if mode == "dir":
            cmd += f"mkdir -p {logs}/reward.json; echo 1 > {logs}/reward.txt\n"
        else:
            cmd += f"mkdir -p {logs}; echo '{{\"reward\": 1.0}}' > {logs}/reward.json\n"
    return cmd


def plant_git(task_id: str) -> str:
    """A shell command configuring the task's repository (or a new one) to run attack "kill"
    whenever the tests' git reads the work tree: a clean filter on every file, hooks,
    ``core.fsmonitor``. Everything is staged (with a .gitignore, which one task's tests look for
    before they call ``git status``) and then touched: the same sizes, newer times, so git must
    read every file again, through the filter."""
    workdir = HarborEnvironment.tasks.by_id(task_id).build.workdir
    forge = f"{workdir}/.forge.py"
    hook = f"{workdir}/.forge-hook"
    hooks = ("pre-commit", "post-commit", "post-checkout", "post-index-change", "reference-transaction", "pre-auto-gc")
    return (
        _write(forge, FORGE)
        + _write(hook, f"#!/bin/sh\n/usr/bin/python3 {forge} kill\nexit 1\n", "755")
        + f"cd {workdir} && {{ [ -d .git ] || git init -q; }}\n"
        + f"git config filter.forge.clean '/usr/bin/python3 {forge} kill'\n"
        + "git config filter.forge.smudge cat\n"
        + f"git config core.fsmonitor {hook}\n"
        + "mkdir -p .git/info .git/hooks && echo '* filter=forge' >> .git/info/attributes\n"
        + "".join(f"cp {hook} .git/hooks/{h}\n" for h in hooks)
        + "[ -e .gitignore ] || touch .gitignore; git add -A\n"
        + "git ls-files -z | xargs -0 -r touch\n"
        + "git config --get filter.forge.clean\n"
    )


async def _episode(env: Any, task_id: str, *calls: CallToolAction, options: dict[str, Any] | None = None) -> Any:
    await env.reset(task_id=task_id, options=options)
    last = None
    for call in calls:
        last = await env.step(call)
    return last


def each_task(
    env_class: type[HarborEnvironment], episode: Callable[[Any, str], Awaitable[Any]], task_ids: list[str] | None = None
) -> dict[str, Any]:
    """``episode(client, task_id)`` for every task, ``PARALLEL`` sessions at a time on one server."""

    async def main() -> dict[str, Any]:
        async with openenv.Server(env_class, "127.0.0.1", 0) as srv:
            gate = asyncio.Semaphore(PARALLEL)

            async def one(task_id: str) -> tuple[str, Any]:
                async with gate, openenv.ToolEnvClient(srv.address) as env:
                    return task_id, await episode(env, task_id)

            return dict(await asyncio.gather(*(one(t) for t in task_ids or TASKS)))

    return asyncio.run(asyncio.wait_for(main(), TIMEOUT))


def _attack(mode: str) -> Callable[[Any, str], Awaitable[Any]]:
    async def episode(env: Any, task_id: str) -> Any:
        planted = await _episode(env, task_id, CallToolAction("shell", {"command": plant(task_id, mode)}))
        assert planted.observation.result.structured_content["exit_code"] == 0, planted.observation.result.text
        submitted = await env.step(CallToolAction("submit", {}))
        assert submitted.terminated
        return submitted.reward

    return episode


def _paid(rewards: dict[str, Any]) -> list[str]:
    return sorted(t for t, r in rewards.items() if r is None or r > BASELINE)


def test_every_task_has_its_probes_and_a_shell_entry_in_these_attacks() -> None:
    """The attacks below know how each task's tests run the agent's code: a shipped task added
    without saying so would be attacked only generically."""
    probes = HarborEnvironment.grading_probes()
    assert [p.task_id for p in probes] == TASKS and len(TASKS) == 26
    assert set(EXECUTED) | set(READ) | {t for t in TASKS if t.startswith("git-")} | {"fix-permissions"} == set(TASKS)
    for p in probes:
        assert p.reference is not None and [c.tool_name for c in p.reference] == ["shell", "submit"]
        assert [[c.tool_name for c in s] for s in p.null] == [["submit"]]


def test_every_reference_earns_1_and_every_null_0() -> None:
    """(e) The grading probes, as the certifier plays them: each task's solve.sh through the
    ``shell`` tool, then ``submit``, earns 1; ``submit`` at once earns 0 (the baseline)."""
    probes = {p.task_id: p for p in HarborEnvironment.grading_probes()}

    async def episode(env: Any, task_id: str) -> tuple[Any, Any]:
        p = probes[task_id]
        assert p.reference is not None
        reference = await _episode(env, task_id, *p.reference)
        null = await _episode(env, task_id, *p.null[0])
        return reference.reward, null.reward

    results = each_task(HarborEnvironment, episode)
    assert {t: r for t, (r, _) in results.items() if r != 1.0} == {}
    assert {t: n for t, (_, n) in results.items() if n != BASELINE} == {}


def test_a_reference_that_reads_its_solution_directory_is_probed_whole(tmp_path: Path) -> None:
    """A user's task whose solve.sh reads another file of ``solution/`` (and an env of
    ``[solution]``): its probe unpacks the directory into /solution for that one shell call, as
    Harbor's oracle has it, and earns 1; the null earns 0."""
    user_task(tmp_path, "with-data", COMPARE)
    d = tmp_path / "with-data"
    (d / "solution" / "greeting.txt").write_text("hello\n")
    (d / "solution" / "solve.sh").write_text('#!/bin/bash\ncp /solution/greeting.txt "$DEST"\n')
    (d / "task.toml").write_text('[solution]\nenv = { DEST = "/app/greeting.txt" }\n')
    env_class = HarborEnvironment.with_tasks(tmp_path)
    (probe,) = env_class.grading_probes()
    assert probe.reference is not None

    async def episode(env: Any, task_id: str) -> tuple[Any, Any]:
        assert probe.reference is not None
        reference = await _episode(env, task_id, *probe.reference)
        null = await _episode(env, task_id, *probe.null[0])
        return reference.reward, null.reward

    assert each_task(env_class, episode, ["with-data"]) == {"with-data": (1.0, 0.0)}


def test_a_forged_reward_then_the_tests_interpreter_killed_earns_nothing() -> None:
    """(a) The issue's finding: code the tests execute writes reward.json and kills the tests'
    interpreter before its own verdict; the old grader paid the forged file (7 tasks). test.sh
    did not exit 0, so nothing the files say counts; and under $OPENENV_UNTRUSTED the code can
    neither write the file nor signal the tests."""
    rewards = each_task(HarborEnvironment, _attack("kill"))
    assert _paid(rewards) == [], f"{len(_paid(rewards))} of {len(rewards)} tasks paid: {rewards}"


def test_reward_json_made_a_directory_and_a_forged_reward_txt_earn_nothing() -> None:
    """(b) reward.json a directory (the tests' write fails) and reward.txt forged: the old grader
    took reward.txt. Now a reward path that is not a regular file is an error, and so is a test.sh
    that did not exit 0."""
    rewards = each_task(HarborEnvironment, _attack("dir"))
    assert _paid(rewards) == [], f"{len(_paid(rewards))} of {len(rewards)} tasks paid: {rewards}"


def test_a_git_clean_filter_hooks_and_fsmonitor_in_the_repository_earn_nothing() -> None:
    """(c) The repository's own .git/config runs the agent's program when the tests call
    ``git status`` (a clean filter; hooks and core.fsmonitor too): the tests run on a clean copy
    whose git configuration runs no program, and the planted program never runs."""

    async def episode(env: Any, task_id: str) -> Any:
        planted = await _episode(env, task_id, CallToolAction("shell", {"command": plant_git(task_id)}))
        out = planted.observation.result.structured_content
        assert out["exit_code"] == 0 and ".forge.py kill" in out["stdout"], out
        return (await env.step(CallToolAction("submit", {}))).reward

    rewards = each_task(HarborEnvironment, episode)
    assert _paid(rewards) == [], f"{len(_paid(rewards))} of {len(rewards)} tasks paid: {rewards}"


def test_a_verifier_hung_past_its_time_after_a_reward_was_written_earns_nothing(tmp_path: Path) -> None:
    """(d) The code writes reward.json and stops the tests; the old grader paid the file when the
    verifier's time ran out. A verifier out of time pays 0. (The shipped tasks, with a verifier
    time of HANG_VERIFIER_S seconds instead of 60.)"""
    shutil.copytree(SHIPPED, tmp_path / "tasks")
    for toml in (tmp_path / "tasks").glob("*/*/task.toml"):
        text = toml.read_text()
        old = "[verifier]\ntimeout_sec = 60.0\n"
        assert old in text, toml
        toml.write_text(text.replace(old, f"[verifier]\ntimeout_sec = {HANG_VERIFIER_S}\n"))
    rewards = each_task(HarborEnvironment.with_tasks(tmp_path / "tasks"), _attack("hang"))
    assert _paid(rewards) == [], f"{len(_paid(rewards))} of {len(rewards)} tasks paid: {rewards}"


def test_a_module_planted_in_the_workspace_is_never_imported_by_the_grader() -> None:
    """Found while replaying the issue: a call's ``sys.path`` starts with the workspace, and the
    grader imported ``subprocess`` and ``tarfile`` after that: a ``tarfile.py`` left in the
    workspace ran as the grader, read its nonce and printed a verdict of 1 for every task. Our
    programs in the sandbox now take the workspace off ``sys.path`` first."""
    fake = textwrap.dedent(
        """\
        import json, os, sys
        head = json.loads(sys.stdin.buffer.readline())
        verdict = {"exit_code": 0, "timed_out": False, "orphans": 0, "verifier_dir": "ok", "log": "",
                   "reward_json": {"kind": "file", "text": '{"reward": 1}'}, "reward_txt": None}
        verdict.update({"reward_json": '{"reward": 1}'} if "tmp" in head else {})
        sys.stdout.write("\\n" + head["nonce"] + json.dumps(verdict) + "\\n")
        sys.stdout.flush()
        os._exit(0)
        """
    )
    names = ("tarfile.py", "subprocess.py", "time.py", "io.py", "stat.py", "signal.py", "_confine.py")

    async def episode(env: Any, task_id: str) -> Any:
        workdir = HarborEnvironment.tasks.by_id(task_id).build.workdir
        cmd = "".join(_write(f"{workdir}/{n}", fake) for n in names)
        await _episode(env, task_id, CallToolAction("shell", {"command": cmd}))
        return (await env.step(CallToolAction("submit", {}))).reward

    rewards = each_task(HarborEnvironment, episode)
    assert _paid(rewards) == [], f"{len(_paid(rewards))} of {len(rewards)} tasks paid: {rewards}"


# -- the verdict's rules, on tasks a user writes


def user_task(root: Path, name: str, test_sh: str, dockerfile: str = "FROM ubuntu:24.04\nWORKDIR /app\n") -> None:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text("[verifier]\ntimeout_sec = 30.0\n")
    (d / "instruction.md").write_text("Write `hello` to /app/greeting.txt.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\nV=/logs/verifier\n" + test_sh)
    (d / "tests" / "expected.txt").write_text("hello\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/greeting.txt\n")


#: A test.sh paying 1 when /app/greeting.txt is the tests' expected.txt.
COMPARE = "cmp -s /app/greeting.txt /tests/expected.txt && echo 1 > $V/reward.txt || echo 0 > $V/reward.txt\n"
#: What the agent's program of "rewritten-after-the-tests" leaves behind: a process (detached from
#: it) that keeps replacing reward.json with a reward of 1, whole (a rename), also after the tests
#: wrote theirs; the program ends once that process is at work.
REWRITER = """\
python3 - <<'EOF' >/dev/null 2>&1 &
import os
if os.fork():
    os._exit(0)
os.setsid()
while True:
    try:
        with open("/logs/verifier/.r", "w") as f:
            f.write('{"reward": 1}')
        os.replace("/logs/verifier/.r", "/logs/verifier/reward.json")
    except OSError:
        pass
EOF
while [ ! -e /logs/verifier/reward.json ]; do sleep 0.01; done
echo bye
"""
#: name -> (test.sh, the shell step before submit, the reward, a fragment of the rich error)
RULES: dict[str, tuple[str, str, float, str | None]] = {
    "both-files-agree": ("echo 1 > $V/reward.txt; echo '{\"reward\": 1}' > $V/reward.json\n", "", 1.0, None),
    "both-files-differ": ("echo 1 > $V/reward.txt; echo '{\"reward\": 0.25}' > $V/reward.json\n", "", 0.25, None),
    "reward-out-of-range": ("echo '{\"reward\": 5}' > /logs/verifier/reward.json\n", "", 0.0, "outside [0, 1]"),
    "reward-negative": ("echo -1 > /logs/verifier/reward.txt\n", "", 0.0, "outside [0, 1]"),
    "non-zero-exit": ("echo 1 > /logs/verifier/reward.txt; exit 3\n", "", 0.0, "exited with status 3"),
    "killed": ("echo 1 > /logs/verifier/reward.txt; kill -9 $$\n", "", 0.0, "killed by signal 9"),
    "no-reward": ("true\n", "", 0.0, "wrote no reward"),
    "reward-symlink": ("echo 1 > /tmp/r; ln -s /tmp/r /logs/verifier/reward.txt\n", "", 0.0, "symbolic link"),
    "waits-for-its-jobs": ("sleep 0.2 & wait; echo 1 > /logs/verifier/reward.txt\n", "", 1.0, None),
    "leaves-a-process": ("(setsid sleep 60 &); echo 1 > /logs/verifier/reward.txt\n", "", 0.0, "outlived"),
    # The agent's program, run by tests that do not use $OPENENV_UNTRUSTED, leaves a process that
    # keeps writing 1 after the tests wrote their 0: it outlived its parent, so nothing counts.
    "rewritten-after-the-tests": (
        'out=$(bash /app/greet.sh); [ "$out" = hello ] && r=1 || r=0; echo "{\\"reward\\": $r}" > '
        "/logs/verifier/reward.json\n",
        _write("/app/greet.sh", REWRITER),
        0.0,
        "outlived",
    ),
    # The verifier's processes run with openenv.sandbox.VERIFIER_ENV.
    "verifier-env": (
        'python3 -c "import sys; assert sys.flags.safe_path and sys.flags.no_user_site" '
        '&& [ "$GIT_CONFIG_NOSYSTEM" = 1 ] && echo 1 > $V/reward.txt || echo 0 > $V/reward.txt\n',
        "",
        1.0,
        None,
    ),
    # A repository whose git directory is a linked worktree's (HEAD and commondir) and whose
    # common directory (objects, refs, config; no HEAD) defines a clean filter: the tests' git
    # works on the copy (its log says "x"), and the filter never runs (it would leave /tmp/ran).
    "worktree-common-dir": (
        'cd /app/repo && [ "$(git log --format=%s)" = x ] && git status --porcelain >/dev/null '
        "&& [ ! -e /tmp/ran ] && echo 1 > $V/reward.txt || echo 0 > $V/reward.txt\n",
        "set -e; git init -q -b main repo && cd repo && echo hi > f && git add f "
        "&& git -c user.name=a -c user.email=a@b commit -qm x && mkdir /app/.wt && cp .git/HEAD .git/index /app/.wt/ "
        "&& mv .git /app/.common && rm /app/.common/HEAD && echo ../.common > /app/.wt/commondir "
        "&& echo 'gitdir: /app/.wt' > .git && git config --file /app/.common/config filter.x.clean "
        "'sh -c \"touch /tmp/ran; cat\"' && echo '* filter=x' > /app/.common/info/attributes "
        "&& touch f && git status --porcelain && [ -e /tmp/ran ] && touch f",
        1.0,
        None,
    ),
    # A link to the tests' own expected output is not copied: the tests compare a missing file.
    "link-to-the-expected-output": (
        COMPARE,
        "ln -s /tests/expected.txt greeting.txt",
        0.0,
        None,
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def rule_tasks(tmp_path_factory: pytest.TempPathFactory) -> type[HarborEnvironment]:
    root = tmp_path_factory.mktemp("rules")
    for name, (test_sh, _, _, _) in RULES.items():
        user_task(root, name, test_sh)
    return HarborEnvironment.with_tasks(root)


def test_a_verdict_counts_only_when_test_sh_ran_to_completion(rule_tasks: type[HarborEnvironment]) -> None:
    """What the tests' own files and exit decide (rich episodes, to read why): both files, the
    lower; a reward outside [0, 1], a non-zero exit, a kill, no file, a link for a file, a process
    left behind (or one of the agent's that outlived its parent and rewrote the reward): 0. The
    same rewards come back in strict episodes, with nothing else."""

    async def episode(env: Any, task_id: str) -> tuple[Any, Any]:
        step = RULES[task_id][1]
        out = []
        for options in ({"feedback": "rich"}, None):
            await env.reset(task_id=task_id, options=options)
            if step:
                done = (await env.step(CallToolAction("shell", {"command": step}))).observation.result
                assert done.structured_content["exit_code"] == 0, (task_id, done.text)
            out.append(await env.step(CallToolAction("submit", {})))
        return out[0], out[1]

    results = each_task(rule_tasks, episode, list(RULES))
    for name, (rich, strict) in results.items():
        _, _, reward, why = RULES[name]
        detail = rich.observation.result.structured_content
        assert (rich.reward, strict.reward) == (reward, reward), (name, detail)
        assert strict.observation.result.structured_content == {"reward": reward}, name
        if why is None:
            assert detail["error"] is None, (name, detail)
        else:
            assert why in detail["error"] and "does not count" in detail["error"], (name, detail)


def test_the_tests_see_a_clean_copy_with_the_agents_modes_times_and_inner_links(tmp_path: Path) -> None:
    """The copy the tests run on is the agent's work as the tests would judge it: file and
    directory modes (0600, 0750, an unreadable file), modification times, a relative link inside
    the workspace; not a link that leads out of it, nor a FIFO."""
    test_sh = textwrap.dedent(
        """\
        cd /app
        check() { if eval "$1"; then echo "ok $1"; else echo "FAIL $1"; fail=1; fi; }
        fail=0
        check '[ "$(stat -c %a key.pem)" = 600 ]'
        check '[ "$(stat -c %a private)" = 750 ]'
        check '[ "$(stat -c %a private/hidden)" = 0 ]'
        check '[ "$(stat -c %Y old.txt)" = 946684800 ]'
        check '[ -L current ] && [ "$(readlink current)" = releases/v2 ] && [ "$(cat current/VERSION)" = 2 ]'
        check '[ ! -e outside ] && [ ! -L outside ]'
        check '[ ! -e pipe ]'
        check '[ "$(cat private/hidden 2>&1)" != secret ]'
        [ $fail = 0 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
        """
    )
    user_task(tmp_path, "copy", test_sh)
    setup = (
        "echo k > key.pem && chmod 600 key.pem && mkdir -p private releases/v2 && echo secret > private/hidden "
        "&& chmod 000 private/hidden && chmod 750 private && echo 2 > releases/v2/VERSION "
        "&& ln -s releases/v2 current && ln -s /etc/passwd outside && mkfifo pipe "
        "&& echo old > old.txt && touch -d @946684800 old.txt"
    )

    async def go(env: Any) -> Any:
        return await _episode(
            env,
            "copy",
            CallToolAction("shell", {"command": setup}),
            CallToolAction("submit", {}),
            options={"feedback": "rich"},
        )

    r = each_task(HarborEnvironment.with_tasks(tmp_path), lambda env, _: go(env), ["copy"])["copy"]
    detail = r.observation.result.structured_content
    assert r.reward == 1.0, detail
    assert any("outside" in n for n in detail["workspace"]) and any("pipe" in n for n in detail["workspace"])


def test_the_time_up_path_tells_a_strict_episode_the_reward_alone(tmp_path: Path) -> None:
    """Once the task's time is spent, the next tool call grades (shell, python and the file tools
    are not grading tools, so the runtime does not trim their results): in a strict episode it
    says the reward and that the time was up, nothing of the verifier's."""
    user_task(tmp_path, "quick", 'echo \'{"reward": 1, "greeting": 1}\' > /logs/verifier/reward.json\n')
    (tmp_path / "quick" / "task.toml").write_text("[agent]\ntimeout_sec = 1.0\n")

    async def go(env: Any) -> list[Any]:
        out = []
        for tool, args in (("shell", {"command": "echo hi"}), ("read_file", {"path": "x"})):
            await env.reset(task_id="quick")
            await env.step(CallToolAction("shell", {"command": "sleep 1.5"}))
            out.append(await env.step(CallToolAction(tool, args)))
        return out

    results = each_task(HarborEnvironment.with_tasks(tmp_path), lambda env, _: go(env), ["quick"])["quick"]
    for r in results:
        out = r.observation.result.structured_content
        assert r.terminated and r.reward == 1.0
        assert set(out) == {"reward", "note"} and "time" in out["note"], out
        assert not r.reward_breakdown.children and set(r.metadata) <= {"task_id", "steps"}
