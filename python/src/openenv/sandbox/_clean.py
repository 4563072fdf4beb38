"""A clean copy of an agent's workspace for a verifier (RFC 0015, "clean inputs").

A verifier that runs ``git`` in the agent's repository runs whatever that repository's
configuration says: a clean or smudge filter, a hook, ``core.fsmonitor``, ``core.pager``, an
``include.path`` of another file, an ``alias``. All are programs of the agent's choosing,
executed by the verifier (issue 46: a clean filter defined in ``.git/config`` ran the agent's
script when the tests called ``git status``, and wrote the verdict). :func:`clean_copy` returns
the files with every git configuration reduced to keys that configure no program (identity,
branches, remotes, the repository's format), hooks and object alternates removed, and nothing
else changed: what the verifier reads of the repository (objects, refs, the index, the work
tree) is the agent's, but nothing of it is executed by the verifier's tools.

:data:`VERIFIER_ENV` holds the variables a verifier's processes should run with so that the
same holds for the interpreter: no ``sys.path`` entry for the current or the script's
directory (``PYTHONSAFEPATH``: a ``pytest.py`` or ``git.py`` planted in the work tree is not
imported in place of the real one), no user site-packages, no system or global git
configuration read from the agent's ``$HOME``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

from openenv.sandbox._files import WorkspaceFiles

__all__ = ["VERIFIER_ENV", "clean_copy", "clean_git_config"]

#: Environment variables of a verifier's processes (merge them over the task's own).
VERIFIER_ENV: Mapping[str, str] = {
    "PYTHONSAFEPATH": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}

# section -> keys kept (lower case; "*" keeps every key of a subsection-less section of values
# that configure no program). A key not listed is dropped, with its whole meaning.
_KEEP: dict[str, frozenset[str]] = {
    "core": frozenset(
        {
            "repositoryformatversion",
            "filemode",
            "bare",
            "logallrefupdates",
            "ignorecase",
            "precomposeunicode",
            "symlinks",
            "autocrlf",
            "eol",
            "safecrlf",
            "quotepath",
            "abbrev",
            "compression",
            "bigfilethreshold",
            "sharedrepository",
            "checkstat",
            "trustctime",
        }
    ),
    "user": frozenset({"name", "email", "useconfigonly"}),
    "author": frozenset({"name", "email"}),
    "committer": frozenset({"name", "email"}),
    "init": frozenset({"defaultbranch"}),
    "branch": frozenset({"remote", "merge", "rebase", "description"}),
    "remote": frozenset({"url", "fetch"}),
    "extensions": frozenset({"objectformat"}),
    "pull": frozenset({"rebase", "ff"}),
    "merge": frozenset({"ff", "conflictstyle"}),
    "commit": frozenset({"gpgsign"}),
    "tag": frozenset({"gpgsign"}),
    "advice": frozenset({"*"}),
    "color": frozenset({"ui"}),
    "i18n": frozenset({"commitencoding", "logoutputencoding"}),
    "diff": frozenset({"renames", "algorithm", "mnemonicprefix", "noprefix", "context"}),
    "status": frozenset({"showuntrackedfiles", "relativepaths"}),
    "safe": frozenset({"directory"}),
}
#: Values that are true make git run a program (signing): kept only as false.
_ONLY_FALSE = {("commit", "gpgsign"), ("tag", "gpgsign")}
_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_OLD_SUBSECTION = re.compile(r"^([A-Za-z0-9-]+)\.(.+)$")
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*$")


def _value(raw: str | None) -> str | None:
    """A config value without its comment and quotes (None: a bare key, which means true)."""
    if raw is None:
        return None
    out, quoted, i = [], False, 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            break
        else:
            out.append(ch)
        i += 1
    return "".join(out).strip()


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def clean_git_config(text: str) -> str:
    """A git configuration file reduced to the keys that configure no program (see the module's
    text): filters, hooks, fsmonitor, pagers, editors, aliases, includes, credential helpers,
    diff and merge drivers, ssh commands are dropped; a remote URL of the ``ext::`` transport
    (which runs a command) is dropped; signing is kept only when off."""
    section = sub = ""
    kept: list[tuple[str, str, str, str]] = []  # (section, subsection, key, value)
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):  # a value continued on the next line
            i += 1
            line = line[:-1] + lines[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            section, sub = m.group(1).lower(), m.group(2) or ""
            if not m.group(2):
                old = _OLD_SUBSECTION.match(m.group(1))  # [section.subsection], the old syntax
                if old:
                    section, sub = old.group(1).lower(), old.group(2)
            line = m.group(3)
            if not line.strip():
                continue
        e = _ENTRY.match(line)
        if e is None or not section:
            continue
        key, value = e.group(1).lower(), _value(e.group(2))
        allowed = _KEEP.get(section, frozenset())
        if key not in allowed and "*" not in allowed:
            continue
        value = "true" if value is None else value
        if (section, key) in _ONLY_FALSE and value.lower() not in ("false", "no", "off", "0"):
            continue
        if section == "remote" and key == "url" and "::" in value.split("/", 1)[0]:
            continue  # a transport helper (ext::COMMAND, ...): not a location
        kept.append((section, sub, key, value))
    out: list[str] = []
    current: tuple[str, str] | None = None
    for section, sub, key, value in kept:
        if (section, sub) != current:
            current = (section, sub)
            out.append(f"[{section}]" if not sub else f"[{section} {_quote(sub)}]")
        out.append(f"\t{key} = {_quote(value)}")
    return "\n".join(out) + ("\n" if out else "")


def _git_dirs(files: Mapping[str, bytes], dirs: list[str]) -> set[str]:
    """Directories git may read as (part of) a git directory: a ``HEAD`` beside ``objects/``,
    ``refs/`` or a ``commondir`` file (a linked worktree's), or ``objects/`` beside ``refs/``
    without a ``HEAD`` (the common directory a ``commondir`` names, whose ``config`` git reads)."""
    paths = set(files) | set(dirs)
    for p in list(paths):  # every ancestor directory, as git sees the tree
        while "/" in p:
            p = posixpath.dirname(p)
            paths.add(p)

    def has(d: str, name: str) -> bool:
        return (f"{d}/{name}" if d else name) in paths

    candidates = {posixpath.dirname(p) for p in paths if posixpath.basename(p) in ("HEAD", "objects", "refs")}
    return {
        d
        for d in candidates
        if (has(d, "HEAD") and (has(d, "objects") or has(d, "refs") or has(d, "commondir")))
        or (has(d, "objects") and has(d, "refs"))
    }


def clean_copy(workspace: WorkspaceFiles) -> WorkspaceFiles:
    """``workspace`` with every git configuration cleaned (:func:`clean_git_config`: the
    repositories' ``config`` and ``config.worktree``, and a ``.gitconfig`` or ``.config/git/config``
    anywhere), every hook and every ``objects/info/alternates`` removed. A new object; the
    argument is not changed."""
    files = dict(workspace.files)
    # Deepest first: a submodule's git directory (.git/modules/x) inside its parent's.
    git_dirs = sorted(_git_dirs(files, workspace.dirs), key=len, reverse=True)
    for path in list(files):
        name = posixpath.basename(path)
        owner = next((g for g in git_dirs if not g or path.startswith(f"{g}/")), None)
        if owner is not None:
            rel = path[len(owner) + 1 :] if owner else path
            if rel.startswith("hooks/") or rel == "objects/info/alternates":
                del files[path]
                continue
            if rel in ("config", "config.worktree") or (rel.startswith("worktrees/") and name == "config.worktree"):
                files[path] = clean_git_config(files[path].decode("utf-8", "replace")).encode()
                continue
        if name == ".gitconfig" or path == ".config/git/config" or path.endswith("/.config/git/config"):
            files[path] = clean_git_config(files[path].decode("utf-8", "replace")).encode()
    modes = {p: m for p, m in workspace.modes.items() if p in files}
    return WorkspaceFiles(files, modes, list(workspace.dirs), dict(workspace.skipped))
