"""Every shell command README.md and docs/*.md tell a reader to run, runs (CONTRIBUTING.md, "Code style").

The commands are the lines of the ```bash / ```sh / ```shell blocks (a ``\\`` continues a
line). Each block is one test: its lines run in order, with ``bash``, in a scratch copy of the
checkout (its top-level files and folders linked, ``envs/`` copied, ``.venv`` linked to the
running interpreter's virtualenv, whose ``bin`` leads ``PATH``; ``HOME`` is the scratch folder).
What a line may need is provided, and the line is otherwise run as written:

* ``127.0.0.1:50051`` and ``:8000`` (``grpc://``/``http://``) are a reference server started for
  the block, on free loopback ports that replace those numbers (as the snippet test does):
  ``echo_env``'s, or the one named by ``<!-- commands: server MODULE:CLASS -->``;
* ``<path to this repo>`` is the checkout;
* ``make TARGET`` runs as ``make --dry-run TARGET`` (the target exists and its recipe expands;
  the virtualenv is not touched);
* a line that serves until stopped (``openenv serve``, ``openenv bridge``) runs until it says
  where it serves, then SIGTERM must end it with 0 (``openenv serve`` without ``--port`` gets
  ``--port 0`` and ``$PORT`` a free port: the one edit, so that it cannot collide).

Directives, HTML comments right above a block (invisible on the rendered page), say what
cannot run as written:

* ``<!-- commands: skip REASON -->``: no line of the block runs (reported skipped, with REASON);
* ``<!-- command: skip PREFIX | REASON -->``: the lines starting with PREFIX do not run;
* ``<!-- command: run PREFIX | COMMAND -->``: the lines starting with PREFIX are checked by
  running COMMAND instead: a bounded variant of a long command (fewer steps), or a concrete
  one for a line with placeholders.

A line that takes long even bounded (certification, training, an eval) runs only with
``OPENENV_DOCS_CHECK=1`` (``make docs-check`` runs them all); ``make test`` runs the rest. A
directive that matches no line is an error, so none outlives its command.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELLS = ("bash", "sh", "shell")
DEFAULT_SERVER = "echo_env.server:EchoEnvironment"
PORTS = ("50051", "8000")
RUN_S = 900.0  # bound on one command (a bounded variant finishes in well under a minute)
START_S = 120.0  # bound on a server starting
STOP_S = 60.0
FULL = os.environ.get("OPENENV_DOCS_CHECK") == "1"
# Lines that take long even bounded: run by `make docs-check` (OPENENV_DOCS_CHECK=1) only.
LONG = (
    "openenv certify",
    "openenv collect",
    "openenv fleet up",
    "openenv fleet status",
    "openenv fleet down",
    "inspect eval",
    "python examples/",
    ".venv/bin/python tools/generate.py",  # python/tests/test_generated.py runs it in make test too
)
# Lines that need a Docker engine: skipped without one, except in CI (as the docker marker does).
DOCKER = ("openenv ps", "openenv cleanup")
SERVERS = ("openenv serve", "openenv bridge")

_DIRECTIVE = re.compile(r"<!--\s*(commands?):\s*(\w+)\s*(.*?)\s*-->")


@dataclasses.dataclass
class Block:
    path: Path
    line: int
    commands: list[str]
    skip: str | None = None
    server: str = DEFAULT_SERVER
    skips: dict[str, str] = dataclasses.field(default_factory=dict)  # prefix -> reason
    runs: dict[str, str] = dataclasses.field(default_factory=dict)  # prefix -> command

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _logical_lines(body: list[str]) -> list[str]:
    out: list[str] = []
    pending = ""
    for raw in body:
        line = raw.rstrip()
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line = (pending + line.strip()).strip()
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    return out


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        start, lang = i, fence[3:].strip().lower()
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        if lang not in SHELLS:
            continue
        block = Block(path, start + 1, _logical_lines(body))
        j = start - 1
        while j >= 0 and (lines[j].strip().startswith("<!--") or not lines[j].strip()):
            m = _DIRECTIVE.fullmatch(lines[j].strip())
            j -= 1
            if m is None:
                continue
            scope, kind, arg = m.groups()
            prefix, _, rest = (s.strip() for s in arg.partition("|"))
            if scope == "commands" and kind == "skip" and arg:
                block.skip = arg
            elif scope == "commands" and kind == "server" and arg:
                block.server = arg
            elif scope == "command" and kind == "skip" and prefix and rest:
                block.skips[prefix] = rest
            elif scope == "command" and kind == "run" and prefix and rest:
                block.runs[prefix] = rest
            else:
                raise ValueError(f"{path}:{j + 2}: unknown or incomplete directive {lines[j + 1].strip()!r}")
        yield block


BLOCKS = [b for doc in DOCS for b in blocks(doc)]


# ------------------------------------------------------------------ the scratch checkout


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _scratch(tmp: Path) -> Path:
    """A copy of the checkout to run commands in: top-level entries linked, envs/ copied (commands
    write into it: openenv init, openenv push --dry-run), .venv linked to this interpreter's."""
    root = tmp / "checkout"
    root.mkdir()
    for entry in REPO.iterdir():
        if entry.name in (".git", ".venv", "build", "envs") or entry.name.startswith(".pytest"):
            continue
        (root / entry.name).symlink_to(entry)
    shutil.copytree(
        REPO / "envs", root / "envs", symlinks=True, ignore=shutil.ignore_patterns("build", "__pycache__", "*.deb")
    )
    (root / ".venv").symlink_to(Path(sys.prefix))
    (tmp / "home").mkdir()
    return root


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(tmp / "home"),
        GRPC_VERBOSITY="ERROR",
        PYTHONUNBUFFERED="1",
        VIRTUAL_ENV=sys.prefix,
        **extra,
    )
    return env


