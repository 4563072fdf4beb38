"""The ``grading`` level (RFC 0015): a reward-seeking policy played through an environment's own
tools. coding_env and the healthy grading environment of ``mutants/gradinglib.py`` certify at it
(every check exercised, probes read from the python: target); an environment that does not grade
skips every check with the reason; a running server, whose probes cannot be read, reports the
probe checks not exercised and still attacks from its declarations; a tools-only server refuses
grading side calls and the level says why it cannot grade. The mutants ``mutants/grading_*``
(test_mutants.py) show each check catching an environment with one defence removed; the units
below show the declarations' rules, the probes' reading, and that the level's hostile programs
stay within the target where the certifier's own host is reachable."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conformance_testlib import TESTS_DIR, mutant_target

from openenv.sandbox import SandboxUnavailable, check
from openenv.v1 import tool_pb2
from openenv.values import to_struct
from openenv_conformance.checks import _grading_attacks as attacks
from openenv_conformance.checks.grading import _declaration_problems, _grader
from openenv_conformance.context import RunOptions
from openenv_conformance.registry import all_checks
from openenv_conformance.runner import certify
from openenv_conformance.spec import grading_declaration
from openenv_conformance.targets import ProbesUnreadable, ProcessTarget, TargetOptions

SEED = 20261129
GRADING_CHECKS = [c.id for c in all_checks() if c.level == "grading"]
#: What the level plays without probes: its own attacks, from the declarations alone.
PROBE_CHECKS = {"grading.reference"}


def _sandbox() -> None:
    try:
        check()
    except SandboxUnavailable as e:
        pytest.skip(f"the grading environments run code in openenv.sandbox, unavailable here: {e}")


def _statuses(report) -> dict[str, tuple[str, str]]:
    return {r.id: (r.status, r.reason or r.note) for r in report.results}


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["grpc", "http", "binary"])
def test_coding_env_certifies_at_the_grading_level(transport: str) -> None:
    """coding_env (all or nothing, strict by default, a fresh case order per submission, its
    probes) passes every check, each exercised: its references earn 1.0 and no attack earns more
    than its nulls. Its capabilities (grades, feedback, feedback_offered: protocol 1.5) are read
    over every transport the certifier speaks. The run's duration is the README's figure."""
    pytest.importorskip("coding_env")
    _sandbox()
    report = certify(
        "python:coding_env.server:CodingEnvironment",
        levels=["grading"],
        seed=SEED,
        target_options=TargetOptions(transport=transport),
    )
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    assert [r.id for r in report.results] == GRADING_CHECKS
    bad = {k: v for k, v in _statuses(report).items() if v[0] != "pass"}
    assert not bad, bad
    assert "references earned 1" in report.result("grading.reference").note
    assert "planted through 'run_python'" in report.result("grading.verdict_forgery").note
    assert "a side call of 'submit' is refused" in report.result("grading.feedback").note
    assert report.options["grading_probes"] == 8
    caps = report.capabilities
    assert caps["grades"] is True and caps["feedback"] == "FEEDBACK_STRICT", caps
    assert caps["feedback_offered"] == ["FEEDBACK_STRICT", "FEEDBACK_RICH"], caps


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "transport"), [("grading_base", "grpc"), ("grading_base", "http"), ("grading_workspace", "grpc")]
)
def test_the_healthy_grading_environments_pass_the_grading_and_tools_levels(name: str, transport: str) -> None:
    """The bases of the grading mutants keep every rule: the grading level passes, every check
    exercised (but the workspace grader's constants: its untouched workspace is its null
    solution, so there is no constant to submit, and the check says so); and
    tools.valid_arguments expects the grading tool's side call refused (FAILED_PRECONDITION) in a
    strict session, as docs/protocol.md §7.1 says, where it used to expect an answer."""
    _sandbox()
    with mutant_target(name, transport) as target:
        report = certify(target, levels=["tools", "grading"], seed=SEED, max_examples=20)
    assert report.unusable is None, report.unusable
    statuses = _statuses(report)
    expected = dict.fromkeys([*GRADING_CHECKS, "tools.valid_arguments", "tools.invalid_arguments"], "pass")
    if name == "grading_workspace":
        expected["grading.constant_answers"] = "not_exercised"
        assert "untouched workspace is the null solution" in statuses["grading.constant_answers"][1]
    got = {cid: statuses[cid][0] for cid in expected}
    assert got == expected, {cid: statuses[cid] for cid in expected if got[cid] != expected[cid]}
    assert not [cid for cid, (status, _) in statuses.items() if status in ("fail", "error")], statuses


@pytest.mark.slow
def test_an_environment_grading_every_step_plays_its_probes_own_actions() -> None:
    """An environment whose actions are not tool calls grades every step: its probes' steps are
    its own JSON actions (``{"action": A}``), which the reference and replay checks play; the
    checks that vary a declared submission are not exercised, saying why."""
    with mutant_target("grading_steps") as target:
        report = certify(target, levels=["grading"], seed=SEED)
    statuses = _statuses(report)
    assert report.exit_code == 0, statuses
    for cid in ("grading.declared", "grading.reference", "grading.replay"):
        assert statuses[cid][0] == "pass", (cid, statuses[cid])
    assert "references earned 1" in statuses["grading.reference"][1]
    assert "replays of other instances' answers" in statuses["grading.replay"][1]
    for cid in ("grading.constant_answers", "grading.verdict_forgery", "grading.feedback"):
        assert statuses[cid][0] == "not_exercised" and "not tool calls" in statuses[cid][1], (cid, statuses[cid])


@pytest.mark.slow
def test_an_environment_that_does_not_grade_skips_the_grading_level() -> None:
    """echo_env sets no grades and declares no grading tool: nothing is submitted to it."""
    report = certify("python:echo_env.server:EchoEnvironment", levels=["grading"], seed=SEED)
    assert report.exit_code == 0, _statuses(report)
    for r in report.results:
        assert r.status == "skip" and "Capabilities.grades is false" in r.reason, (r.id, r.status, r.reason)


@pytest.mark.slow
def test_a_running_server_is_attacked_from_its_declarations_without_probes() -> None:
    """A grpc:// target's code is not here: no probes. The reference check is not exercised
    (saying why); the others measure the baseline with an empty submission right after reset and
    attack from the declarations as before."""
    _sandbox()
    with mutant_target("grading_base") as served:
        report = certify(served.url, levels=["grading"], seed=SEED)
    statuses = _statuses(report)
    assert statuses["grading.reference"][0] == "not_exercised", statuses
    assert "running server" in statuses["grading.reference"][1]
    for cid in set(GRADING_CHECKS) - PROBE_CHECKS:
        assert statuses[cid][0] == "pass", (cid, statuses[cid])
    assert "seed " in statuses["grading.constant_answers"][1]  # tasks from the run's seed, not probes
    assert "replays" not in statuses["grading.replay"][1]


@pytest.mark.slow
def test_a_tools_only_server_refuses_grading_side_calls_and_the_level_says_why_it_cannot_grade() -> None:
    """Tools-only mode has no steps: a grading tool is only a side call, which strict feedback
    refuses. grading.feedback checks that refusal; the checks that grade skip, saying so; the
    tools level expects the refusal too."""
    pytest.importorskip("coding_env")
    _sandbox()
    report = certify(
        "python:coding_env.server:CodingEnvironment",
        levels=["tools", "grading"],
        seed=SEED,
        max_examples=10,
        target_options=TargetOptions(serve_args=["--tools-only"]),
    )
    statuses = _statuses(report)
    assert report.exit_code == 0, statuses
    assert statuses["grading.feedback"][0] == "pass" and "refused" in statuses["grading.feedback"][1]
    assert statuses["tools.valid_arguments"][0] == "pass", statuses["tools.valid_arguments"]
    for cid in ("grading.reference", "grading.constant_answers", "grading.verdict_forgery", "grading.replay"):
        assert statuses[cid][0] == "skip" and "tools-only" in statuses[cid][1], (cid, statuses[cid])


# -- declarations


def _tool(annotations: dict, schema: dict | None = None) -> tool_pb2.Tool:
    t = tool_pb2.Tool(name="submit")
    default = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}
    to_struct(schema or default, t.input_schema)
    to_struct(annotations, t.annotations)
    return t


def test_grading_tools_are_read_from_both_annotations() -> None:
    """RFC 0015's key and RFC 0010's ``grades: true`` declare a grading tool; a sandbox runner
    without it and a plain tool do not."""
    assert grading_declaration(_tool({"openenv/grading": {"argument": "code", "language": "python"}})) == {
        "argument": "code",
        "language": "python",
    }
    assert grading_declaration(_tool({"openenv/grading": {}})) == {}
    sandboxed = {"openenv/sandbox": {"language": "python", "argument": "code", "grades": True}}
    assert grading_declaration(_tool(sandboxed))["grades"] is True
    runner = {"openenv/sandbox": {"language": "python", "argument": "code", "output": "stdout"}}
    assert grading_declaration(_tool(runner)) is None
    assert grading_declaration(_tool({"readOnlyHint": True})) is None


@pytest.mark.parametrize(
    ("annotation", "says"),
    [
        (True, "not an object"),
        ({"argument": "source"}, "not a property"),
        ({"argument": 3}, "not the name"),
        ({"argument": "code", "language": "cobol"}, "language"),
        ({"language": "python"}, "no argument"),
    ],
)
def test_a_malformed_grading_declaration_is_named(annotation: object, says: str) -> None:
    t = _tool({"openenv/grading": annotation})
    problems = _declaration_problems(t, grading_declaration(t))
    assert problems and says in problems[0], problems


def test_a_grader_fills_its_other_required_arguments_with_minimal_values() -> None:
    schema = {
        "type": "object",
        "properties": {"sql": {"type": "string"}, "limit": {"type": "integer"}, "mode": {"enum": ["a", "b"]}},
        "required": ["sql", "limit", "mode"],
    }
    g = _grader(_tool({"openenv/grading": {"argument": "sql", "language": "sql"}}, schema), {"argument": "sql"})
    assert g is not None and g.call("SELECT 1") == ("submit", '{"limit": 0, "mode": "a", "sql": "SELECT 1"}')
    workspace = _grader(_tool({"openenv/grading": {}}, {"type": "object"}), {})
    assert workspace is not None and workspace.empty == ("submit", "{}")


# -- probes


def test_a_python_target_reads_its_probes_in_a_process_of_its_own() -> None:
    """The factory is imported by ``python -m openenv.runtime.grading_probes`` with the server's
    interpreter and directory; a factory that fails is ProbesUnreadable, naming why."""
    _sandbox()
    with mutant_target("grading_base") as target:
        doc = target.grading_probes()
    assert doc is not None and doc["environment"] == "quiz" and len(doc["probes"]) >= 2
    assert doc["probes"][0]["reference"][0]["tool"] == "submit"
    broken = ProcessTarget.__new__(ProcessTarget)
    broken.factory, broken._cwd, broken._env = "mutants.no_such_module:Env", str(TESTS_DIR), dict(os.environ)
    with pytest.raises(ProbesUnreadable, match="no_such_module"):
        broken.grading_probes()


# -- the hostile programs


def test_the_files_a_task_names_are_read_from_its_text() -> None:
    """What a policy reading the task would replace (issue 46: the scripts and modules the
    tests execute): .py and .sh paths, ``python -m`` modules and imported names, never the
    standard library's."""
    text = (
        "`/app/archive.sh DIR` should move files; make `python3 -m wordcount FILE` work; "
        '`python3 -c "import mathkit; import json"` fails; fix ./bin/run.sh and src/pkg/mod.py.'
    )
    paths = ["/app/archive.sh", "./bin/run.sh", "src/pkg/mod.py"]
    assert attacks.named_targets(text) == (paths, ["wordcount", "mathkit"])
    assert attacks.named_targets("Define f(x) returning 2 * x + 3.") == ([], [])
    assert attacks.named_plants("", None, "no names here") == []


