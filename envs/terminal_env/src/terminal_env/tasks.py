"""The terminal tasks: task families whose contents vary with the seed, an instruction, and
checks a verifier runs after the agent.

A :class:`TaskFamily` is a task id with a generator: ``family.instance(seed)`` draws one
instance of it (a :class:`Task`) from a RNG seeded by the family's id and ``seed``, so the same
seed gives the same instance on every machine, and without a seed the instance is random. The
generator draws the starting workspace's data (file contents, counts, names, numbers) and
computes the checks' expected values from what it drew: an answer learnt on one instance (a
count, a list of names, a file's text) is wrong on another, so memorising across episodes
earns nothing (RFC 0015, "task contents that vary with the seed"). A plain :class:`Task` is a
family of one instance (the same on every seed).

A :class:`Check` is a Python snippet that sets ``result`` (an observation of the final
workspace: a file's text, a listing, what a script of the agent's prints) and the value the
observation must equal. The snippets run in :data:`VERIFIER`, a program run in a fresh confined
call on a clean copy of the agent's files (regular files and directories only); the expected
values never enter the sandbox: the server compares. The helpers the snippets see:

* ``read(path)``: a file's text (never through a link; at most 1 MiB);
* ``exists(path)``, ``isdir(path)``, ``mode(path)`` (permission bits), ``listdir(path)``;
* ``sh(command, stdin="", timeout=10)``: ``[exit_code, stdout]`` of ``/bin/bash --noprofile
  --norc -c command`` in the workspace, with a clean environment (``PATH=/usr/bin:/bin`` and
  :data:`openenv.sandbox.VERIFIER_ENV`), or ``"timeout"``. Its processes run in a Landlock
  domain of their own, nested in the verifier's, so they cannot signal the verifier; whatever
  they leave running is killed when ``sh`` returns.

Every instance's ``solution`` (a shell script) passes all its checks and its untouched workspace
passes none (``tests/test_terminal_env.py`` runs both for every task on several seeds); its
``answer`` is the literal files a solved workspace holds (what a policy that memorised the
episode would write: ``tests/test_grading_attacks.py`` writes one seed's answer on another).
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import random
import secrets
import shlex
import tarfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from openenv.runtime.tasks import TaskSet as BaseTaskSet
from openenv.sandbox import VERIFIER_ENV

__all__ = ["FIRST_FAMILIES", "TIERS", "VERIFIER", "Check", "Task", "TaskFamily", "TaskSet"]

#: The difficulty tiers, easiest first: ``easy`` (one command or two: a count, a chmod, a
#: skeleton), ``medium`` (a pipeline or a short script over several files, an archive, a git
#: query), ``hard`` (several steps that depend on each other: joins, a service with a pid file,
#: jobs under a time limit, a repaired configuration, a git history to search).
TIERS = ("easy", "medium", "hard")


@dataclasses.dataclass(frozen=True)
class Check:
    """One verified property: ``code`` sets ``result``; it passes when ``result == expected``."""

    name: str
    code: str
    expected: Any


@dataclasses.dataclass(frozen=True)
class Task:
    """A terminal task (one instance): ``files`` (path -> text or bytes) and ``modes`` (path ->
    permission bits) make the starting workspace; ``checks`` verify the end state; ``solution``
    is a shell script that solves it (used by the tests and the grading probes, never shown to
    the agent); ``answer`` and ``answer_modes`` are the files a solved workspace holds that the
    starting one does not (or holds otherwise): the literal answer of this instance; ``tier``
    is its difficulty (one of :data:`TIERS`; a family's instances carry the family's)."""

    id: str
    prompt: str
    files: Mapping[str, str | bytes]
    checks: tuple[Check, ...]
    solution: str
    modes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    dirs: tuple[str, ...] = ()
    split: str = "train"
    answer: Mapping[str, str | bytes] = dataclasses.field(default_factory=dict)
    answer_modes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    tier: str = "easy"

    def statement(self) -> str:
        listing = ", ".join(sorted(self.files)) or "(empty)"
        return f"{self.prompt}\n\nThe workspace (/workspace, your starting directory) holds: {listing}."

    def instance(self, seed: int | None = None) -> Task:
        """A fixed task is its own only instance, whatever the seed."""
        return self

    @property
    def varies(self) -> bool:
        """False: a fixed task's contents are the same on every seed."""
        return False