@dataclasses.dataclass
class _Server:
    proc: subprocess.Popen[bytes]
    grpc: int
    http: int


def _start_reference(factory: str, tmp: Path) -> _Server:
    # Port 0 and ready files: ports picked free beforehand may be taken by another test first.
    ready, http_ready = tmp / "reference.ready", tmp / "reference.http-ready"
    log = tmp / "reference.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "openenv.cli", "serve", factory, "--host", "127.0.0.1",
             "--port", "0", "--http-port", "0", "--ready-file", str(ready), "--http-ready-file", str(http_ready)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=_env(tmp), cwd=tmp,
        )  # fmt: skip
    deadline = time.monotonic() + START_S
    while not all(f.is_file() and f.read_text().strip() for f in (ready, http_ready)):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"the reference server {factory} did not start\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.1)
    grpc_port, http_port = (int(f.read_text().strip().rsplit(":", 1)[1]) for f in (ready, http_ready))
    return _Server(proc, grpc_port, http_port)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM) if _own_group(proc) else proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


def _own_group(proc: subprocess.Popen[bytes]) -> bool:
    try:
        return os.getpgid(proc.pid) == proc.pid
    except OSError:
        return False


# ------------------------------------------------------------------ running a line


def _docker_engine() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _uses_ports(line: str) -> bool:
    return any(re.search(rf"(?<!\d){p}(?!\d)", line) for p in PORTS)


def _with_ports(line: str, server: _Server) -> str:
    line = re.sub(r"(?<!\d)50051(?!\d)", str(server.grpc), line)
    return re.sub(r"(?<!\d)8000(?!\d)", str(server.http), line)


def _prepare(block: Block, line: str) -> tuple[str | None, str]:
    """(the command to run, or None to skip; why, for a skip)."""
    for prefix, reason in block.skips.items():
        if line.startswith(prefix):
            return None, reason
    for prefix, command in block.runs.items():
        if line.startswith(prefix):
            line = command
            break
    if not FULL and line.startswith(LONG):
        return None, "long: make docs-check runs it (OPENENV_DOCS_CHECK=1)"
    if line.startswith(DOCKER) and not os.environ.get("CI") and not _docker_engine():
        return None, "needs a Docker engine (required in CI)"
    return line.replace("<path to this repo>", str(REPO)), ""


