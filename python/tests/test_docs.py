"""The documentation is checked like code (CONTRIBUTING.md, "Code style").

* The API reference builds with pdoc (``pdoc openenv -o DIR``, the documented command), and its
  ``openenv.Environment`` entry documents every class attribute and hook: a declaration that
  loses its docstring, or a new one added without one, fails here.
* Every ```python snippet of README.md and envs/*/README.md runs as a script, as written: a
  server snippet (one calling ``openenv.serve``/``serve_async``) until its port answers, then
  SIGTERM must drain it and exit 0; a client snippet against a reference server started for it
  (the environment whose package it imports, from ``[tool.openenv] factory``); any other snippet
  on its own. The only edit is the port: 50051 and 8000 become free loopback ports. A snippet
  that cannot run here is preceded by ``<!-- snippet: skip REASON -->`` and reported skipped
  with that reason; ``<!-- snippet: server MODULE:CLASS -->`` names the server of a client
  snippet that imports no reference environment.
* Every ``openenv`` command those READMEs show exists (``openenv CMD --help`` exits 0), with
  every ``--option`` shown.

docs/tools.md and docs/rubrics.md run their own snippets (test_tools.py, test_rubrics.py).
Nothing here asserts on timing: every wait polls with a generous bound.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from openenv import Environment

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted(REPO.glob("envs/*/README.md"))]
START_S = 60.0  # bound on a server starting (it is usually up within a second or two)
RUN_S = 180.0  # bound on a snippet running to its end
STOP_S = 60.0  # bound on a drain after SIGTERM
GRPC_PORT, HTTP_PORT = "50051", "8000"  # the ports the snippets are written with

# What the API reference must document on openenv.Environment (besides every public name
# the class has, which is checked too), and what some of those docstrings must say.
ATTRIBUTES = (
    "name",
    "version",
    "description",
    "action_type",
    "observation_type",
    "state_type",
    "example_actions",
    "action_budget",
    "run_in_thread",
    "reward_range",
    "max_episode_steps",
    "max_sessions",
    "concurrent_sessions",
    "deterministic",
    "float_tolerance",
    "seeded",
    "lenient_actions",
    "auto_reset",
    "metadata",
    "rubric",
)
HOOKS = ("__init__", "reset", "step", "state", "close", "reward", "finish_tool_step", "tools")
MUST_SAY = {"state": "before the first reset", "run_in_thread": "event loop", "max_episode_steps": "truncated"}

# `openenv validate` in the README is upstream OpenEnv's command (its clients work against our
# servers); it is not one of ours, so it is not looked for.
UPSTREAM_COMMANDS = {"validate"}


def _openenv_cli() -> list[str]:
    script = Path(sys.executable).parent / "openenv"
    return [str(script)] if script.exists() else [sys.executable, "-m", "openenv.cli"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PORT"}
    env.update(GRPC_VERBOSITY="ERROR", PYTHONUNBUFFERED="1", **extra)
    return env


def _wait_until(what: str, ok: Callable[[], bool], bound_s: float, alive: Callable[[], str | None]) -> None:
    """Poll ``ok`` until it holds; fail with ``alive()``'s report if the process died first."""
    deadline = time.monotonic() + bound_s
    while not ok():
        dead = alive()
        if dead is not None:
            pytest.fail(f"{what}: the process ended first\n{dead}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {bound_s:g} s")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