@dataclasses.dataclass(frozen=True)
class TaskFamily:
    """A task whose contents vary with the seed: ``generate(rng)`` returns one instance (a
    :class:`Task`; its id and split are the family's), with everything it holds drawn from
    ``rng`` and the checks' expected values computed from what was drawn."""

    id: str
    generate: Callable[[random.Random], Task]
    split: str = "train"
    tier: str = "easy"

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"{self.id}: unknown tier {self.tier!r}; tiers: {', '.join(TIERS)}")

    def instance(self, seed: int | None = None) -> Task:
        """The instance of ``seed``: the same on every machine (the RNG is seeded with the
        family's id and the seed); a random one without a seed."""
        rng = random.Random(f"terminal_env/{self.id}/{seed}" if seed is not None else secrets.randbits(128))
        return dataclasses.replace(self.generate(rng), id=self.id, split=self.split, tier=self.tier)

    @property
    def varies(self) -> bool:
        """True: the contents and expected values depend on the seed."""
        return True


class TaskSet(BaseTaskSet[Task | TaskFamily]):
    """Tasks (fixed :class:`Task` or :class:`TaskFamily`) with unique ids, in a stable order
    (:class:`openenv.TaskSet`), with their tiers."""

    @property
    def tiers(self) -> tuple[str, ...]:
        """The tiers of these tasks, easiest first."""
        present = {t.tier for t in self._tasks}
        return tuple(t for t in TIERS if t in present)

    def sample(self, seed: int | None, split: str | None = None, tier: str | None = None) -> Task | TaskFamily:
        """The task (family) of ``seed`` in ``split`` and ``tier`` (any, when None): the same on
        every machine; a random one without a seed. Its instance is ``.instance(seed)``."""
        if split is not None and split not in self.splits:
            raise ValueError(f"unknown split {split!r}; splits: {', '.join(self.splits)}")
        if tier is not None and tier not in self.tiers:
            raise ValueError(f"unknown tier {tier!r}; tiers: {', '.join(self.tiers)}")
        pool = [t for t in self._tasks if (split is None or t.split == split) and (tier is None or t.tier == tier)]
        return self._choose(seed, pool, split=split, tier=tier)


#: The verifier: loaded as a module in a fresh call (the workspace off sys.path before any
#: import, so a module planted there is never imported), then ``check(code)`` per check, in
#: lock step (openenv.sandbox's function calls: each answer tagged with a nonce). The programs
#: a check runs (``sh``) get a Landlock domain of their own (no signal reaches the verifier)
#: and a clean environment; whatever they leave running is killed before the next check.
_VERIFIER = r"""
import sys
sys.path[:] = [p for p in sys.path if p and not p.startswith(("/workspace", "."))]
import os, signal, stat, subprocess

sys.path.insert(0, "/.openenv")  # the sandbox's own Landlock helpers (read-only, not the agent's)
try:
    import _confine
except ImportError:
    _confine = None
finally:
    del sys.path[0]
    sys.modules.pop("_confine", None)

W = "/workspace"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", **__VERIFIER_ENV__}
WRITABLE = ["/workspace", "/tmp", "/dev/shm", "/dev/null"]


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


def _confined():
    # In the child, before exec: a Landlock domain nested in the verifier's. Signals are scoped
    # to a domain and those nested in it (Landlock ABI 6+), so nothing the child runs can kill,
    # stop or otherwise signal the verifier; the verdict still counts only if the verifier ran
    # to completion (the server checks), which covers kernels without signal scoping.
    if _confine is not None:
        _confine.landlock(["/"], WRITABLE)


def _reap():
    # Every process the command left behind (backgrounded, in a session of its own): kill(-1)
    # from here reaches this call's processes but PID 1 (the supervisor) and the verifier.
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass


def sh(command, stdin="", timeout=10):
    try:
        r = subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", command],
            cwd=W, env=ENV, input=stdin.encode(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            timeout=timeout, preexec_fn=_confined,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        _reap()
    return [r.returncode, r.stdout.decode("utf-8", "replace")[:65536]]


HELPERS = {"read": read, "exists": exists, "isdir": isdir, "mode": mode, "listdir": listdir, "sh": sh}


def check(code):
    ns = dict(HELPERS)
    exec(compile(code, "<check>", "exec"), ns)
    return ns.get("result")
"""
VERIFIER = _VERIFIER.replace("__VERIFIER_ENV__", repr(dict(VERIFIER_ENV)))


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