def _run_line(command: str, cwd: Path, tmp: Path, label: str) -> None:
    words = shlex.split(command, comments=True)
    extra = {}
    if words[:1] == ["make"]:
        command = "make --dry-run " + command[len("make") :].strip()
        extra["PYTHON"] = sys.executable  # what the Makefile would find on PATH, without the search
    if any(" ".join(words).startswith(s) for s in SERVERS):
        _run_server_line(command, words, cwd, tmp, label)
        return
    proc = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=_env(tmp, **extra), capture_output=True, text=True, timeout=RUN_S,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"{label}: `{command}` exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def _run_server_line(command: str, words: list[str], cwd: Path, tmp: Path, label: str) -> None:
    if words[:2] == ["openenv", "serve"] and not any(w == "--port" or w.startswith("--port=") for w in words):
        command += " --port 0"
    log = tmp / "server-line.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=cwd, env=_env(tmp, PORT=str(_free_ports(1)[0])),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_S
        while "://" not in log.read_text(errors="replace"):
            if proc.poll() is not None:
                pytest.fail(f"{label}: `{command}` exited {proc.returncode} before serving\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{label}: `{command}` did not say where it serves within {START_S:g} s")
            time.sleep(0.1)
    finally:
        code = _stop(proc)
    assert code == 0, f"{label}: `{command}` exited {code} after SIGTERM\n{log.read_text(errors='replace')[-3000:]}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_every_documented_command_runs(block: Block, tmp_path: Path) -> None:
    """The shell commands of a block run in order, as written (see the module docstring)."""
    if block.skip:
        pytest.skip(f"{block.id}: {block.skip}")
    root = _scratch(tmp_path)
    planned = [(line, *_prepare(block, line)) for line in block.commands]
    server: _Server | None = None
    skipped = []
    try:
        for line, command, reason in planned:
            if command is None:
                skipped.append(f"{line!r}: {reason}")
                continue
            if _uses_ports(command):
                server = server or _start_reference(block.server, tmp_path)
                command = _with_ports(command, server)
            _run_line(command, root, tmp_path, f"{block.id} ({line})")
    finally:
        if server is not None:
            _stop(server.proc)
    if skipped and len(skipped) == len(planned):
        pytest.skip(f"{block.id}: " + "; ".join(skipped))


def test_directives_match_commands() -> None:
    """A `command:` directive names a prefix of one of its block's lines: none outlives its command."""
    stale = [
        f"{b.id}: {prefix!r}"
        for b in BLOCKS
        for prefix in (*b.skips, *b.runs)
        if not any(line.startswith(prefix) for line in b.commands)
    ]
    assert not stale, f"directives matching no command: {stale}"


def test_the_docs_have_commands_of_every_kind() -> None:
    """Not vacuous: commands are found, some run against a reference server, some serve."""
    lines = [line for b in BLOCKS if not b.skip for line in b.commands]
    assert len(BLOCKS) >= 10 and len(lines) >= 30
    assert any(_uses_ports(line) for line in lines)
    assert any(line.startswith(SERVERS) for line in lines)


def test_directives_are_read(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "<!-- commands: skip needs a GPU -->\n```bash\nrun-me\n```\n\n"
        "<!-- commands: server math_env.server:MathEnvironment -->\n"
        "<!-- command: skip openenv build | needs Docker -->\n"
        "<!-- command: run python x.py | python x.py --steps 2 -->\n"
        "```sh\nopenenv build . \\\n  --offline\npython x.py  # long\n```\n```python\nprint(1)\n```\n"
    )
    first, second = blocks(doc)
    assert (first.skip, first.commands) == ("needs a GPU", ["run-me"])
    assert second.server == "math_env.server:MathEnvironment"
    assert second.commands == ["openenv build . --offline", "python x.py  # long"]
    assert second.skips == {"openenv build": "needs Docker"} and second.runs == {"python x.py": "python x.py --steps 2"}
    doc.write_text("<!-- command: skip openenv build -->\n```bash\nx\n```\n")
    with pytest.raises(ValueError, match="directive"):
        list(blocks(doc))