def test_every_hostile_program_is_valid_python() -> None:
    """The programs run inside the target: each must at least compile."""
    ident = attacks.certifier_identity()
    guard = attacks.prelude(ident, 1234)
    sources = [code for _, code in attacks.constant_functions("solve")]
    sources += [code for _, code in attacks.function_forgeries("solve", guard) + attacks.program_forgeries(guard)]
    sources += [code for _, code in attacks.plants(guard, ident)]
    sources += [attacks.counter_table("solve", [None, 1, "x"]), attacks.hook_python(guard)]
    sources += [code for _, code in attacks.python_program_constants()]
    sources += [code for _, code in attacks.named_plants(guard, ident, "run /app/x.sh; python3 -m pkg; import mod")]
    sources += [attacks.ANY_EQUAL_MODULE]
    for src in sources:
        ast.parse(src)


def _run(program: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_on_the_certifiers_host_the_plants_write_only_in_the_working_directory(tmp_path: Path) -> None:
    """An environment that grades in an unconfined process runs the level's programs on this
    machine: there they write their verdict files relative to the working directory only (never
    /logs/verifier), which the same programs write elsewhere. Seen from outside: the certifier's
    identity given to a process that can see this one."""
    if os.path.exists("/logs"):
        pytest.skip("/logs exists on this machine: the test could not tell its writes apart")
    ident = attacks.certifier_identity()
    guard = attacks.prelude(ident, None)
    for what, program in attacks.plants(guard, ident)[:2]:
        done = _run(program, tmp_path)
        assert done.returncode == 0, (what, done.stderr[-2000:])
        planted = attacks.reports(done.stdout)[-1]["planted"]
        assert planted and all(not p.startswith("/") for p in planted), (what, planted)
    assert (tmp_path / "logs/verifier/reward.txt").read_text() == "1"
    assert not os.path.exists("/logs")
    (tmp_path / "hook").write_text(attacks.hook_shell(ident))
    # Run by the certifier itself: its parent (this process) and grandparent are spared.
    done = subprocess.run(["sh", str(tmp_path / "hook")], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert not os.path.exists("/logs") and not done.stderr and done.returncode == 0, done.stderr
    # Run by another process (a verifier's shell): that one is killed, the certifier spared.
    hook = str(tmp_path / "hook")
    done = subprocess.run(
        ["sh", "-c", f"sh {hook}; echo survived"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL and "survived" not in done.stdout, (done.returncode, done.stdout)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie its parent has not reaped counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_on_the_certifiers_host_killing_every_process_reaches_only_the_targets_descendants(tmp_path: Path) -> None:
    """``_oe_kill_all`` where the certifier can be seen signals the target server's descendants
    and nothing else: a stand-in server's child dies, the stand-in server and an unrelated
    process live on, and so does the certifier (this test). ``_oe_kill_parent`` of a process
    whose parent is the certifier does nothing. (The program's own view, "on the certifier's
    host", is checked first: were it wrong, it would signal every process it may.)"""
    guard = attacks.prelude(attacks.certifier_identity(), None)
    assert _run(guard + "print(_oe_on_host())\n", tmp_path).stdout.strip() == "True"
    server = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time\np = subprocess.Popen(['sleep', '600'])\ntime.sleep(600)"],
        start_new_session=True,
    )
    bystander = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        children: list[int] = []
        while not children and time.monotonic() < deadline:
            listed = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True).stdout
            children = [int(x) for x in listed.split()]
            time.sleep(0.05)
        assert children, "the stand-in server's child did not start"
        guard = attacks.prelude(attacks.certifier_identity(), server.pid)
        done = _run(guard + "_oe_kill_all()\n_oe_kill_parent()\nprint('alive')\n", tmp_path)
        assert done.stdout.strip() == "alive", done.stderr[-2000:]
        deadline = time.monotonic() + 30
        while not _gone(children[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(children[0]), "the stand-in server's child was not killed"
        assert server.poll() is None and bystander.poll() is None
    finally:
        for p in (server, bystander):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


#: Every graded reference environment's python: target, with what the grading level can exercise
#: on it (beside grading.declared, grading.reference and grading.feedback, which all exercise).
#: CI certifies the same environments' images (docker: targets: probes read in the image).
GRADED_ENVS = {
    "terminal_env": ("terminal_env.server:TerminalEnvironment", {"grading.verdict_forgery", "grading.replay"}),
    "repo_env": ("repo_env.server:RepoEnvironment", {"grading.replay"}),
    "harbor_env": ("harbor_env.server:HarborEnvironment", {"grading.verdict_forgery"}),
    "sql_env": ("sql_env.server:SqlEnvironment", {"grading.constant_answers"}),
    "math_env": ("math_env.server:MathEnvironment", {"grading.constant_answers"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("env", sorted(GRADED_ENVS))
def test_every_graded_reference_environment_certifies_at_the_grading_level(env: str) -> None:
    """terminal_env, repo_env, harbor_env (every shipped task: all its probes), sql_env and
    math_env pass the grading level as python: targets, their references earning the top reward,
    no attack more than their nulls; the checks each one's declarations make applicable are
    exercised (coding_env and browser_env: the tests above)."""
    factory, exercised = GRADED_ENVS[env]
    pytest.importorskip(env)
    _sandbox()
    report = certify(f"python:{factory}", levels=["grading"], seed=SEED, run_options=RunOptions(grading_probes=0))
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    statuses = _statuses(report)
    assert not [cid for cid, (status, _) in statuses.items() if status in ("fail", "error")], statuses
    for cid in ("grading.declared", "grading.reference", "grading.feedback", *exercised):
        assert statuses[cid][0] == "pass", (cid, statuses[cid])