def _free_ports(n: int) -> list[str]:
    """``n`` distinct free loopback ports (held together while chosen, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [str(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _answers(port: str) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


# ------------------------------------------------------------------ the API reference


def _pdoc_or_skip() -> None:
    try:
        import pdoc  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("pdoc must be installed in CI (the dev extra)")
        pytest.skip("pdoc is not installed: pip install 'protoenv[dev]' (or pdoc)")


def _sections(page: str, cls: str) -> dict[str, str]:
    """``member -> its rendered HTML`` for the members of ``cls`` on a pdoc page."""
    marks = list(re.finditer(rf'<div id="{cls}\.(\w+)" class="classattr">', page))
    out = {}
    for i, m in enumerate(marks):
        end = page.find("</section>", m.start())  # the end of the class's entry
        end = min(marks[i + 1].start(), end) if i + 1 < len(marks) else end
        out[m.group(1)] = page[m.start() : end]
    return out


def _docstring_text(section: str) -> str:
    m = re.search(r'<div class="docstring">(.*)', section, re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", m.group(1))).split()) if m else ""


def _public_members(cls: type) -> set[str]:
    names = {n for n in vars(cls).get("__annotations__", {}) if not n.startswith("_")}
    names |= {
        n
        for n, v in vars(cls).items()
        if not n.startswith("_") and (callable(v) or isinstance(v, classmethod | staticmethod))
    }
    return names | {"__init__"}


def test_the_api_reference_documents_every_attribute_and_hook_of_environment(tmp_path: Path) -> None:
    """`pdoc openenv` (the documented command) builds the reference; on its Environment entry,
    every declaration and hook has a docstring, so the reference shows what it means."""
    _pdoc_or_skip()
    out = tmp_path / "api"
    proc = subprocess.run(
        [sys.executable, "-m", "pdoc", "openenv", "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page_path = out / "openenv.html"
    assert page_path.exists(), sorted(p.name for p in out.iterdir())
    page = page_path.read_text()
    assert 'id="Environment"' in page, "the reference has no openenv.Environment entry"
    sections = _sections(page, "Environment")
    wanted = set(ATTRIBUTES) | set(HOOKS) | _public_members(Environment)
    missing = sorted(wanted - set(sections))
    assert not missing, f"not in the reference at all: {missing}"
    undocumented = sorted(n for n in wanted if len(_docstring_text(sections[n])) < 20)
    assert not undocumented, f"Environment members without a docstring in the reference: {undocumented}"
    for name, phrase in MUST_SAY.items():
        assert phrase in _docstring_text(sections[name]), f"Environment.{name}'s docstring should say {phrase!r}"


# ------------------------------------------------------------------ snippets

_DIRECTIVE = re.compile(r"<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->")


@dataclasses.dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    skip: str | None = None
    server: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def serves(self) -> bool:
        return re.search(r"\b(openenv\.)?serve(_async)?\(", self.code) is not None

    @property
    def ports(self) -> set[str]:
        return {p for p in (GRPC_PORT, HTTP_PORT) if re.search(rf"(?<!\d){p}(?!\d)", self.code)}

    def with_ports(self, grpc_port: str, http_port: str) -> str:
        code = re.sub(rf"(?<!\d){GRPC_PORT}(?!\d)", grpc_port, self.code)
        return re.sub(rf"(?<!\d){HTTP_PORT}(?!\d)", http_port, code)


def _snippets(path: Path) -> Iterator[Snippet]:
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
        if lang not in ("python", "py"):
            continue
        prev = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        directive = _DIRECTIVE.fullmatch(prev)
        kind, arg = (directive.group(1), directive.group(2)) if directive else (None, None)
        if kind not in (None, "skip", "server") or (kind and not arg):
            raise ValueError(f"{path}:{start}: use <!-- snippet: skip REASON --> or <!-- snippet: server MOD:CLS -->")
        yield Snippet(
            path,
            start + 1,
            textwrap.dedent("\n".join(body)) + "\n",
            skip=arg if kind == "skip" else None,
            server=arg if kind == "server" else None,
        )


SNIPPETS = [s for doc in DOCS for s in _snippets(doc)]


def _reference_factories() -> dict[str, str]:
    """Top-level package -> ``module:Class`` of every environment in envs/."""
    out = {}
    for pp in sorted(REPO.glob("envs/*/pyproject.toml")):
        factory = tomllib.loads(pp.read_text()).get("tool", {}).get("openenv", {}).get("factory")
        if factory:
            out[factory.split(".")[0].split(":")[0]] = factory
    return out


def _imported_packages(code: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _server_of(snippet: Snippet) -> str:
    if snippet.server:
        return snippet.server
    refs = _reference_factories()
    found = sorted(refs[p] for p in _imported_packages(snippet.code) if p in refs)
    if len(found) != 1:
        pytest.fail(
            f"{snippet.id}: cannot tell which environment serves this snippet (it imports "
            f"{found or 'no reference environment'}); precede it with <!-- snippet: server MODULE:CLASS -->"
        )
    return found[0]


@dataclasses.dataclass
class _Server:
    proc: subprocess.Popen[bytes]
    grpc_port: str
    http_port: str


class _ReferenceServers:
    """Reference environments served on free loopback ports, started on first use."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: dict[str, _Server] = {}

    def get(self, factory: str) -> _Server:
        if factory not in self.servers:
            n = len(self.servers)
            ready, http_ready, log = (self.workdir / f"{n}.{x}" for x in ("grpc", "http", "log"))
            cmd = [
                *_openenv_cli(),
                "serve",
                factory,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--ready-file",
                str(ready),
                "--http-port",
                "0",
                "--http-ready-file",
                str(http_ready),
            ]
            with log.open("wb") as out:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_env(), cwd=self.workdir)
            self.servers[factory] = server = _Server(proc, "", "")
            _wait_until(
                f"openenv serve {factory}",
                lambda: (
                    ready.exists()
                    and http_ready.exists()
                    and ready.read_text().strip() != ""
                    and http_ready.read_text().strip() != ""
                ),
                START_S,
                lambda: None if proc.poll() is None else _tail(log),
            )
            server.grpc_port = ready.read_text().strip().rsplit(":", 1)[1]
            server.http_port = http_ready.read_text().strip().rsplit(":", 1)[1].rstrip("/")
        return self.servers[factory]

    def close(self) -> None:
        for s in self.servers.values():
            _stop(s.proc)


