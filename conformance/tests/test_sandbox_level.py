"""The ``sandbox`` level (RFC 0010): every reference environment that runs submitted code
certifies at it, over gRPC and over HTTP, on this host (so the canary, process and IPC
observations run too); an environment that runs none skips every check with the reason. The
mutants in ``mutants/sandbox_*`` (test_mutants.py) show each check catching a sandbox with one
layer removed; the units below show the declaration's rules and the probes' report format."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conformance_testlib import factory_of, reference_factories, runs_code

import openenv
from openenv.v1 import tool_pb2
from openenv.values import to_struct
from openenv_conformance.checks import _sandbox_probes as probes
from openenv_conformance.checks.sandbox import KEY, _problems, declarations
from openenv_conformance.cli import _Size
from openenv_conformance.context import RunOptions
from openenv_conformance.registry import all_checks
from openenv_conformance.runner import certify
from openenv_conformance.targets import TargetOptions

SEED = 20261129
SANDBOX_CHECKS = [c.id for c in all_checks() if c.level == "sandbox"]


def _code_envs() -> list:
    out = []
    for env_dir, factory in reference_factories():
        try:
            found = factory_of(env_dir, factory)
        except ImportError:
            continue  # not installed here: test_reference_envs.py says so
        if found and runs_code(found):
            out.append(pytest.param(found, id=env_dir.name))
    return out


def test_coding_env_is_among_the_environments_that_run_code() -> None:
    pytest.importorskip("coding_env")
    assert "coding_env.server:CodingEnvironment" in [p.values[0] for p in _code_envs()]


def _code_envs_and_transports() -> list:
    """Every code environment over gRPC and HTTP; coding_env over the binary transport too (its
    probes are tool calls like any other: one environment shows the transport carries them)."""
    out = [pytest.param(p.values[0], t, id=f"{p.id}-{t}") for p in _code_envs() for t in ("grpc", "http")]
    out += [pytest.param(p.values[0], "binary", id=f"{p.id}-binary") for p in _code_envs() if p.id == "coding_env"]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("factory", "transport"), _code_envs_and_transports())
def test_an_environment_running_code_certifies_at_the_sandbox_level(factory: str, transport: str) -> None:
    """Every check runs (none skips) and passes; over HTTP the declaration may come from the
    gRPC side with a warning (an HTTP side that drops annotations; openenv serve's keeps them).
    An environment with no tool that grades code passed to it (terminal_env and repo_env grade
    the workspace their agent leaves, through tests of their own) skips grader_forgery, saying so."""
    report = certify(
        f"python:{factory}", levels=["sandbox"], seed=SEED, target_options=TargetOptions(transport=transport)
    )
    assert report.unusable is None, f"{report.unusable}\n{report.logs}"
    no_grader = "no tool declaring openenv/sandbox grades code"
    bad = {
        r.id: (r.status, r.reason)
        for r in report.results
        if r.status not in ("pass", "warn")
        and not (r.id == "sandbox.grader_forgery" and r.status == "skip" and no_grader in r.reason)
    }
    assert not bad, bad
    assert [r.id for r in report.results] == SANDBOX_CHECKS
    warned = [r for r in report.results if r.status == "warn"]
    assert all(r.id == "sandbox.declared" and transport == "http" for r in warned), warned
    assert report.exit_code == 0
    assert report.options["sandbox_memory_bound"] == RunOptions().sandbox_memory_bound
    # On this host the canary and the host's processes are observed, and the processes of one
    # session were seen held while the other forked.
    # (the note names the canary when graded code was tried on it; the runner's probes always are)
    note = report.result("sandbox.host_sockets").note
    assert "no canary" not in note
    assert "canary" in note or report.result("sandbox.grader_forgery").status == "skip"
    assert report.result("sandbox.process_isolation").status == "pass"  # the overlap was seen


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_an_environment_running_no_code_skips_the_sandbox_level(transport: str) -> None:
    """echo_env has tools, none declaring openenv/sandbox: nothing is submitted to it."""
    report = certify(
        "python:echo_env.server:EchoEnvironment",
        levels=["sandbox"],
        seed=SEED,
        target_options=TargetOptions(transport=transport),
    )
    assert report.exit_code == 0, [(r.id, r.status, r.reason) for r in report.results]
    assert [r.id for r in report.results] == SANDBOX_CHECKS
    for r in report.results:
        assert r.status == "skip" and KEY in r.reason, (r.id, r.status, r.reason)


def _tool(annotation: object, *, schema: dict | None = None, output_schema: dict | None = None) -> tool_pb2.Tool:
    t = tool_pb2.Tool(name="run")
    to_struct(schema or {"type": "object", "properties": {"code": {"type": "string"}}}, t.input_schema)
    if output_schema is not None:
        to_struct(output_schema, t.output_schema)
    to_struct({KEY: annotation}, t.annotations)
    return t


NOBODY = 65534


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"), reason="becoming another user needs root"
)
def test_a_server_run_by_an_ordinary_user_certifies_at_the_sandbox_level() -> None:
    """The non-root developer's mode: coding_env served by ``nobody`` (the system's Python, the
    checkout's sources) passes the whole level, whose probes then share that uid with the
    server outside the sandbox."""
    pytest.importorskip("coding_env")
    import coding_env

    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "grpc")))
    src = [str(Path(openenv.__file__).resolve().parents[1]), str(Path(coding_env.__file__).resolve().parents[1])]
    work = Path(tempfile.mkdtemp(prefix="openenv-nonroot-", dir="/var/tmp"))
    os.chmod(work, 0o777)
    ready = work / "ready"
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": ":".join([*src, site])}
    serve = ["/usr/bin/python3", "-s", "-m", "openenv.cli", "serve", "coding_env.server:CodingEnvironment"]
    serve += ["--port", "0", "--no-http", "--ready-file", str(ready)]
    proc = subprocess.Popen(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *serve],
        env=env,
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            )
            time.sleep(0.05)
        report = certify(ready.read_text().strip(), levels=["sandbox"], seed=SEED)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    assert report.unusable is None, report.unusable
    bad = {r.id: (r.status, r.reason) for r in report.results if r.status != "pass"}
    assert not bad, bad


def test_a_well_formed_declaration_has_no_problem() -> None:
    for spec in (
        {"language": "python", "argument": "code"},
        {"language": "python", "argument": "code", "output": "stdout", "grades": False},
        {"language": "shell", "argument": "code", "grades": True, "future_key": 1},
    ):
        assert _problems(_tool(spec), declarations([_tool(spec)])[0][1]) == [], spec


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("python", "not an object"),
        ({"argument": "code"}, "language"),
        ({"language": "ruby", "argument": "code"}, "language"),
        ({"language": "python"}, "argument"),
        ({"language": "python", "argument": "source"}, "not a property"),
        ({"language": "python", "argument": "code", "output": ""}, "output"),
        ({"language": "python", "argument": "code", "grades": "yes"}, "grades"),
    ],
)
def test_a_malformed_declaration_is_named(spec: object, says: str) -> None:
    t = _tool(spec)
    problems = _problems(t, declarations([t])[0][1])
    assert problems and says in problems[0], problems


def test_the_code_argument_must_be_a_string() -> None:
    t = _tool(
        {"language": "python", "argument": "code"},
        schema={"type": "object", "properties": {"code": {"type": "integer"}}},
    )
    assert "not a string" in _problems(t, declarations([t])[0][1])[0]


def test_the_output_key_must_be_allowed_by_a_closed_output_schema() -> None:
    closed = {"type": "object", "properties": {"stdout": {"type": "string"}}, "additionalProperties": False}
    ok = _tool({"language": "python", "argument": "code", "output": "stdout"}, output_schema=closed)
    bad = _tool({"language": "python", "argument": "code", "output": "out"}, output_schema=closed)
    assert _problems(ok, declarations([ok])[0][1]) == []
    assert "output_schema" in _problems(bad, declarations([bad])[0][1])[0]


def test_tools_without_the_key_are_not_declarations() -> None:
    plain = tool_pb2.Tool(name="echo")
    hinted = tool_pb2.Tool(name="peek")
    to_struct({"readOnlyHint": True}, hinted.annotations)
    assert declarations([plain, hinted]) == []


def test_probe_reports_are_read_back_whatever_else_was_printed() -> None:
    out = "noise\n" + probes.MARK + json.dumps({"a": 1}) + "\n" + probes.MARK + "{broken\n" + probes.MARK + "[1]\n"
    assert probes.reports(out + probes.MARK + json.dumps({"b": [2]})) == [{"a": 1}, {"b": [2]}]


def test_every_probe_is_valid_python() -> None:
    """The probes are source text run inside the target: each must at least compile."""
    sources = [
        probes.answer_key_probe(["pkg"], ["/secret"], seconds=1, limit=10),
        probes.answer_key_submission("solve", seconds=1),
        probes.socket_probe(["/run/x.sock"], [1], seconds=1, limit=10),
        probes.socket_probe([], [], seconds=1, limit=10, report_out=False),
        probes.escape_probe("t"),
        probes.memory_probe(target=1, chunk=1, step=1, hold=0),
        probes.disk_probe(max_bytes=1, max_files=1, seconds=1, prefix="p"),
        probes.ipc_probe(key=1, size=1, token="t"),
        probes.ipc_leftovers(key=1, token="t"),
        probes.process_probe(marker="m", sleep_arg="1.5"),
        probes.process_leftovers(markers=["m"]),
        probes.fork_bomb(comm="c"),
        probes.holder(ready="r", cap=1, hold=0),
        probes.bystander("n")[0],
        probes.bystander("n", write_file=True)[0],
        probes.forker("n", 2)[0],
        probes.leak_submission("solve", "marker"),
    ]
    sources += [code for _, code in probes.forgeries("solve") + probes.forgeries(None)]
    sources += [code for _, code in probes.null_submissions("solve")]
    for src in sources:
        compile(src, "<probe>", "exec")


def test_sandbox_sizes_take_units() -> None:
    size = _Size()
    assert size.convert("2G", None, None) == 2 << 30
    assert size.convert("512MiB", None, None) == 512 << 20
    assert size.convert("1.5k", None, None) == 1536
    assert size.convert("4096", None, None) == 4096
    for bad in ("lots", "-1G", "0"):
        with pytest.raises(Exception, match="size"):
            size.convert(bad, None, None)


def test_the_memory_probe_counts_what_its_children_held_at_once() -> None:
    """Nothing bounds it here (a plain interpreter): every child holds its chunk until all do,
    so the peak is all of it, and nothing was killed."""
    import subprocess
    import sys

    mib = 1 << 20
    code = probes.memory_probe(target=3 * 32 * mib, chunk=32 * mib, step=8 * mib, hold=30.0)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = probes.reports(done.stdout)[-1]
    assert last == {"peak": 96 * mib, "killed": 0, "finished": True}, done.stderr[-2000:]


def test_the_canary_lock_never_follows_a_planted_symlink(tmp_path: Path) -> None:
    """The host-wide canary lock lives in /tmp, which every user (and a sandbox that wrongly shows
    the host's /tmp) can write: a symlink planted at its path is not followed (a root certifier
    would otherwise chmod the link's target world-writable); a real file is locked and reused."""
    from openenv_conformance.checks._sandbox_host import _host_lock

    target = tmp_path / "secret"
    target.write_text("x")
    target.chmod(0o600)
    link = tmp_path / "openenv-certify-canary.lock"
    link.symlink_to(target)
    assert _host_lock(str(link)) is None
    assert (target.stat().st_mode & 0o777) == 0o600 and target.read_text() == "x"
    real = tmp_path / "real.lock"
    fd = _host_lock(str(real))
    assert fd is not None and (real.stat().st_mode & 0o777) == 0o666
    os.close(fd)
    fd = _host_lock(str(real))  # an existing lock file is opened again, not recreated
    assert fd is not None
    os.close(fd)