def _lines(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


# -- drawing names and numbers ------------------------------------------------------------------

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _word(rng: random.Random, syllables: int = 2) -> str:
    """A pronounceable lower-case word (14 * 5 = 70 syllables: 4,900 words of two)."""
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))


def _words(rng: random.Random, k: int, syllables: int = 2) -> list[str]:
    """``k`` distinct words, in the order drawn."""
    out: list[str] = []
    while len(out) < k:
        w = _word(rng, syllables)
        if w not in out:
            out.append(w)
    return out


def _cents(c: int) -> str:
    return f"{c // 100}.{c % 100:02d}"


# -- the families -------------------------------------------------------------------------------


def _hello_file(rng: random.Random) -> Task:
    name = f"{rng.choice(['greeting', 'hello', 'welcome', 'message', 'note'])}_{_word(rng)}.txt"
    line = f"{rng.choice(['hello', 'hi', 'greetings', 'welcome', 'good day'])}, {_word(rng, 3)}"
    return Task(
        "hello_file",
        f"Create the file {name} in the workspace holding exactly one line: {line}",
        {"README": "Start here.\n"},
        (Check(f"{name} holds the line", f"result = read({name!r})", line + "\n"),),
        f"printf '%s\\n' {shlex.quote(line)} > {name}",
        answer={name: line + "\n"},
    )


_LEVELS = ("INFO", "WARN", "DEBUG")
_MESSAGES = ("disk full", "timeout talking to db", "retrying", "started", "cache miss", "user login", "job done")


def _log_line(rng: random.Random, day: int, k: int, error: bool) -> str:
    stamp = f"2026-01-{day:02d} {k // 3600 % 24:02d}:{k // 60 % 60:02d}:{k % 60:02d}"
    if error and rng.random() < 0.1:  # contains the text ERROR, though not as the level: it counts
        return f"{stamp} INFO ERRORS_SEEN={rng.randint(0, 9)} (a counter; the line contains ERROR)"
    if error:
        return f"{stamp} ERROR {rng.choice(_MESSAGES)}"
    if rng.random() < 0.1:  # lower case: not the text ERROR
        return f"{stamp} WARN an error was retried"
    return f"{stamp} {rng.choice(_LEVELS)} {rng.choice(_MESSAGES)}"


def _count_errors(rng: random.Random) -> Task:
    # The count is drawn first (uniform over 240 values: a guessed count is right once in 240),
    # then spread over the files among lines that do not count.
    count = rng.randint(5, 244)
    n_top = rng.randint(3, 5)
    names = _words(rng, n_top + rng.randint(1, 2))
    cuts = sorted(rng.randint(0, count) for _ in range(n_top - 1))
    shares = [b - a for a, b in zip([0, *cuts], [*cuts, count], strict=True)]
    files: dict[str, str] = {}
    for i, name in enumerate(names):
        errors = shares[i] if i < n_top else rng.randint(1, 20)
        kinds = [True] * errors + [False] * rng.randint(3, 40)
        rng.shuffle(kinds)
        lines = [_log_line(rng, i + 1, k * 37 + 36000, e) for k, e in enumerate(kinds)]
        files[f"logs/{name}.log" if i < n_top else f"logs/old/{name}.log"] = _lines(lines)
    files["notes.txt"] = "ERROR lines outside logs/ do not count.\nERROR\n"
    # The answer's file is named from the seed too: a count alone would be another seed's
    # answer once in 240 draws; with the name, two seeds never share an answer.
    out = f"errors_{_word(rng)}.txt"
    return Task(
        "count_errors",
        "Count the lines containing the text ERROR in the files logs/*.log (the .log files directly in logs/, "
        f"not in its subdirectories) and write that number alone to {out}.",
        files,
        (Check(f"{out} holds the count", f"result = [{out!r}, read({out!r}).strip()]", [out, str(count)]),),
        f"cat logs/*.log | grep -c ERROR > {out}",
        answer={out: f"{count}\n"},
    )