@pytest.fixture(scope="module")
def reference_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ReferenceServers]:
    servers = _ReferenceServers(tmp_path_factory.mktemp("reference-servers"))
    try:
        yield servers
    finally:
        servers.close()


def _run_script(code: str, where: Path, label: str) -> None:
    script = where / "snippet.py"
    script.write_text(code)
    try:
        proc = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=RUN_S, env=_env(), cwd=where
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{label} did not finish within {RUN_S:g} s\n{e.stdout!r}\n{e.stderr!r}")
    assert proc.returncode == 0, f"{label} failed (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}"


def _run_server_snippet(snippet: Snippet, where: Path) -> None:
    if not snippet.ports:  # it would listen on the default ports, which the test cannot move
        pytest.fail(f"{snippet.id}: a server snippet names its ports (port={GRPC_PORT}, http_port={HTTP_PORT})")
    grpc_port, http_port = _free_ports(2)
    script, out, err = where / "snippet.py", where / "stdout.txt", where / "stderr.txt"
    script.write_text(snippet.with_ports(grpc_port, http_port))
    # $PORT too: a snippet that leaves the HTTP port to its default must not take 8000.
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=o, stderr=e, env=_env(PORT=http_port), cwd=where)
    try:
        ports = [{GRPC_PORT: grpc_port, HTTP_PORT: http_port}[p] for p in sorted(snippet.ports)]
        _wait_until(
            f"{snippet.id} serving on {ports}",
            lambda: all(_answers(p) for p in ports) and all(f":{p}" in _tail(err) for p in ports),
            START_S,
            lambda: None if proc.poll() is None else _tail(out) + _tail(err),
        )
    finally:
        code = _stop(proc)
    assert code == 0, f"{snippet.id}: exit {code} after SIGTERM (a drain ends with 0)\n{_tail(out)}{_tail(err)}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs_as_written(snippet: Snippet, reference_servers: _ReferenceServers, tmp_path: Path) -> None:
    """A reader can paste any Python snippet of a README into a file and run it."""
    if snippet.skip:
        pytest.skip(f"{snippet.id}: {snippet.skip}")
    if snippet.serves:
        _run_server_snippet(snippet, tmp_path)
    elif snippet.ports:
        server = reference_servers.get(_server_of(snippet))
        _run_script(snippet.with_ports(server.grpc_port, server.http_port), tmp_path, snippet.id)
    else:
        _run_script(snippet.code, tmp_path, snippet.id)


