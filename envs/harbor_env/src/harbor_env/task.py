"""Harbor tasks: reading a task directory, and what its ``environment/Dockerfile`` asks for.

A Harbor task (the format of the ``harbor`` package, Terminal-Bench 2) is a directory::

    my-task/
      task.toml            [agent] timeout_sec, [verifier] timeout_sec and env, [environment] ...
      instruction.md       what the agent is asked to do
      environment/         Dockerfile (+ the files it COPYs): the agent's starting state
      tests/test.sh        the verifier: writes /logs/verifier/reward.txt (a number) or reward.json
      solution/solve.sh    a reference solution (Harbor's "oracle")

:func:`load_task` reads one, :func:`load_tasks` a task directory, a directory of tasks (one split,
``train``) or a directory of such directories (each one a split, named after it).

The Dockerfile is not built into an image here: it is *interpreted* into the steps that make the
agent's starting state in the sandbox (:class:`Build`): ``WORKDIR`` (the workspace, seen at that
path), ``COPY``/``ADD`` of the task's own files below it, ``ENV``, ``ARG`` and ``RUN`` commands
(run in the sandbox at each reset). Package installs (``apt-get install``, ``pip install``) are
not run (there is no network): each package must already be on this environment's system, else
loading the task fails with :class:`TaskError` naming the line and what is missing. So does any
instruction that cannot be honoured here (another stage, a file put outside the workspace, a URL).

Harbor itself (``pip install harbor``) needs Python >= 3.12, and this environment runs on the
images' Python 3.11, so its models are not imported: ``task.toml`` is read with :mod:`tomllib`
into the fields Harbor's ``TaskConfig`` defines (same names, same defaults), and the verifier
contract is Harbor's ``Verifier.verify`` (tests in ``/tests``, ``bash /tests/test.sh`` with its
output in ``/logs/verifier/test-stdout.txt``, ``reward.json`` preferred over ``reward.txt``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from harbor_env.compose import BASE_PYTHON, interpolate, parse_compose
from harbor_env.engine import image_id
from harbor_env.errors import TaskError
from openenv.runtime.tasks import TaskSet as BaseTaskSet

__all__ = ["Build", "HarborTask", "TaskError", "TaskSet", "load_task", "load_tasks", "tar_dir"]

#: Harbor's defaults (harbor.models.task.config): agent and verifier timeouts in seconds.
AGENT_TIMEOUT_S = 600.0
VERIFIER_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = "/app"
#: Paths a task may not use as its working directory: the sandbox's own and the system's.
_RESERVED = ("/", "/tmp", "/workspace", "/box", "/dev", "/proc", "/etc", "/.openenv", "/tests", "/logs",
             "/solution", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/sys", "/boot")  # fmt: skip
#: Instructions with no effect on the agent's starting state here.
_IGNORED = {"EXPOSE", "LABEL", "CMD", "ENTRYPOINT", "HEALTHCHECK", "STOPSIGNAL", "SHELL", "VOLUME", "MAINTAINER",
            "USER", "ONBUILD"}  # fmt: skip
_APT = re.compile(r"^(?:DEBIAN_FRONTEND=\S+\s+)?(?:apt-get|apt)\s+(.*)$", re.S)
_PIP = re.compile(r"^(?:python3?\s+-m\s+)?(?:pip3?|uv\s+pip)\s+install\b(.*)$", re.S)


@dataclasses.dataclass(frozen=True)
class Build:
    """What the task's Dockerfile does to the agent's starting state, in order.

    ``steps`` are ``("copy", dest, tar bytes)``, ``("mkdir", path)`` and ``("run", command, cwd,
    env)``; ``workdir`` is where the workspace is seen (and the agent's commands start)."""

    workdir: str
    env: Mapping[str, str]
    steps: tuple[tuple[Any, ...], ...]
    base: str
    notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class HarborTask:
    """One Harbor task (see the module's text)."""

    id: str
    split: str
    path: Path
    instruction: str
    config: Mapping[str, Any]
    build: Build
    tests_tar: bytes = dataclasses.field(repr=False)
    solution_tar: bytes | None = dataclasses.field(repr=False, default=None)
    #: ``environment/docker-compose.yaml``'s sidecars (container mode; a
    #: :class:`harbor_env.compose.ComposeSpec`), None when the task has none.
    compose: Any = None

    @property
    def agent_timeout_s(self) -> float:
        return float(self.config.get("agent", {}).get("timeout_sec") or AGENT_TIMEOUT_S)

    @property
    def verifier_timeout_s(self) -> float:
        return float(self.config.get("verifier", {}).get("timeout_sec") or VERIFIER_TIMEOUT_S)

    @property
    def verifier_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.config.get("verifier", {}).get("env") or {}).items()}

    @property
    def solution_env(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in (self.config.get("solution", {}).get("env") or {}).items()}

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.config.get("metadata") or {})