def _top_scores(rng: random.Random) -> Task:
    n = rng.randint(6, 12)
    names = _words(rng, n)
    scores = rng.sample(range(10, 100), n)
    rows = list(zip(names, scores, strict=True))
    top3 = [name for name, _ in sorted(rows, key=lambda r: -r[1])[:3]]
    return Task(
        "top_scores",
        "scores.csv has a header line and then name,score rows. Write the names of the three highest scores "
        "to top3.txt, one per line, highest first.",
        {"scores.csv": "name,score\n" + _lines(f"{name},{score}" for name, score in rows)},
        (Check("top3.txt lists the names", "result = read('top3.txt').split()", top3),),
        "tail -n +2 scores.csv | sort -t, -k2 -nr | head -3 | cut -d, -f1 > top3.txt",
        answer={"top3.txt": _lines(top3)},
    )


def _make_executable(rng: random.Random) -> Task:
    path = f"{rng.choice(['tools', 'bin', 'scripts'])}/{_word(rng)}.sh"
    printed = f"report {_word(rng, 3)} {rng.randint(100, 999)}"
    script = f"#!/bin/sh\necho {printed}\n"
    return Task(
        "make_executable",
        f"{path} is a script that cannot be run yet. Make it executable so that ./{path} runs "
        "(do not change what it prints).",
        {path: script},
        (
            Check(f"{path} is executable", f"result = bool(mode({path!r}) & 0o100)", True),
            Check(f"./{path} runs", f"result = sh({'./' + path!r})", [0, printed + "\n"]),
        ),
        f"chmod +x {path}",
        answer={path: script},
        answer_modes={path: 0o755},
    )


def _find_largest(rng: random.Random) -> Task:
    n = rng.randint(6, 12)
    dirs = ["data"] + [f"data/{w}" for w in _words(rng, 3)]
    dirs += [f"{rng.choice(dirs[1:])}/{w}" for w in _words(rng, 2)]
    sizes = rng.sample(range(10, 4000), n)
    files = {}
    for size, name in zip(sizes, _words(rng, n), strict=True):
        path = f"{rng.choice(dirs)}/{name}.{rng.choice(['txt', 'bin', 'dat', 'log'])}"
        files[path] = rng.choice("vwxyz") * size
    largest = max(files, key=lambda p: len(files[p]))
    return Task(
        "find_largest",
        "Find the largest file (in bytes) anywhere under data/ and write its path relative to the workspace "
        "(like data/a/b.bin) alone to largest.txt.",
        files,
        (Check("largest.txt names the file", "result = read('largest.txt').strip()", largest),),
        "find data -type f -printf '%s %p\\n' | sort -nr | head -1 | cut -d' ' -f2 > largest.txt",
        answer={"largest.txt": largest + "\n"},
    )


def _replace_host(rng: random.Random) -> Task:
    host = f"{rng.choice(['db', 'pg', 'sql', 'store'])}-{_word(rng)}.internal"
    before: dict[str, str] = {}
    for name in _words(rng, rng.randint(2, 4)):
        lines = [f"[{rng.choice(['db', 'database', 'primary'])}]", f"host{rng.choice(['=', ' = '])}localhost"]
        lines.append(f"port = {rng.randint(1024, 65535)}")
        if rng.random() < 0.7:
            lines += [f"[{rng.choice(['cache', 'queue'])}]", f"host = localhost:{rng.randint(1024, 65535)}"]
        lines.append(f"name = {name}")
        before[f"{name}.ini"] = _lines(lines)
    before["README.txt"] = f"For local development the host was localhost (see {rng.choice(list(before))}).\n"
    after = {p: text.replace("localhost", host) if p.endswith(".ini") else text for p, text in before.items()}
    return Task(
        "replace_host",
        f"The services in config/ now use the database host {host}. Replace every occurrence of localhost "
        f"with {host} in the .ini files under config/; leave every other file as it is.",
        {f"config/{p}": text for p, text in before.items()},
        (Check("config/ after the change", "result = {p: read('config/' + p) for p in listdir('config')}", after),),
        f"sed -i 's/localhost/{host}/g' config/*.ini",
        answer={f"config/{p}": text for p, text in after.items() if p.endswith(".ini")},
    )


