"""The terminal tasks: a workspace to start from, an instruction, and checks a verifier runs
after the agent.

A :class:`Check` is a Python snippet that sets ``result`` (an observation of the final
workspace: a file's text, a listing, what a script of the agent's prints) and the value the
observation must equal. The snippets run in :data:`VERIFIER`, a program run in a fresh confined
call on a copy of the agent's files (regular files and directories only); the expected values
never enter the sandbox: the server compares. The helpers the snippets see:

* ``read(path)``: a file's text (never through a link; at most 1 MiB);
* ``exists(path)``, ``isdir(path)``, ``mode(path)`` (permission bits), ``listdir(path)``;
* ``sh(command, stdin="", timeout=10)``: ``[exit_code, stdout]`` of ``/bin/bash --noprofile
  --norc -c command`` in the workspace, with a clean environment (``PATH=/usr/bin:/bin``), or
  ``"timeout"``.

Every task's ``solution`` (a shell script) passes all its checks and the untouched workspace
passes none (``tests/test_terminal_env.py`` runs both for every task).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import random
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["TASKS", "VERIFIER", "Check", "Task", "TaskSet"]


@dataclasses.dataclass(frozen=True)
class Check:
    """One verified property: ``code`` sets ``result``; it passes when ``result == expected``."""

    name: str
    code: str
    expected: Any


@dataclasses.dataclass(frozen=True)
class Task:
    """A terminal task: ``files`` (path -> text or bytes) and ``modes`` (path -> permission
    bits) make the starting workspace; ``checks`` verify the end state; ``solution`` is a shell
    script that solves it (used by the tests, never shown to the agent)."""

    id: str
    prompt: str
    files: Mapping[str, str | bytes]
    checks: tuple[Check, ...]
    solution: str
    modes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    split: str = "train"

    def statement(self) -> str:
        listing = ", ".join(sorted(self.files)) or "(empty)"
        return f"{self.prompt}\n\nThe workspace (/workspace, your starting directory) holds: {listing}."


class TaskSet(Sequence[Task]):
    """Tasks with unique ids, in a stable order."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks = tuple(tasks)
        self._by_id = {t.id: t for t in self._tasks}
        if len(self._by_id) != len(self._tasks):
            raise ValueError("duplicate task ids")
        if not self._tasks:
            raise ValueError("no tasks")

    def __getitem__(self, i: Any) -> Any:
        return self._tasks[i]

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self._tasks)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.split for t in self._tasks))

    def by_id(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"no task {task_id!r}; known: {', '.join(sorted(self._by_id))}") from None

    def sample(self, seed: int | None, split: str | None = None) -> Task:
        pool = [t for t in self._tasks if split is None or t.split == split]
        if not pool:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(self.splits)}")
        return random.Random(seed).choice(pool)


#: The verifier: loaded as a module in a fresh call (the workspace off sys.path before any
#: import, so a module planted there is never imported), then ``check(code)`` per check, in
#: lock step (openenv.sandbox's function calls: each answer tagged with a nonce).
VERIFIER = r"""
import sys
sys.path[:] = [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import os, stat, subprocess

W = "/workspace"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}


def _path(path):
    return os.path.join(W, path)


def read(path, limit=1 << 20):
    fd = os.open(_path(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read(limit).decode("utf-8", "replace")


def exists(path):
    return os.path.lexists(_path(path))


def isdir(path):
    try:
        return stat.S_ISDIR(os.lstat(_path(path)).st_mode)
    except OSError:
        return False


def mode(path):
    return stat.S_IMODE(os.lstat(_path(path)).st_mode)


def listdir(path="."):
    return sorted(os.listdir(_path(path)))


def sh(command, stdin="", timeout=10):
    try:
        r = subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", command],
            cwd=W, env=ENV, input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    return [r.returncode, r.stdout.decode("utf-8", "replace")[:65536]]


HELPERS = {"read": read, "exists": exists, "isdir": isdir, "mode": mode, "listdir": listdir, "sh": sh}


def check(code):
    ns = dict(HELPERS)
    exec(compile(code, "<check>", "exec"), ns)
    return ns.get("result")
"""