def tar_dir(root: Path) -> bytes:
    """A directory's files as a tar (paths relative to it; modes kept, owners dropped)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if "__pycache__" in rel.split("/"):
                continue
            info = tar.gettarinfo(str(path), rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_symlink() or path.is_dir():
                tar.addfile(info)
            elif path.is_file():
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


# -- the Dockerfile


def _instructions(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line, INSTRUCTION, arguments)`` with continuations joined and comments dropped."""
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        yield start, word.upper(), rest.strip()
        buf = ""
    if buf.strip():
        word, _, rest = buf.strip().partition(" ")
        yield start, word.upper(), rest.strip()


def _words(args: str) -> list[str]:
    """An instruction's arguments: the JSON (exec) form or shell words."""
    if args.startswith("["):
        try:
            value = json.loads(args)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
        except ValueError:
            pass
    return shlex.split(args)


def _subst(text: str, vars: Mapping[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return vars.get(name, "")

    return re.sub(r"\$\{(\w+)(?::-[^}]*)?\}|\$(\w+)", one, text)


def _split_commands(cmd: str) -> list[str]:
    """A shell command line split at top-level ``&&`` and ``;`` (quotes respected)."""
    out, cur, quote, i = [], "", "", 0
    while i < len(cmd):
        c = cmd[i]
        if quote:
            cur += c
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"' and i + 1 < len(cmd):
                cur += cmd[i + 1]
                i += 1
        elif c in "'\"":
            quote = c
            cur += c
        elif cmd.startswith("&&", i) or c == ";":
            out.append(cur.strip())
            cur = ""
            i += 2 if c == "&" else 1
            continue
        else:
            cur += c
        i += 1
    out.append(cur.strip())
    return [c for c in out if c]


@functools.lru_cache(maxsize=512)
def _debian_installed(package: str) -> bool:
    name = package.split("=", 1)[0].split(":", 1)[0]
    try:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return shutil.which(name) is not None
    return r.returncode == 0 and "install ok installed" in r.stdout


def _check_apt(args: str, where: str) -> None:
    words = shlex.split(args)
    if not words:
        return
    verb = words[0]
    if verb in ("update", "clean", "autoclean", "autoremove", "upgrade", "dist-upgrade"):
        return
    if verb != "install":
        raise TaskError(f"{where}: `apt-get {verb}` cannot run here (no network, no root)")
    packages = [w for w in words[1:] if not w.startswith("-")]
    missing = [p for p in packages if not _debian_installed(p)]
    if missing:
        raise TaskError(
            f"{where}: the Debian packages {', '.join(missing)} are not installed on this environment's system "
            "(tasks are built offline from the project's base image: add them to the harbor_env image, "
            "envs/harbor_env/debs.txt and image.Dockerfile, or drop them from the task)"
        )


def _check_pip(args: str, where: str) -> None:
    packages = [w for w in shlex.split(args) if not w.startswith("-")]
    if packages:
        raise TaskError(
            f"{where}: `pip install {' '.join(packages)}` cannot run here: the sandbox has no network and its "
            "Python has the standard library only (write the task's code and tests with the standard library)"
        )


def _resolve(path: str, workdir: str) -> str:
    p = PurePosixPath(path if path.startswith("/") else f"{workdir}/{path}")
    return os.path.normpath(str(p))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def parse_dockerfile(env_dir: Path, where: str) -> Build:
    """Interpret ``env_dir/Dockerfile`` (see the module's text); :class:`TaskError` on what
    cannot be honoured here."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        if (env_dir / "docker-compose.yaml").exists() or (env_dir / "docker-compose.yml").exists():
            raise TaskError(f"{where}: environment/docker-compose.yaml (several services) is not supported here")
        return Build(DEFAULT_WORKDIR, {}, (), "", ("no environment/Dockerfile: an empty /app",))
    base = ""
    root: str | None = None
    workdir = DEFAULT_WORKDIR
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    steps: list[tuple[Any, ...]] = []
    notes: list[str] = []
    for line, word, rest in _instructions(dockerfile.read_text(encoding="utf-8")):
        at = f"{where}: environment/Dockerfile line {line} ({word})"
        vars = {**args, **env}
        if word == "FROM":
            if base:
                raise TaskError(f"{at}: a second FROM (a multi-stage build) is not supported here")
            base = rest.split()[0] if rest else ""
            continue
        if not base and word != "ARG":
            raise TaskError(f"{at}: the Dockerfile must start with FROM")
        if word == "ARG":
            name, eq, value = rest.partition("=")
            args[name.strip()] = _subst(value.strip().strip('"'), vars) if eq else args.get(name.strip(), "")
        elif word == "ENV":
            if "=" in rest.split()[0]:
                for item in shlex.split(rest):
                    k, _, v = item.partition("=")
                    env[k] = _subst(v, vars)
            else:
                k, _, v = rest.partition(" ")
                env[k] = _subst(v.strip(), vars)
        elif word == "WORKDIR":
            path = _resolve(_subst(rest.strip().strip('"'), vars), workdir)
            if root is None:
                if any(path == r or (r != "/" and _inside(path, r)) for r in _RESERVED):
                    raise TaskError(f"{at}: WORKDIR {path} is a system path; use a directory of its own (e.g. /app)")
                root = path
            elif not _inside(path, root):
                raise TaskError(f"{at}: WORKDIR {path} is outside the first WORKDIR {root}, the one that persists here")
            else:
                steps.append(("mkdir", path))
            workdir = path
        elif word in ("COPY", "ADD"):
            words = _words(_subst(rest, vars))
            flags = [w for w in words if w.startswith("--")]
            words = [w for w in words if not w.startswith("--")]
            if any(f.startswith("--from") for f in flags):
                raise TaskError(f"{at}: COPY --from (another stage or image) is not supported here")
            if len(words) < 2:
                raise TaskError(f"{at}: expected sources and a destination")
            *sources, dest = words
            if root is None:
                root = workdir = DEFAULT_WORKDIR
            target = _resolve(dest, workdir)
            if not _inside(target, root):
                raise TaskError(
                    f"{at}: {word} to {target}: only files below the WORKDIR ({root}) exist here (the workspace)"
                )
            for src in sources:
                if re.match(r"^[a-z]+://", src):
                    raise TaskError(f"{at}: {word} of a URL ({src}) needs the network, which tasks do not have here")
                matches = sorted(env_dir.glob(src)) if any(c in src for c in "*?[") else [env_dir / src]
                if not matches or not all(m.exists() for m in matches):
                    raise TaskError(f"{at}: {src} is not in the task's environment/ directory")
                for m in matches:
                    real = m.resolve()
                    if not _inside(str(real), str(env_dir.resolve())):
                        raise TaskError(f"{at}: {src} is outside the task's environment/ directory")
                    if word == "ADD" and m.is_file() and fnmatch.fnmatch(m.name, "*.tar*"):
                        steps.append(("copy", target, m.read_bytes(), True))
                        continue
                    into_dir = dest.endswith("/") or len(sources) > 1 or len(matches) > 1 or m.is_dir()
                    steps.append(("copy", target, _tar_one(m, "" if m.is_dir() else m.name), into_dir))
        elif word == "RUN":
            cmd = rest
            if cmd.startswith("["):
                cmd = shlex.join(_words(cmd))
            if cmd.startswith("--"):
                raise TaskError(f"{at}: RUN flags ({cmd.split()[0]}) are not supported here")
            parts = _split_commands(cmd)
            if not any(_APT.match(p.strip("() ")) or _PIP.match(p.strip("() ")) for p in parts):
                parts = [cmd]  # nothing to take out: the command as written (loops, `;` and all)
            kept = []
            for part in parts:
                plain = part.strip("() ")
                apt, pip = _APT.match(plain), _PIP.match(plain)
                if apt:
                    _check_apt(apt.group(1), at)
                elif pip:
                    _check_pip(pip.group(1), at)
                elif re.match(r"^rm\s+-rf\s+/var/lib/apt/lists", plain):
                    pass
                elif re.search(r"\b(curl|wget)\b", plain):
                    raise TaskError(f"{at}: `{plain[:80]}` needs the network, which tasks do not have here")
                else:
                    kept.append(part)
            if kept and root is None:
                root = workdir = DEFAULT_WORKDIR
            if kept:
                steps.append(("run", " && ".join(kept), workdir, dict(env)))
        elif word in _IGNORED:
            if word == "USER":
                notes.append(f"line {line}: USER ignored (commands run as the sandbox's own user)")
        else:
            raise TaskError(f"{at}: the instruction {word} is not supported here")
    if not base:
        raise TaskError(f"{where}: environment/Dockerfile has no FROM")
    return Build(root or DEFAULT_WORKDIR, env, tuple(steps), base, tuple(notes))


def _tar_one(path: Path, name: str) -> bytes:
    """``path`` as a tar: a directory's contents at the top, or one file named ``name``."""
    if path.is_dir():
        return tar_dir(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tar.gettarinfo(str(path), name)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        with path.open("rb") as f:
            tar.addfile(info, f)
    return buf.getvalue()


# -- tasks


def container_build(env_dir: Path, where: str) -> Build:
    """What container mode (:mod:`harbor_env.container`) needs of the Dockerfile, which it builds
    as it is: the working directory (the last ``WORKDIR``, else ``/``) and the base it names."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise TaskError(f"{where}: environment/Dockerfile is missing (container mode builds it)")
    base, workdir, vars = "", "/", {}
    for _line, word, rest in _instructions(dockerfile.read_text(encoding="utf-8")):
        if word == "FROM" and rest:
            base = rest.split()[0]
            workdir = "/"
        elif word in ("ARG", "ENV") and "=" in rest:
            for item in shlex.split(rest) if word == "ENV" else [rest]:
                k, _, v = item.partition("=")
                vars[k.strip()] = _subst(v.strip().strip('"'), vars)
        elif word == "WORKDIR" and rest:
            workdir = _resolve(_subst(rest.strip().strip('"'), vars), workdir)
    if not base:
        raise TaskError(f"{where}: environment/Dockerfile has no FROM")
    return Build(workdir, {}, (), base)


#: ``uvx -p 3.13`` / ``uv run --python 3.12`` in a verifier (Terminal-Bench 2's preamble).
_UV_PYTHON = re.compile(r"\buv[x]?\b(?:\s+run)?[^\n]*?\s(?:-p|--python)[ =]([0-9]+\.[0-9]+)")


def _needs_interpreter(test_sh: Path, base: str, where: str) -> None:
    """Refuse (naming the interpreter) a verifier that asks uv for a Python other than the harbor
    base's when the task's image is built on that base: uv would download the interpreter from the
    internet, which this machine does not reach (``UV_PYTHON_DOWNLOADS=never``)."""
    text = test_sh.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")  # joined continuations
    for version in dict.fromkeys(_UV_PYTHON.findall(text)):
        if version != BASE_PYTHON and (not base or image_id(base) is None):
            raise TaskError(
                f"{where}: tests/test.sh asks uv for Python {version} (`-p {version}`): FROM {base or '(none)'} is not "
                f"on this engine, the harbor base has Python {BASE_PYTHON}, and uv cannot download a Python "
                "interpreter on this machine"
            )


def load_task(path: str | os.PathLike[str], split: str = "train", *, mode: str = "sandbox") -> HarborTask:
    """One task directory (:class:`TaskError` naming what is wrong or unsupported).

    ``mode``: ``"sandbox"`` (the Dockerfile interpreted into the sandbox, :func:`parse_dockerfile`)
    or ``"container"`` (built and run as Harbor does, :mod:`harbor_env.container`: ``docker_image``
    is honoured; multi-step tasks and docker-compose sidecars are refused, naming the field)."""
    if mode not in ("sandbox", "container"):
        raise ValueError(f"mode must be 'sandbox' or 'container', not {mode!r}")
    root = Path(path).resolve()
    where = f"task {root.name} ({root})"
    cfg_path = root / "task.toml"
    if not cfg_path.is_file():
        raise TaskError(f"{where}: no task.toml")
    try:
        config = tomllib.loads(cfg_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"{where}: task.toml: {e}") from None
    if config.get("steps"):
        raise TaskError(
            f"{where}: task.toml [[steps]]: multi-step tasks are not supported here (each step's instruction, tests "
            "and solution would need an episode of their own)"
        )
    environment = config.get("environment") or {}
    compose = [n for n in ("docker-compose.yaml", "docker-compose.yml") if (root / "environment" / n).exists()]
    compose_spec = None
    if mode == "container":
        # Harbor resolves ${VAR} in [environment.env] from the host, as compose does.
        for k, v in list((environment.get("env") or {}).items()):
            environment.setdefault("env", {})[k] = interpolate(str(v), f"{where}: task.toml [environment.env] {k}")
        compose_spec = parse_compose(root / "environment", where)
        servers = environment.get("mcp_servers") or []
        sidecars = {s.name for s in compose_spec.services} if compose_spec else set()
        for server in servers:
            from urllib.parse import urlsplit

            url = str(server.get("url") or "")
            host = urlsplit(url).hostname
            if server.get("transport", "streamable-http") not in ("streamable-http", "sse") or host not in sidecars:
                raise TaskError(
                    f"{where}: task.toml [[environment.mcp_servers]] {server.get('name')!r}: only an HTTP server "
                    f"run by a service of environment/docker-compose.yaml is supported here (got {url or 'no url'!r}, "
                    f"transport {server.get('transport')!r})"
                )
    elif compose:
        raise TaskError(
            f"{where}: environment/{compose[0]}: sidecar services (docker compose) run in container mode only "
            "(HARBOR_MODE=container)"
        )
    if mode == "sandbox" and environment.get("docker_image"):
        raise TaskError(
            f"{where}: [environment] docker_image = {environment['docker_image']!r}: prebuilt images cannot be "
            "pulled here; describe the environment with environment/Dockerfile"
        )
    if str(environment.get("os", "linux")).lower() != "linux":
        raise TaskError(f"{where}: [environment] os = {environment['os']!r}: only linux tasks run here")
    for section, key in (("agent", "timeout_sec"), ("verifier", "timeout_sec")):
        value = (config.get(section) or {}).get(key)
        if value is not None and (not isinstance(value, (int, float)) or value <= 0):
            raise TaskError(f"{where}: task.toml [{section}] {key} must be a positive number, got {value!r}")
    instruction_path = root / "instruction.md"
    if not instruction_path.is_file():
        raise TaskError(f"{where}: no instruction.md")
    tests = root / "tests"
    if not (tests / "test.sh").is_file():
        raise TaskError(f"{where}: no tests/test.sh (the verifier)")
    if mode == "container":
        build = (
            container_build(root / "environment", where)
            if not environment.get("docker_image") or (root / "environment" / "Dockerfile").is_file()
            else Build(str(environment.get("workdir") or "/"), {}, (), str(environment["docker_image"]))
        )
    else:
        build = parse_dockerfile(root / "environment", where)
    if mode == "container":
        _needs_interpreter(tests / "test.sh", build.base, where)
    # [environment] workdir (Harbor >= 1.3) overrides the Dockerfile's.
    if environment.get("workdir"):
        build = dataclasses.replace(build, workdir=os.path.normpath(str(environment["workdir"])))
    env = {str(k): str(v) for k, v in (environment.get("env") or {}).items()}
    if env and mode == "sandbox":
        build = dataclasses.replace(build, env={**build.env, **env})
    solution = root / "solution"
    return HarborTask(
        id=root.name,
        split=split,
        path=root,
        instruction=instruction_path.read_text(encoding="utf-8").strip(),
        config=config,
        build=build,
        tests_tar=tar_dir(tests),
        solution_tar=tar_dir(solution) if (solution / "solve.sh").is_file() else None,
        compose=compose_spec,
    )


class TaskSet(BaseTaskSet[HarborTask]):
    """Tasks by id, with their splits (``load_tasks``; :class:`openenv.TaskSet`). Refusals are
    :class:`TaskError`, a duplicate naming both task directories."""

    error = TaskError

    @classmethod
    def empty(cls, sources: Sequence[str] = ()) -> TaskSet:
        """A set with no task (what ``harbor-env check`` has when every task was refused)."""
        return cls((), sources, allow_empty=True)

    def duplicate(self, first: HarborTask, second: HarborTask) -> str:
        return f"two tasks are named {second.id!r}: {first.path} and {second.path}"

    @property
    def tasks(self) -> list[HarborTask]:
        """The tasks, in order."""
        return list(self._tasks)

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits, sorted by name (the first is the server's default split)."""
        return tuple(sorted({t.split for t in self._tasks}))


def _registry_paths(root: Path) -> list[Path] | None:
    """The task directories a Harbor registry-style ``registry.json`` in ``root`` lists (every
    object with a ``path``, relative to ``root`` or its parent), or None without one."""
    reg = root / "registry.json"
    if not reg.is_file():
        return None
    try:
        data = json.loads(reg.read_text(encoding="utf-8"))
    except ValueError as e:
        raise TaskError(f"{reg}: not JSON: {e}") from None
    found: list[Path] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if isinstance(v.get("path"), str):
                rel = v["path"]
                cands = [root / rel, root.parent / rel, root / Path(rel).name]
                found.append(next((c for c in cands if (c / "task.toml").is_file()), cands[0]))
            for x in v.values():
                if isinstance(x, (list, dict)):
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(data)
    return found


def load_tasks(
    path: str | os.PathLike[str], *, mode: str = "sandbox", refused: list[tuple[str, str]] | None = None
) -> TaskSet:
    """A task directory (one task, split ``train``), a directory of task directories (split
    ``train``), a directory of such directories (each a split named after it), or a Harbor
    registry-style dataset (a ``registry.json`` listing its tasks' paths).

    ``refused``: when given, a task that cannot run here is appended to it as ``(task id,
    reason)`` instead of failing the whole set (``harbor-env check`` lists them)."""
    root = Path(path).resolve()
    if not root.is_dir():
        raise TaskError(f"{root}: not a directory")

    def one(p: Path, split: str = "train") -> HarborTask | None:
        if refused is None:
            return load_task(p, split, mode=mode)
        try:
            return load_task(p, split, mode=mode)
        except TaskError as e:
            refused.append((p.name, str(e)))
            return None

    if (root / "task.toml").is_file():
        loaded = [one(root)]
    elif (listed := _registry_paths(root)) is not None:
        loaded = []
        for p in listed:
            if (p / "task.toml").is_file():
                loaded.append(one(p))
            elif refused is not None:
                refused.append((p.name, f"registry.json lists {p}, which holds no task.toml (not fetched here)"))
            else:
                raise TaskError(f"{root}/registry.json lists {p}, which holds no task.toml")
    else:
        children = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
        if any((c / "task.toml").is_file() for c in children):
            loaded = [one(c) for c in children if (c / "task.toml").is_file()]
        else:
            loaded = []
            for split in children:
                loaded += [one(c, split.name) for c in sorted(split.iterdir()) if (c / "task.toml").is_file()]
            if not loaded and refused is None:
                raise TaskError(f"{root}: no task.toml in it, its subdirectories or theirs")
    tasks = [t for t in loaded if t is not None]
    if not tasks and refused is not None:
        return TaskSet.empty([str(root)])
    return TaskSet(tasks, [str(root)])