def _extract_sum(rng: random.Random) -> Task:
    numbers = [rng.randint(1, 5000) for _ in range(rng.randint(5, 15))]
    about = f"numbers of {_word(rng, 3)}\n"
    inner = {"numbers.txt": _lines(str(n) for n in numbers), "info/ABOUT": about}
    return Task(
        "extract_sum",
        "Extract the archive bundle.tar.gz into a new directory unpacked/ (so that unpacked/numbers.txt exists), "
        "then write the sum of the numbers in unpacked/numbers.txt (one per line) alone to sum.txt.",
        {"bundle.tar.gz": _tar_gz(inner)},
        (
            Check(
                "unpacked/ holds the archive",
                "result = [listdir('unpacked'), read('unpacked/info/ABOUT')]",
                [["info", "numbers.txt"], about],
            ),
            Check("sum.txt holds the sum", "result = read('sum.txt').strip()", str(sum(numbers))),
        ),
        "mkdir -p unpacked && tar -xzf bundle.tar.gz -C unpacked && "
        "awk '{s += $1} END {print s}' unpacked/numbers.txt > sum.txt",
        answer={**{f"unpacked/{p}": text for p, text in inner.items()}, "sum.txt": f"{sum(numbers)}\n"},
    )


def _word_freq(rng: random.Random) -> Task:
    words = _words(rng, rng.randint(7, 11))
    top = sorted(rng.sample(range(3, 16), 4), reverse=True)  # distinct: no tie among the first three
    counts = dict(zip(words[:4], top, strict=True))
    counts.update({w: rng.randint(1, top[3]) for w in words[4:]})
    tokens = [w for w, c in counts.items() for _ in range(c)]
    rng.shuffle(tokens)
    out, line = [], []
    for w in tokens:
        line.append(rng.choice([w, w, w.capitalize(), w.upper()]) + rng.choice(["", "", "", ",", ";", ".", "!"]))
        if len(line) >= rng.randint(6, 14):
            out.append(" ".join(line))
            line = []
    out.append(" ".join(line))
    expected = [f"{counts[w]} {w}" for w in words[:3]]
    return Task(
        "word_freq",
        "In text.txt, words are runs of letters (A-Z, a-z), compared ignoring case. Write the three most "
        "frequent words to freq.txt, one per line as `COUNT WORD` (the word lower-cased), most frequent first.",
        {"text.txt": _lines(out)},
        (Check("freq.txt", "result = read('freq.txt').split('\\n')[:3]", expected),),
        "tr -cs 'A-Za-z' '\\n' < text.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c | sort -rn | head -3 "
        "| awk '{print $1, $2}' > freq.txt",
        answer={"freq.txt": _lines(expected)},
    )


_SUBDIRS = ("src", "tests", "docs", "lib", "bin", "examples", "scripts", "assets", "config", "data")


def _project_layout(rng: random.Random) -> Task:
    name = _word(rng, 3)
    subs = sorted(rng.sample(_SUBDIRS, 3))
    listed = f"{subs[0]}, {subs[1]} and {subs[2]}"
    return Task(
        "project_layout",
        f"Create a directory {name}/ holding the directories {listed} (each with an empty file named .keep) and "
        f"a file README.md whose first line is `# {name}`.",
        {"TODO": "make the project skeleton\n"},
        (
            Check(
                "the layout",
                f"result = [listdir({name!r}), [listdir({name!r} + '/' + d) for d in {subs!r}]]",
                [sorted(["README.md", *subs]), [[".keep"]] * 3],
            ),
            Check("README.md", f"result = read({name + '/README.md'!r}).splitlines()[:1]", [f"# {name}"]),
        ),
        f"mkdir -p {' '.join(f'{name}/{d}' for d in subs)} && touch {' '.join(f'{name}/{d}/.keep' for d in subs)} "
        f"&& echo '# {name}' > {name}/README.md",
        answer={f"{name}/README.md": f"# {name}\n", **{f"{name}/{d}/.keep": "" for d in subs}},
    )


def _fizz(n: int, a: int, b: int, wa: str, wb: str) -> str:
    out = []
    for i in range(1, n + 1):
        out.append(wa + wb if i % a == 0 and i % b == 0 else wa if i % a == 0 else wb if i % b == 0 else str(i))
    return _lines(out)


