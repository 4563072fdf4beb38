"""A clean copy of an agent's workspace for a verifier (openenv.sandbox.clean_copy, RFC 0015):
whatever the agent's repository configures, the verifier's git runs none of the agent's
programs, and reads the repository as the agent left it.

Real git, in real directories: each test builds a repository the way an agent would (a clean
filter, hooks, core.fsmonitor, an alias, an include of another file, core.pager, a global
.gitconfig), runs the verifier's usual commands on the copy, and checks that the planted
program never ran; the same commands on the uncleaned copy show that it would have.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from openenv.sandbox import VERIFIER_ENV, WorkspaceFiles, clean_copy, clean_git_config

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x",
            "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"}  # fmt: skip
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env={**base, **(env or {})})


def _read(root: Path) -> WorkspaceFiles:
    ws = WorkspaceFiles()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            ws.dirs.append(rel)
        elif p.is_file():
            ws.files[rel] = p.read_bytes()
            ws.modes[rel] = p.stat().st_mode & 0o777
    return ws


def _write(ws: WorkspaceFiles, root: Path) -> None:
    for d in ws.dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for rel, data in ws.files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        os.chmod(root / rel, ws.modes.get(rel, 0o644))


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """An agent's repository: one commit, then every way of making git run a program."""
    repo = tmp_path / "agent"
    repo.mkdir()
    assert _git(repo, "init", "-q", "-b", "main").returncode == 0
    (repo / "a.txt").write_text("hello\n")
    assert _git(repo, "add", "a.txt").returncode == 0
    assert _git(repo, "commit", "-q", "-m", "first").returncode == 0
    marker = tmp_path / "ran"
    evil = repo / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    evil.chmod(0o755)
    (repo / ".gitattributes").write_text("*.txt filter=steal\n")
    (repo / "extra.cfg").write_text(f"[core]\n\tpager = {evil}\n")
    with (repo / ".git" / "config").open("a") as f:
        f.write(
            f'[filter "steal"]\n\tclean = {evil} clean\n\tsmudge = {evil} smudge\n\trequired\n'
            f"[core]\n\tfsmonitor = {evil}\n\thooksPath = .git/hooks\n"
            f"[alias]\n\tst = !{evil} alias\n[include]\n\tpath = ../extra.cfg\n"
            f"[user]\n\tname = Agent\n\temail = agent@example.invalid\n[commit]\n\tgpgsign = true\n"
            f'[remote "origin"]\n\turl = ext::{evil} remote\n'
        )
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\n{evil} hook\n")
    hook.chmod(0o755)
    (repo / ".gitconfig").write_text(f"[core]\n\tpager = {evil} global-pager\n[user]\n\tname = Global\n")
    (repo / "a.txt").write_text("hello, changed\n")  # a change for the filter to see
    return repo


def _verifier_commands(repo: Path) -> None:
    env = dict(VERIFIER_ENV)
    _git(repo, "status", "--porcelain", env=env)
    _git(repo, "diff", env={**env, "GIT_PAGER": ""})
    _git(repo, "log", "-1", env=env)
    _git(repo, "add", "-A", env=env)
    _git(repo, "commit", "-q", "-m", "verifier", env=env)
    _git(repo, "st", env=env)


def test_the_agents_repository_would_run_its_programs_in_the_verifiers_git(hostile: Path) -> None:
    """The control: uncleaned, the verifier's git runs the agent's filter (and more)."""
    marker = hostile.parent / "ran"
    copy = hostile.parent / "uncleaned"
    _write(_read(hostile), copy)
    _verifier_commands(copy)
    assert marker.exists() and "clean" in marker.read_text()


def test_a_clean_copy_runs_none_of_them_and_keeps_the_repository(hostile: Path) -> None:
    marker = hostile.parent / "ran"
    copy = hostile.parent / "cleaned"
    cleaned = clean_copy(_read(hostile))
    _write(cleaned, copy)
    _verifier_commands(copy)
    assert not marker.exists(), marker.read_text()
    # The repository is the agent's: its commit, its identity, the change it made.
    log = _git(copy, "log", "--format=%s", env=dict(VERIFIER_ENV)).stdout.split("\n")
    assert log[:2] == ["verifier", "first"]
    assert _git(copy, "config", "user.name", env=dict(VERIFIER_ENV)).stdout.strip() == "Agent"
    assert _git(copy, "show", "HEAD:a.txt", env=dict(VERIFIER_ENV)).stdout == "hello, changed\n"
    assert "hooks/pre-commit" not in "\n".join(cleaned.files)
    config = cleaned.files[".git/config"].decode()
    for gone in ("filter", "fsmonitor", "hookspath", "alias", "include", "gpgsign", "ext::"):
        assert gone not in config.lower(), config
    assert 'name = "Agent"' in config and "repositoryformatversion" in config
    assert "pager" not in cleaned.files[".gitconfig"].decode() and "Global" in cleaned.files[".gitconfig"].decode()