def test_the_readmes_have_snippets_of_every_kind() -> None:
    """The snippet test above is not vacuous: it finds servers, clients and standalone scripts."""
    assert any(s.serves for s in SNIPPETS)
    assert any(s.ports and not s.serves for s in SNIPPETS)
    assert any(not s.ports and not s.serves for s in SNIPPETS)
    assert all(doc.exists() for doc in DOCS) and len(DOCS) >= 4


# ------------------------------------------------------------------ commands


#: Commands whose next word is a subcommand: checked as `openenv GROUP SUB --help`.
COMMAND_GROUPS = ("harness", "sandbox", "fleet", "catalog")


def _commands() -> dict[str, set[str]]:
    """``openenv`` subcommand -> the ``--options`` shown with it, from every shell block and inline
    code span of the READMEs."""
    lines: list[str] = []
    for doc in DOCS:
        text = doc.read_text()
        for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            if lang.lower() not in ("python", "py", "ts", "typescript", "js", "json", "toml", "markdown"):
                joined = re.sub(r"\\\n\s*", " ", body)  # a command continued on the next line is one line
                lines += [ln.strip().removeprefix("$ ") for ln in joined.splitlines()]
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        lines += re.findall(r"`(openenv [^`]+)`", prose)
    out: dict[str, set[str]] = {}
    for line in lines:
        if not line.startswith("openenv "):
            continue
        words = shlex.split(line, comments=True)
        if len(words) < 2 or words[1] in UPSTREAM_COMMANDS:
            continue
        key, rest = words[1], words[2:]
        if key in COMMAND_GROUPS and rest and not rest[0].startswith("-"):  # `openenv harness run ...`
            key, rest = f"{key} {rest[0]}", rest[1:]
        out.setdefault(key, set()).update(w.split("=", 1)[0] for w in rest if w.startswith("--"))
    return out


COMMANDS = _commands()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_openenv_command_shown_exists(command: str, tmp_path: Path) -> None:
    """`openenv CMD --help` exits 0 and lists every option the READMEs use with CMD."""
    proc = subprocess.run(
        [*_openenv_cli(), *command.split(), "--help"],
        capture_output=True,
        text=True,
        timeout=RUN_S,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"openenv {command} --help: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    unknown = sorted(o for o in COMMANDS[command] if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", proc.stdout))
    assert not unknown, f"openenv {command} has no option {unknown}\n{proc.stdout}"


def test_the_readmes_show_the_main_commands() -> None:
    assert {"serve", "certify", "build", "init", "bridge"} <= set(COMMANDS), sorted(COMMANDS)


def test_snippet_directives_are_read(tmp_path: Path) -> None:
    """`<!-- snippet: skip REASON -->` and `<!-- snippet: server MOD:CLS -->` apply to the next
    python block only; an unknown or empty directive is an error, not silently ignored."""
    doc = tmp_path / "README.md"
    doc.write_text(
        "<!-- snippet: skip needs a Hugging Face Space -->\n\n```python\nprint(1)\n```\n\n"
        "<!-- snippet: server echo_env.server:EchoEnvironment -->\n```python\nprint(50051)\n```\n\n"
        "```bash\nopenenv serve x:Y\n```\n```python\nprint(2)\n```\n"
    )
    first, second, third = _snippets(doc)
    assert (first.skip, first.server, first.line) == ("needs a Hugging Face Space", None, 3)
    assert (second.skip, second.server, second.ports) == (None, "echo_env.server:EchoEnvironment", {GRPC_PORT})
    assert (third.skip, third.server, third.code) == (None, None, "print(2)\n")
    doc.write_text("<!-- snippet: skip -->\n```python\nprint(1)\n```\n")
    with pytest.raises(ValueError, match="snippet: skip REASON"):
        list(_snippets(doc))
