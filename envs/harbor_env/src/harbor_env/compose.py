"""The part of the Compose specification Harbor's tasks use, run with the docker CLI
(docs/harbor.md, "Sidecar services").

A Harbor task's ``environment/docker-compose.yaml`` is merged on top of Harbor's own base config:
the ``main`` service is the agent's container (built from ``environment/Dockerfile``); every other
service is a sidecar the task's tests or the agent talk to by its name (``http://api-server:5000``).
This machine has no ``docker compose`` plugin (Debian's docker.io does not ship it, and no
registry it reaches has a maintained one), and the episode's lifetime and network are
ours to control anyway, so :func:`parse_compose` reads the subset below and
:class:`harbor_env.container.ContainerBox` runs it:

* per service: ``build`` (a context below ``environment/``, optional ``dockerfile`` and ``args``)
  or ``image`` (one this engine holds), ``environment`` (list or map, ``${VAR}``,
  ``${VAR:-default}`` and ``${VAR-default}`` taken from this host's environment, as compose
  does), ``command``, ``entrypoint``, ``working_dir``, ``user``, ``depends_on`` (list, or map with
  ``condition`` ``service_started``, ``service_healthy`` or ``service_completed_successfully``),
  ``healthcheck`` (``test``, ``interval``, ``timeout``, ``retries``, ``start_period``,
  ``disable``), ``expose`` and ``restart`` (no effect: every port of a service is reachable on the
  episode's network, and the episode ends before a restart could matter);
* for ``main``: ``depends_on`` and ``environment`` (Harbor configures the rest);
* anything else (``ports``, ``volumes``, ``networks``, ``privileged``, ``deploy``...) is refused,
  naming the key: a task is never run with part of its environment silently dropped.

A variable a service needs from the host (``${ANTHROPIC_API_KEY}`` with no default) that this host
does not set refuses the task, naming it: that is a credential of an outside service, which a
task here cannot reach anyway.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

from harbor_env.engine import image_id
from harbor_env.errors import TaskError

__all__ = ["ComposeSpec", "Service", "interpolate", "parse_compose", "start_order"]

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
CONDITIONS = ("service_started", "service_healthy", "service_completed_successfully")
_SIDE_KEYS = {
    "build", "image", "environment", "command", "entrypoint", "working_dir", "user", "depends_on",
    "healthcheck", "expose", "restart", "container_name", "hostname", "init", "tty", "stdin_open",
}  # fmt: skip
_MAIN_KEYS = {"depends_on", "environment", "expose", "healthcheck"}
_VAR = re.compile(
    r"\$(?:\$|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclasses.dataclass(frozen=True)
class Service:
    """One sidecar service of the compose file."""

    name: str
    context: Path | None = None
    dockerfile: str = "Dockerfile"
    build_args: tuple[tuple[str, str], ...] = ()
    image: str | None = None
    environment: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] | str | None = None
    entrypoint: tuple[str, ...] | str | None = None
    working_dir: str | None = None
    user: str | None = None
    depends_on: tuple[tuple[str, str], ...] = ()
    #: ``docker run`` flags of its healthcheck (empty: none, or the image's own).
    health_flags: tuple[str, ...] = ()
    #: How long its healthcheck may take to say healthy (start_period + retries of interval and timeout).
    health_wait_s: float = 60.0
    init: bool = False


@dataclasses.dataclass(frozen=True)
class ComposeSpec:
    """What :func:`parse_compose` read: the sidecars, and what ``main`` waits for and gets."""

    file: str
    services: tuple[Service, ...]
    main_depends_on: tuple[tuple[str, str], ...] = ()
    main_environment: tuple[tuple[str, str], ...] = ()

    def by_name(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)


def interpolate(text: str, where: str, environ: dict[str, str] | None = None) -> str:
    """Compose's variable substitution of ``text`` from this host's environment.

    Raises:
        TaskError: a variable with no default that the host does not set (or ``${X:?message}``).
    """
    env = os.environ if environ is None else environ

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("braced") or m.group("plain")
        op, arg = m.group("op"), m.group("arg") or ""
        value = env.get(name)
        if op in (":-", "-"):
            return arg if value is None or (op == ":-" and value == "") else value
        if op in (":?", "?") and (value is None or (op == ":?" and value == "")):
            raise TaskError(f"{where}: ${{{name}}} must be set on this host ({arg or 'no message'})")
        if value is None:
            raise TaskError(
                f"{where}: ${{{name}}} is not set on this host; it is a value of the host's (a credential of an "
                "outside service, whose network cannot be reached from here anyway)"
            )
        return value

    return _VAR.sub(one, text)


def _duration(value: Any, where: str) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m(?!s))?\s*(?:(\d+(?:\.\d+)?)s)?\s*(?:(\d+)ms)?\s*",
                     str(value))  # fmt: skip
    if not m or not any(m.groups()):
        raise TaskError(f"{where}: {value!r} is not a duration (e.g. 2s, 1m30s)")
    h, mi, s, ms = (float(g) if g else 0.0 for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def _environment(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = []
        for item in value:
            k, eq, v = str(item).partition("=")
            items.append((k, v if eq else None))
    else:
        raise TaskError(f"{where}: environment must be a list or a map")
    for k, v in items:
        if v is None:  # `- NAME`: the host's value when it has one, else unset (as compose does)
            if k in os.environ:
                out.append((k, os.environ[k]))
            continue
        out.append((k, interpolate(str(v), f"{where} {k}")))
    return tuple(out)


def _depends(value: Any, where: str, names: set[str]) -> tuple[tuple[str, str], ...]:
    if isinstance(value, list):
        pairs = [(str(n), "service_started") for n in value]
    elif isinstance(value, dict):
        pairs = []
        for n, spec in value.items():
            cond = (spec or {}).get("condition", "service_started") if isinstance(spec, dict) else "service_started"
            pairs.append((str(n), str(cond)))
    else:
        raise TaskError(f"{where}: depends_on must be a list or a map")
    for n, cond in pairs:
        if n not in names:
            raise TaskError(f"{where}: depends_on names {n!r}, which is not a service of the file")
        if cond not in CONDITIONS:
            raise TaskError(f"{where}: depends_on {n}: condition {cond!r} is not one of {', '.join(CONDITIONS)}")
    return tuple(pairs)


def _health(value: Any, where: str) -> tuple[tuple[str, ...], float]:
    if not isinstance(value, dict):
        raise TaskError(f"{where}: healthcheck must be a map")
    unknown = set(value) - {"test", "interval", "timeout", "retries", "start_period", "start_interval", "disable"}
    if unknown:
        raise TaskError(f"{where}: healthcheck {', '.join(sorted(unknown))} is not supported here")
    if value.get("disable"):
        return ("--no-healthcheck",), 0.0
    test = value.get("test")
    if isinstance(test, list):
        if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
            raise TaskError(f"{where}: healthcheck test must start with CMD, CMD-SHELL or NONE")
        if test[0] == "NONE":
            return ("--no-healthcheck",), 0.0
        import shlex

        cmd = shlex.join(str(a) for a in test[1:]) if test[0] == "CMD" else " ".join(str(a) for a in test[1:])
    elif isinstance(test, str):
        cmd = test
    else:
        raise TaskError(f"{where}: healthcheck needs a test")
    interval = _duration(value.get("interval", "30s"), where)
    timeout = _duration(value.get("timeout", "30s"), where)
    start = _duration(value.get("start_period", "0s"), where)
    retries = int(value.get("retries", 3))
    flags = ("--health-cmd", cmd, "--health-interval", f"{interval}s", "--health-timeout", f"{timeout}s",
             "--health-retries", str(retries), "--health-start-period", f"{start}s")  # fmt: skip
    return flags, start + (retries + 1) * (interval + timeout) + 30


def _argv(value: Any, where: str) -> tuple[str, ...] | str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return interpolate(value, where)
    if isinstance(value, list):
        return tuple(interpolate(str(a), where) for a in value)
    raise TaskError(f"{where}: must be a string or a list")


def parse_compose(env_dir: Path, where: str) -> ComposeSpec | None:
    """The task's compose file as a :class:`ComposeSpec` (None when it has none).

    Raises:
        TaskError: naming the key, service or variable that cannot run here.
    """
    import yaml

    found = [n for n in COMPOSE_FILES if (env_dir / n).is_file()]
    if not found:
        return None
    fname = f"environment/{found[0]}"
    at = f"{where}: {fname}"
    try:
        doc = yaml.safe_load((env_dir / found[0]).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise TaskError(f"{at}: not valid YAML: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("services") or {}, dict):
        raise TaskError(f"{at}: expected a map with `services`")
    unknown_top = set(doc) - {"services", "version", "name"}
    if unknown_top:
        raise TaskError(f"{at}: top-level {', '.join(sorted(unknown_top))} is not supported here")
    services: dict[str, Any] = doc.get("services") or {}
    names = set(services) - {"main"}
    sidecars: list[Service] = []
    main_dep: tuple[tuple[str, str], ...] = ()
    main_env: tuple[tuple[str, str], ...] = ()
    for name, spec in services.items():
        spec = spec or {}
        sat = f"{at} service {name}"
        if not isinstance(spec, dict):
            raise TaskError(f"{sat}: expected a map")
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", str(name)):
            raise TaskError(f"{sat}: not a valid service name")
        allowed = _MAIN_KEYS if name == "main" else _SIDE_KEYS
        unknown = set(spec) - allowed
        if unknown:
            what = "Harbor configures the rest of main" if name == "main" else "not supported here"
            raise TaskError(f"{sat}: {', '.join(sorted(unknown))}: {what}")
        env = _environment(spec.get("environment") or [], sat)
        deps = _depends(spec.get("depends_on") or [], sat, names)
        if name == "main":
            main_dep, main_env = deps, env
            continue
        context: Path | None = None
        dockerfile, args = "Dockerfile", ()
        build = spec.get("build")
        if build is not None:
            if isinstance(build, str):
                build = {"context": build}
            if not isinstance(build, dict) or set(build) - {"context", "dockerfile", "args"}:
                raise TaskError(f"{sat}: build supports context, dockerfile and args here")
            context = (env_dir / str(build.get("context", "."))).resolve()
            if not context.is_relative_to(env_dir.resolve()) or not context.is_dir():
                raise TaskError(f"{sat}: build context {build.get('context')!r} is not a directory in environment/")
            dockerfile = str(build.get("dockerfile", "Dockerfile"))
            if not (context / dockerfile).resolve().is_relative_to(context) or not (context / dockerfile).is_file():
                raise TaskError(f"{sat}: {dockerfile} is not in its build context")
            args = _environment(build.get("args") or {}, f"{sat} build args")
        elif not spec.get("image"):
            raise TaskError(f"{sat}: needs build or image")
        if context is not None:
            _needs_python(context, dockerfile, sat)
        health, wait = _health(spec["healthcheck"], sat) if "healthcheck" in spec else ((), 60.0)
        sidecars.append(
            Service(
                name=str(name), context=context, dockerfile=dockerfile, build_args=args,
                image=interpolate(str(spec["image"]), sat) if spec.get("image") else None,
                environment=env, command=_argv(spec.get("command"), f"{sat} command"),
                entrypoint=_argv(spec.get("entrypoint"), f"{sat} entrypoint"),
                working_dir=spec.get("working_dir"), user=str(spec["user"]) if spec.get("user") else None,
                depends_on=deps, health_flags=health, health_wait_s=wait, init=bool(spec.get("init")),
            )
        )  # fmt: skip
    spec_out = ComposeSpec(fname, tuple(sidecars), main_dep, main_env)
    start_order(spec_out, at)  # refuses a cycle now, not at reset
    for n, cond in main_dep:
        if cond == "service_healthy" and not spec_out.by_name(n).health_flags:
            raise TaskError(f"{at}: main waits for {n} to be healthy, but {n} has no healthcheck")
    return spec_out


#: The harbor base image's Python (Debian bookworm's), what a FROM this engine lacks resolves to.
BASE_PYTHON = "3.11"
_PEP723 = re.compile(r"^# /// script\s*$(.*?)^# ///\s*$", re.M | re.S)


def _needs_python(context: Path, dockerfile: str, where: str) -> None:
    """Refuse a service whose script declares (PEP 723) a ``requires-python`` the harbor base's
    Python does not meet while its ``FROM`` is not on this engine: uv could only download that
    interpreter from the internet (``UV_PYTHON_DOWNLOADS=never`` here)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    text = (context / dockerfile).read_text(encoding="utf-8")
    froms = re.findall(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)", text, re.I | re.M)
    if not froms or image_id(froms[-1]) is not None:
        return
    for py in sorted(context.glob("*.py")):
        m = _PEP723.search(py.read_text(encoding="utf-8", errors="replace"))
        req = re.search(r"^#\s*requires-python\s*=\s*[\"']([^\"']+)", m.group(1), re.M) if m else None
        if not req:
            continue
        try:
            ok = SpecifierSet(req.group(1)).contains(BASE_PYTHON + ".0")
        except InvalidSpecifier:
            continue
        if not ok:
            raise TaskError(
                f"{where}: {py.name} requires Python {req.group(1)} (its script header), but FROM {froms[-1]} cannot "
                f"be pulled here and the harbor base has Python {BASE_PYTHON}; uv cannot download a Python "
                "interpreter on this machine"
            )


def start_order(spec: ComposeSpec, where: str = "") -> list[Service]:
    """The sidecars, each after those it depends on.

    Raises:
        TaskError: the dependencies form a cycle.
    """
    done: list[Service] = []
    seen: set[str] = set()
    visiting: set[str] = set()

    def visit(s: Service) -> None:
        if s.name in seen:
            return
        if s.name in visiting:
            raise TaskError(f"{where}: depends_on forms a cycle through {s.name!r}")
        visiting.add(s.name)
        for n, _ in s.depends_on:
            visit(spec.by_name(n))
        visiting.discard(s.name)
        seen.add(s.name)
        done.append(s)

    for s in spec.services:
        visit(s)
    return done