def _fizzbuzz_script(rng: random.Random) -> Task:
    a = rng.randint(2, 5)
    b = rng.choice([x for x in range(a + 1, 10) if x % a])
    wa, wb = (w.capitalize() for w in _words(rng, 2))
    script = f"{_word(rng)}.sh"
    hidden = rng.sample(range(1, 25), 2) + rng.sample(range(25, 80), 2)  # never shown: only the checks run them
    body = (
        f"#!/bin/bash\nfor ((i = 1; i <= $1; i++)); do\n"
        f"  if ((i % {a} == 0 && i % {b} == 0)); then echo {wa}{wb}; elif ((i % {a} == 0)); then echo {wa};\n"
        f"  elif ((i % {b} == 0)); then echo {wb}; else echo $i; fi\ndone\n"
    )
    return Task(
        "fizzbuzz_script",
        f"Write an executable shell script {script} that takes a number N as its argument and prints, for each "
        f"number from 1 to N, one line: {wa}{wb} for multiples of both {a} and {b}, {wa} for the other multiples "
        f"of {a}, {wb} for the other multiples of {b}, else the number itself. It is run as ./{script} N.",
        {"README": f"{script} goes here\n"},
        tuple(
            Check(f"./{script} on hidden case {i + 1}", f"result = sh('./{script} {n}')", [0, _fizz(n, a, b, wa, wb)])
            for i, n in enumerate(hidden)
        ),
        f"cat > {script} <<'EOF'\n{body}EOF\nchmod +x {script}",
        answer={script: body},
        answer_modes={script: 0o755},
    )


_TLDS = ("com", "org", "net", "io")


def _dedupe_emails(rng: random.Random) -> Task:
    domains = [f"{w}.{rng.choice(_TLDS)}" for w in _words(rng, rng.randint(2, 3))]
    addresses = sorted({f"{w}@{rng.choice(domains)}" for w in _words(rng, rng.randint(4, 9))})
    lines = []
    for addr in addresses:
        for _ in range(rng.choice([1, 1, 2, 3])):
            mangled = "".join(c.upper() if rng.random() < 0.3 else c for c in addr)
            lines.append(" " * rng.choice([0, 0, 1, 2]) + mangled + " " * rng.choice([0, 0, 1, 3]))
    if len(lines) == len(addresses):  # at least one duplicate
        lines.append(addresses[0].upper())
    rng.shuffle(lines)
    return Task(
        "dedupe_emails",
        "emails.txt has one address per line, with duplicates that differ only in case and surrounding spaces. "
        "Write unique_emails.txt: each distinct address once, lower-cased and trimmed, sorted.",
        {"emails.txt": _lines(lines)},
        (Check("unique_emails.txt", "result = read('unique_emails.txt').split()", addresses),),
        "tr 'A-Z' 'a-z' < emails.txt | sed 's/^ *//; s/ *$//' | sort -u > unique_emails.txt",
        answer={"unique_emails.txt": _lines(addresses)},
    )


def _csv_column(rng: random.Random) -> Task:
    rows = [(w, rng.randint(1, 500), rng.randint(5, 5000)) for w in _words(rng, rng.randint(3, 8))]
    total = _cents(sum(q * c for _, q, c in rows))  # exact, in cents: the expected text has no rounding error
    return Task(
        "csv_column",
        "inventory.csv has the header item,qty,price. Write total.txt holding the total value of the inventory "
        "(the sum of qty * price over the rows), with two decimals (like 12.50).",
        {"inventory.csv": "item,qty,price\n" + _lines(f"{w},{q},{_cents(c)}" for w, q, c in rows)},
        (Check("total.txt", "result = read('total.txt').strip()", total),),
        "awk -F, 'NR > 1 {s += $2 * $3} END {printf \"%.2f\\n\", s}' inventory.csv > total.txt",
        answer={"total.txt": total + "\n"},
    )


#: The first families (every fourth in the ``test`` split); ids, splits and tiers are stable
#: (:data:`terminal_env.families.TASKS` holds them with the multi-step ones).
FIRST_FAMILIES: list[TaskFamily] = [
    TaskFamily("hello_file", _hello_file, "train", "easy"),
    TaskFamily("count_errors", _count_errors, "train", "easy"),
    TaskFamily("top_scores", _top_scores, "train", "easy"),
    TaskFamily("make_executable", _make_executable, "test", "easy"),
    TaskFamily("find_largest", _find_largest, "train", "easy"),
    TaskFamily("replace_host", _replace_host, "train", "easy"),
    TaskFamily("extract_sum", _extract_sum, "train", "medium"),
    TaskFamily("word_freq", _word_freq, "test", "medium"),
    TaskFamily("project_layout", _project_layout, "train", "easy"),
    TaskFamily("fizzbuzz_script", _fizzbuzz_script, "train", "medium"),
    TaskFamily("dedupe_emails", _dedupe_emails, "train", "easy"),
    TaskFamily("csv_column", _csv_column, "test", "easy"),
]