def test_config_syntax_that_hides_a_key_is_read_as_git_reads_it() -> None:
    """Continuation lines, the old [section.subsection] form, quoted values with comment
    characters, bare keys and case: a dropped key stays dropped whatever its spelling."""
    text = (
        '[Filter.x]\n  Clean = evil\n[CORE]\n  fsMonitor = "a;b"\n  bare\n'
        "[core] pager = evil\n[alias]\n  x = !evil \\\n  more\n"
        '[user]\n  name = "A # not a comment"  ; a comment\n[commit]\n  gpgSign = off\n'
    )
    out = clean_git_config(text)
    assert "evil" not in out and "fsmonitor" not in out.lower() and "pager" not in out
    assert 'bare = "true"' in out and 'name = "A # not a comment"' in out and 'gpgsign = "off"' in out


def test_the_verifier_env_keeps_the_work_tree_off_pythons_path(tmp_path: Path) -> None:
    """A ``json.py`` planted in the working directory is imported by ``python -c`` and
    ``python -m`` without PYTHONSAFEPATH, never with VERIFIER_ENV."""
    (tmp_path / "json.py").write_text("raise SystemExit('planted module imported')\n")
    cmd = ["python3", "-c", "import json; print('real json')"]
    base = {"PATH": "/usr/bin:/bin"}
    planted = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=base)
    assert "planted module imported" in planted.stderr
    clean = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env={**base, **VERIFIER_ENV})
    assert clean.stdout.strip() == "real json", clean.stderr


def test_a_linked_worktrees_common_config_is_cleaned_too(tmp_path: Path) -> None:
    """A ``.git`` file pointing at a linked worktree's git directory, whose ``commondir`` names a
    directory with objects and refs but no HEAD: git reads that directory's config, so its
    filter runs unless it is cleaned as well."""
    main = tmp_path / "main"
    main.mkdir()
    assert _git(main, "init", "-q", "-b", "main").returncode == 0
    (main / "a.txt").write_text("one\n")
    _git(main, "add", "a.txt")
    assert _git(main, "commit", "-q", "-m", "first").returncode == 0
    assert _git(main, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side").returncode == 0
    # The agent's workspace: the linked worktree, with the common directory moved inside it.
    ws = tmp_path / "ws"
    shutil.copytree(tmp_path / "wt", ws)
    shutil.copytree(main / ".git", ws / "common")
    (ws / "common" / "HEAD").unlink()
    gitdir = ws / "common" / "worktrees" / "wt"
    (gitdir / "commondir").write_text("../..\n")
    (gitdir / "gitdir").write_text(f"{ws}/.git\n")
    (ws / ".git").write_text(f"gitdir: {gitdir}\n")
    marker = tmp_path / "ran"
    evil = ws / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    evil.chmod(0o755)
    (ws / ".gitattributes").write_text("*.txt filter=steal\n")
    with (ws / "common" / "config").open("a") as f:
        f.write(f'[filter "steal"]\n\tclean = {evil} clean\n')
    (ws / "a.txt").write_text("two\n")
    assert _git(ws, "status", "--porcelain").returncode == 0
    assert marker.exists()  # the control: git ran the common directory's filter
    marker.unlink()
    cleaned = clean_copy(_read(ws))
    assert "filter" not in cleaned.files["common/config"].decode()
    shutil.rmtree(ws / "common")
    _write(cleaned, ws)
    assert _git(ws, "status", "--porcelain").returncode == 0
    assert not marker.exists()


def test_an_isolated_run_never_imports_a_module_planted_in_the_workspace() -> None:
    """``Sandbox.run(..., isolated=True)`` (an environment's own program where the agent's files
    are) does not put the workspace on ``sys.path``: a planted ``tarfile.py`` is imported by a
    plain run (the control) and never by an isolated one (harbor_env's grader was fooled this
    way: the planted module printed its verdict)."""
    from openenv.sandbox import Sandbox, put_files

    with Sandbox() as box:
        put_files(box, {"tarfile.py": "print('PLANTED')\nraise SystemExit(0)\n"})
        plain = box.run("import tarfile\nprint('real', hasattr(tarfile, 'open'))\n")
        isolated = box.run("import tarfile\nprint('real', hasattr(tarfile, 'open'))\n", isolated=True)
    assert "PLANTED" in plain.stdout
    assert isolated.stdout.strip() == "real True", isolated.stderr