def _tar_gz(files: Mapping[str, str]) -> bytes:
    """A .tar.gz of ``files``, the same bytes on every machine (no times, no owners)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            t.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def _log(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


_LOGS = {
    "logs/app1.log": _log(
        [
            "2026-01-01 10:00:00 INFO started",
            "2026-01-01 10:00:01 ERROR disk full",
            "2026-01-01 10:00:02 WARN retrying",
            "2026-01-01 10:00:03 ERROR disk full",
        ]
    ),
    "logs/app2.log": _log(
        [
            "2026-01-01 11:00:00 INFO started",
            "2026-01-01 11:00:05 ERROR timeout talking to db",
            "2026-01-01 11:00:09 INFO ERRORS_SEEN=0 (a counter, not an error line? it contains ERROR)",
        ]
    ),
    "logs/app3.log": _log(["2026-01-01 12:00:00 INFO nothing to report"]),
    "logs/old/app0.log": _log(["2025-12-31 23:59:59 ERROR in an older log, not in logs/*.log"]),
    "notes.txt": "ERROR lines outside logs/ do not count.\n",
}

_SCORES = "name,score\nada,91\nbob,78\ncyd,99\ndee,85\neve,93\nfay,60\ngus,88\n"

_TEXT = (
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs!\n"
    "A fox, a dog, and THE end. Foxes are not fox. the the\n"
)

_FIZZ_HIDDEN = [1, 7, 16, 30]


def _fizz(n: int) -> str:
    out = []
    for i in range(1, n + 1):
        out.append("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i))
    return "".join(s + "\n" for s in out)


_RAW: list[Task] = [
    Task(
        "hello_file",
        "Create the file greeting.txt in the workspace holding exactly one line: hello, terminal",
        {"README": "Start here.\n"},
        (Check("greeting.txt holds the line", "result = read('greeting.txt')", "hello, terminal\n"),),
        "echo 'hello, terminal' > greeting.txt",
    ),
    Task(
        "count_errors",
        "Count the lines containing the text ERROR in the files logs/*.log (the .log files directly in logs/, "
        "not in its subdirectories) and write that number alone to error_count.txt.",
        _LOGS,
        (Check("error_count.txt holds the count", "result = read('error_count.txt').strip()", "4"),),
        "cat logs/*.log | grep -c ERROR > error_count.txt",
    ),
    Task(
        "top_scores",
        "scores.csv has a header line and then name,score rows. Write the names of the three highest scores "
        "to top3.txt, one per line, highest first.",
        {"scores.csv": _SCORES},
        (Check("top3.txt lists the names", "result = read('top3.txt').split()", ["cyd", "eve", "ada"]),),
        "tail -n +2 scores.csv | sort -t, -k2 -nr | head -3 | cut -d, -f1 > top3.txt",
    ),
    Task(
        "make_executable",
        "tools/report.sh is a script that cannot be run yet. Make it executable so that ./tools/report.sh runs "
        "(do not change what it prints).",
        {"tools/report.sh": "#!/bin/sh\necho report ok\n"},
        (
            Check("tools/report.sh is executable", "result = bool(mode('tools/report.sh') & 0o100)", True),
            Check("./tools/report.sh runs", "result = sh('./tools/report.sh')", [0, "report ok\n"]),
        ),
        "chmod +x tools/report.sh",
    ),
    Task(
        "find_largest",
        "Find the largest file (in bytes) anywhere under data/ and write its path relative to the workspace "
        "(like data/a/b.bin) alone to largest.txt.",
        {
            "data/a.txt": "x" * 120,
            "data/b/c.bin": "y" * 700,
            "data/b/d/e.dat": "z" * 1500,
            "data/f/g.txt": "w" * 900,
            "data/h.log": "v" * 30,
        },
        (Check("largest.txt names the file", "result = read('largest.txt').strip()", "data/b/d/e.dat"),),
        "find data -type f -printf '%s %p\\n' | sort -nr | head -1 | cut -d' ' -f2 > largest.txt",
    ),
    Task(
        "replace_host",
        "The services in config/ now use the database host db.internal. Replace every occurrence of localhost "
        "with db.internal in the .ini files under config/; leave every other file as it is.",
        {
            "config/api.ini": "[db]\nhost = localhost\nport = 5432\n",
            "config/worker.ini": "[db]\nhost=localhost\n[cache]\nhost = localhost:6379\n",
            "config/README.txt": "For local development the host was localhost.\n",
        },
        (
            Check(
                "config/ after the change",
                "result = {p: read('config/' + p) for p in listdir('config')}",
                {
                    "api.ini": "[db]\nhost = db.internal\nport = 5432\n",
                    "worker.ini": "[db]\nhost=db.internal\n[cache]\nhost = db.internal:6379\n",
                    "README.txt": "For local development the host was localhost.\n",
                },
            ),
        ),
        "sed -i 's/localhost/db.internal/g' config/*.ini",
    ),
    Task(
        "extract_sum",
        "Extract the archive bundle.tar.gz into a new directory unpacked/ (so that unpacked/numbers.txt exists), "
        "then write the sum of the numbers in unpacked/numbers.txt (one per line) alone to sum.txt.",
        {
            "bundle.tar.gz": _tar_gz(
                {"numbers.txt": "".join(f"{n}\n" for n in (17, 4, 250, 9, 1000, 3)), "info/ABOUT": "numbers\n"}
            )
        },
        (
            Check(
                "unpacked/ holds the archive",
                "result = [listdir('unpacked'), read('unpacked/info/ABOUT')]",
                [
                    ["info", "numbers.txt"],
                    "numbers\n",
                ],
            ),
            Check("sum.txt holds the sum", "result = read('sum.txt').strip()", "1283"),
        ),
        "mkdir -p unpacked && tar -xzf bundle.tar.gz -C unpacked && "
        "awk '{s += $1} END {print s}' unpacked/numbers.txt > sum.txt",
    ),
    Task(
        "word_freq",
        "In text.txt, words are runs of letters (A-Z, a-z), compared ignoring case. Write the three most "
        "frequent words to freq.txt, one per line as `COUNT WORD` (the word lower-cased), most frequent first.",
        {"text.txt": _TEXT},
        (Check("freq.txt", "result = read('freq.txt').split('\\n')[:3]", ["7 the", "4 fox", "3 dog"]),),
        "tr -cs 'A-Za-z' '\\n' < text.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -rn | head -3 "
        "| awk '{print $1, $2}' > freq.txt",
    ),
    Task(
        "project_layout",
        "Create a directory project/ holding the directories src, tests and docs (each with an empty file named "
        ".keep) and a file README.md whose first line is `# project`.",
        {"TODO": "make the project skeleton\n"},
        (
            Check(
                "the layout",
                "result = [listdir('project'), [listdir('project/' + d) for d in ('docs', 'src', 'tests')]]",
                [["README.md", "docs", "src", "tests"], [[".keep"], [".keep"], [".keep"]]],
            ),
            Check("README.md", "result = read('project/README.md').splitlines()[:1]", ["# project"]),
        ),
        "mkdir -p project/src project/tests project/docs && touch project/src/.keep project/tests/.keep "
        "project/docs/.keep && echo '# project' > project/README.md",
    ),
    Task(
        "fizzbuzz_script",
        "Write an executable shell script fizz.sh that takes a number N as its argument and prints the FizzBuzz "
        "sequence for 1..N, one item per line (Fizz for multiples of 3, Buzz of 5, FizzBuzz of both, else the "
        "number). It is run as ./fizz.sh N.",
        {"README": "fizz.sh goes here\n"},
        tuple(Check(f"./fizz.sh {n}", f"result = sh('./fizz.sh {n}')", [0, _fizz(n)]) for n in _FIZZ_HIDDEN),
        "cat > fizz.sh <<'EOF'\n#!/bin/bash\nfor ((i = 1; i <= $1; i++)); do\n"
        "  if ((i % 15 == 0)); then echo FizzBuzz; elif ((i % 3 == 0)); then echo Fizz;\n"
        "  elif ((i % 5 == 0)); then echo Buzz; else echo $i; fi\ndone\nEOF\nchmod +x fizz.sh",
    ),
    Task(
        "dedupe_emails",
        "emails.txt has one address per line, with duplicates that differ only in case and surrounding spaces. "
        "Write unique_emails.txt: each distinct address once, lower-cased and trimmed, sorted.",
        {"emails.txt": "  Bob@Example.com\nada@example.com\nBOB@example.com \ncyd@example.org\nAda@Example.com\n"},
        (
            Check(
                "unique_emails.txt",
                "result = read('unique_emails.txt').split()",
                ["ada@example.com", "bob@example.com", "cyd@example.org"],
            ),
        ),
        "tr 'A-Z' 'a-z' < emails.txt | sed 's/^ *//; s/ *$//' | sort -u > unique_emails.txt",
    ),
    Task(
        "csv_column",
        "inventory.csv has the header item,qty,price. Write total.txt holding the total value of the inventory "
        "(the sum of qty * price over the rows), with two decimals (like 12.50).",
        {"inventory.csv": "item,qty,price\nbolt,100,0.25\nnut,250,0.10\ngear,3,12.50\nspring,40,0.75\n"},
        (Check("total.txt", "result = read('total.txt').strip()", "117.50"),),
        "awk -F, 'NR > 1 {s += $2 * $3} END {printf \"%.2f\\n\", s}' inventory.csv > total.txt",
    ),
]

#: Every fourth task is in the ``test`` split.
TASKS = TaskSet(dataclasses.replace(t, split="test" if i % 4 == 3 else "train") for i, t in enumerate(_RAW))
