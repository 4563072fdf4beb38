"""``openenv play TARGET``: play an environment by hand in the terminal.

The prompts come from the environment's advertised schema (``EnvironmentInfo``): an enum is
a numbered choice, a number is asked within its bounds, a boolean is a yes/no, an object
field by field, and anything else as JSON; a tool environment first asks which tool, then
its arguments from the tool's input schema (a tool without arguments asks nothing). A value
the action cannot go without (an enum whose zero is ``*_UNSPECIFIED``, the only field of a
message) is asked again on Enter instead of being sent empty; ``q`` at any prompt quits
(``\\q`` types a literal ``q``).

Each turn shows the observation readably (text as its lines, so a board or a maze reads as
one; a tool's result as its text; objects as ``key: value`` lines), the reward, the return so
far, ``terminated``/``truncated`` and the reward breakdown.

TARGET is a URL (``grpc://``, ``http(s)://``, ``ws(s)://``) or ``module:Class``, served
in-process on a free loopback port for the game.

A multi-agent environment (RFC 0012) is played by seats: by default one player acts for every
agent (self-play): each turn names the agent to act, shows that agent's view only, and asks
that agent's action (a simultaneous game asks each agent's, then steps once). ``--agent ID``
(repeatable) acts for those agents only and prints how a second player joins the same world
(``openenv play --join TOKEN@URL``, in another terminal); ``--join`` takes that ticket, a
fleet's :class:`~openenv.fleet.WorldTicket`, or a bare token with TARGET. A seat whose agents
are not to act waits for its turn (or the episode's end) and shows what it sees then.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any, cast

import click
import numpy as np
from google.protobuf.message import Message

from openenv.cli.common import load_factory
from openenv.client import EnvClient
from openenv.errors import EnvError
from openenv.fleet import WorldTicket
from openenv.host import Host
from openenv.json_protocol.payloads import PayloadJson, message_to_json
from openenv.runtime.tools import CallToolObservation, ToolResult
from openenv.v1 import multiagent_pb2, payload_pb2
from openenv.values import from_struct

__all__ = ["play_command"]

_CALL_TOOL = "openenv.v1.CallToolRequest"
_TOOL_RESULT = "openenv.v1.CallToolResponse"
_MAX_SHOWN = 4000  # characters of an observation printed per turn


class _JsonActions(EnvClient):
    """An EnvClient whose actions are canonical JSON, translated with the server's own
    descriptors (so a message-typed environment is played without its generated code)."""

    def encode_action(self, action: Any, out: payload_pb2.Payload) -> None:
        assert self.info is not None
        PayloadJson(self.info.action, self.info).from_json(action, out)


_RAMP = " .:-=+*#%@"  # dark to light
_PICTURE_COLUMNS = 64


def _picture(arr: np.ndarray) -> list[str] | None:
    """A frame (an ``(H, W, 1|3|4)`` ``uint8`` tensor, e.g. an Atari screen) as text rows of
    brightness characters, ``_PICTURE_COLUMNS`` wide; None for any other array."""
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] not in (1, 3, 4) or min(arr.shape[:2]) < 8:
        return None
    h, w, c = arr.shape
    grey = arr[:, :, :3].mean(axis=2) if c >= 3 else arr[:, :, 0].astype(np.float64)
    cols = min(_PICTURE_COLUMNS, w)
    rows = max(1, round(h * cols / w / 2))  # a character is about twice as tall as wide
    ys = (np.arange(rows) * h // rows)[:, None]
    xs = (np.arange(cols) * w // cols)[None, :]
    idx = (grey[ys, xs] * (len(_RAMP) - 1) / 255).round().astype(int)
    return [f"({h}x{w}x{c} uint8 frame, drawn in brightness; /web shows it in colour)"] + [
        "".join(_RAMP[i] for i in row) for row in idx
    ]


def _json(value: Any) -> Any:
    if isinstance(value, Message):
        return message_to_json(value)
    if isinstance(value, np.ndarray):
        picture = _picture(value)
        if picture is not None:
            return picture
        if value.dtype.kind == "f":
            return np.round(value, 4).tolist()
        return value.tolist()
    if hasattr(value, "to_proto"):
        return message_to_json(value.to_proto())
    return value


def _resolve(s: Any, root: dict[str, Any]) -> dict[str, Any]:
    for _ in range(32):
        if not (isinstance(s, dict) and isinstance(s.get("$ref"), str)):
            break
        target: Any = root
        for part in s["$ref"].removeprefix("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        s = {**target, **{k: v for k, v in s.items() if k != "$ref"}}
    return s if isinstance(s, dict) else {}


class _Quit(Exception):
    """``q`` typed at a prompt: leave the game."""


def _read(label: str, default: str | None = None) -> str:
    """A line typed at ``label`` (``default`` on Enter, when given); ``q``/``quit`` quits and
    ``\\q`` stands for a literal ``q``."""
    text = click.prompt(label, default=default or "", show_default=bool(default))
    text = str(text).strip()
    if text in ("q", "quit"):
        raise _Quit
    return "q" if text == "\\q" else text


def _ask_json(label: str, required: bool) -> Any:
    while True:
        text = _read(f"{label} (JSON)")
        if not text:
            if not required:
                return None
            click.echo("  type a JSON value (q quits)", err=True)
            continue
        try:
            return json.loads(text)
        except ValueError as e:
            click.echo(f"  not JSON: {e}", err=True)


def _enum_match(text: str, choices: Sequence[Any]) -> Any:
    """The choice ``text`` names: the whole name in any case (``move_left``), or the words after
    the prefix the names share (``left`` for ``MOVE_LEFT``; ``-`` or a space for ``_``); None
    when it names none."""
    want = text.strip().lower().replace("-", "_").replace(" ", "_")
    if not want:
        return None
    names = [str(v) for v in choices]
    for v, n in zip(choices, names, strict=True):
        if n.lower() == want or n.lower().replace("-", "_").replace(" ", "_") == want:
            return v
    # The words the names share in front (MOVE_ of MOVE_LEFT, MOVE_LEAP), whole words only.
    words = [n.lower().split("_") for n in names]
    shared = 0
    while len(names) > 1 and all(len(w) > shared + 1 and w[shared] == words[0][shared] for w in words):
        shared += 1
    prefix = "".join(w + "_" for w in words[0][:shared])
    short = [v for v, n in zip(choices, names, strict=True) if prefix and n.lower()[len(prefix) :] == want]
    return short[0] if len(short) == 1 else None


def _ask(name: str, schema: Any, root: dict[str, Any], required: bool = True) -> Any:
    """A value for ``schema``, asked interactively (None: leave an optional field out)."""
    s = _resolve(schema, root)
    label = s.get("title") or name
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list):
        named = [v for v in s["enum"] if isinstance(v, str)] or list(s["enum"])
        choices = [v for v in named if not str(v).endswith("_UNSPECIFIED")] or named
        # Leaving out an enum whose zero is *_UNSPECIFIED sends that zero, which no environment
        # takes: such a field is asked until answered.
        required = required or len(choices) < len(named)
        click.echo(f"{label}: " + "  ".join(f"{i}) {v}" for i, v in enumerate(choices, 1)))
        while True:
            text = _read(label)
            if not text and not required:
                return None
            if text.isdigit() and 1 <= int(text) <= len(choices):
                return choices[int(text) - 1]
            match = _enum_match(text, choices)
            if match is not None:
                return match
            click.echo(f"  pick 1-{len(choices)} or one of: {', '.join(map(str, choices))} (q quits)", err=True)
    kind = s.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "boolean":
        yes_no = "y" if s.get("default", False) else "n"
        while True:
            text = _read(f"{label} [y/n]", yes_no).lower()
            if text in ("y", "yes", "n", "no", "true", "false"):
                return text in ("y", "yes", "true")
            click.echo("  y or n (q quits)", err=True)
    if kind in ("integer", "number"):
        lo, hi = s.get("minimum"), s.get("maximum")
        lo = lo if isinstance(lo, (int, float)) and abs(lo) < 2**31 - 1 else None
        hi = hi if isinstance(hi, (int, float)) and abs(hi) < 2**31 - 1 else None
        typ: click.ParamType[Any] = (
            click.IntRange(None if lo is None else int(lo), None if hi is None else int(hi))
            if kind == "integer"
            else click.FloatRange(lo, hi)
        )
        default = s.get("default")
        while True:
            text = _read(label, None if default is None else str(default))
            if not text and not required:
                return None
            if not text:
                click.echo("  type a number (q quits)", err=True)
                continue
            try:
                return typ.convert(text, None, None)
            except click.BadParameter as e:
                click.echo(f"  {e.message} (q quits)", err=True)
    if kind == "string":
        default = s.get("default")
        while True:
            text = _read(label, default if isinstance(default, str) and default else None)
            if text or not required or default == "":
                return None if text == "" and not required else text
            click.echo("  type some text (q quits; \\q sends a q)", err=True)
    props = s.get("properties")
    if isinstance(props, dict) and not props:
        return {}  # an object of no fields (a tool without arguments): nothing to ask
    if isinstance(props, dict):
        required_keys = [k for k in s.get("required") or [] if isinstance(k, str) and k in props]
        need = set(required_keys)
        out: dict[str, Any] = {}
        # Required fields in the schema's order (a tool's: its signature's), then the others:
        # "properties" arrives sorted (a Struct has no order: openenv.values.from_struct).
        for key in required_keys + [k for k in props if k not in need]:
            sub = props[key]
            # The only field of a message is what the action is: never left out.
            v = _ask(key, sub, root, key in need or len(props) == 1)
            if v is not None:
                out[key] = v
        return out
    return _ask_json(label, required)


def _ask_action(env: _JsonActions, tools: list[Any]) -> Any:
    info = env.info
    assert info is not None
    if info.action.message_type == _CALL_TOOL and tools:
        click.echo("tools: " + "  ".join(f"{i}) {t.name}" for i, t in enumerate(tools, 1)))
        while True:
            text = _read("tool")
            picked = [t for i, t in enumerate(tools, 1) if text in (str(i), t.name)]
            if picked:
                break
            click.echo(f"  pick 1-{len(tools)} or a tool name", err=True)
        tool = picked[0]
        schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
        return {"name": tool.name, "arguments": _ask("arguments", schema, schema) or {}}
    schema = from_struct(info.action.json_schema)
    if not schema:
        return _ask_json("action", True)
    return _ask("action", schema, schema)


def _show_breakdown(score: Any, depth: int = 0) -> None:
    d = message_to_json(score) if isinstance(score, Message) else _json(score)
    if not isinstance(d, dict):
        return
    click.echo(
        f"{'  ' * depth}- {d.get('name') or 'rubric'}: {d.get('score', 0):g}"
        + (f" ({d['reason']})" if d.get("reason") else "")
    )
    for child in d.get("children") or []:
        _show_breakdown(child, depth + 1)


def _inline(value: Any) -> str | None:
    """``value`` on one line, or None when it reads better as a block."""
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return None if "\n" in value else value
    if isinstance(value, list) and len(value) >= 2 and all(isinstance(v, str) for v in value):
        if len({len(v) for v in value}) == 1 and len(value[0]) >= 2:
            return None  # rows of a board: one per line
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 100 and "\\n" not in text else None


def _lines(value: Any, indent: int, top: bool = False) -> list[str]:
    """``value`` as readable lines: text as its own lines, objects as ``key: value`` (``top``:
    even a short one), lists of rows one per line, short values inline."""
    pad = "  " * indent
    one = None if top and isinstance(value, dict) and value else _inline(value)
    if one is not None:
        return [pad + one]
    if isinstance(value, str):
        return [pad + line for line in value.splitlines()]
    if isinstance(value, dict):
        out: list[str] = []
        for k, v in value.items():
            v_one = _inline(v)
            if v_one is not None:
                out.append(f"{pad}{k}: {v_one}")
            else:
                out += [f"{pad}{k}:", *_lines(v, indent + 1)]
        return out
    if isinstance(value, list):
        if all(isinstance(v, str) and "\n" not in v for v in value):
            return [pad + v for v in value]
        out = []
        for v in value:
            sub = _lines(v, indent + 1)
            out += [f"{pad}- {sub[0].lstrip()}", *sub[1:]]
        return out
    return [pad + str(value)]


def _readable(observation: Any) -> Any:
    """An observation as plain values for :func:`_lines`: a tool call's result as its text (or
    its structured content when it has no text), messages and arrays as JSON values."""
    if isinstance(observation, Message) and observation.DESCRIPTOR.full_name == _TOOL_RESULT:
        observation = CallToolObservation.from_proto(observation)  # type: ignore[arg-type]
    if isinstance(observation, CallToolObservation):
        result = observation.result if isinstance(observation.result, ToolResult) else None
        if result is None:
            return observation.metadata or ""
        body: Any = result.text if result.text else _json(result.structured_content)
        shown: dict[str, Any] = {}
        if observation.tool_name:
            shown["tool"] = observation.tool_name
        shown["error" if result.is_error else "result"] = "" if body is None else body
        return shown if observation.tool_name or result.is_error else shown["result"]
    return _json(observation)


def _show(r: Any, ret: float) -> None:
    lines = _lines(_readable(r.observation), 1, top=True)
    text = "\n".join(lines)
    if len(text) > _MAX_SHOWN:
        text = text[:_MAX_SHOWN] + " …"
    if len(lines) == 1:
        click.echo("observation: " + text.strip())
    else:
        click.echo("observation:\n" + text)
    reward = "-" if r.reward is None else f"{r.reward:g}"
    click.echo(f"step={r.step_count} reward={reward} return={ret:g} terminated={r.terminated} truncated={r.truncated}")
    if r.reward_breakdown is not None:
        click.echo("reward breakdown:")
        _show_breakdown(r.reward_breakdown, 1)


@contextlib.contextmanager
def _served_here(spec: str) -> Iterator[str]:
    """``module:Class`` served on a free loopback port in a thread, for the game."""
    factory = load_factory(spec)
    loop = asyncio.new_event_loop()
    host = Host(factory, "127.0.0.1", 0, http_port=None)
    started = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(host.start())
        except Exception as e:  # noqa: BLE001 - any startup failure is reported to the command
            failed.append(e)
            started.set()
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="openenv-play-server", daemon=True)
    thread.start()
    started.wait()
    if failed:
        raise click.ClickException(f"cannot serve {spec}: {failed[0]}")
    try:
        assert host.address is not None
        yield host.address
    finally:
        asyncio.run_coroutine_threadsafe(host.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def _show_world(r: Any, mine: Sequence[str], returns: dict[str, float], show_views: Sequence[str]) -> None:
    """A multi-agent time step: one line per agent of this seat (its reward and return), the
    world's step and who acts, then the views of ``show_views`` (agents of this seat)."""
    for agent in mine:
        part = r.agents.get(agent)
        if part is None:
            continue
        reward = "-" if part.reward is None else f"{part.reward:g}"
        click.echo(
            f"  {agent}: reward={reward} return={returns[agent]:g} "
            f"terminated={part.terminated} truncated={part.truncated}"
        )
    if r.done:
        end = "terminated" if r.terminated else "truncated"
        click.echo(f"step={r.step_count} episode over ({end}): " + " ".join(f"{a}={returns[a]:g}" for a in mine))
    else:
        click.echo(f"step={r.step_count} to act: {', '.join(r.to_act) or '-'}")
    for agent in show_views:
        part = r.agents.get(agent)
        if part is None:
            continue
        lines = _lines(_readable(part.observation), 1, top=True)
        text = "\n".join(lines)
        if len(text) > _MAX_SHOWN:
            text = text[:_MAX_SHOWN] + " …"
        click.echo(f"view of {agent}: " + text.strip() if len(lines) == 1 else f"view of {agent}:\n" + text)


def _play_world(env: Any, client: _JsonActions, seed: int | None, join_hint: str) -> None:
    """The multi-agent game loop of one seat (every agent: self-play)."""
    spec = client.multi_agent
    assert spec is not None
    mine = list(client.world.agent_ids)
    simultaneous = spec.mode == multiagent_pb2.TURN_MODE_SIMULTANEOUS
    agents = "  ".join(f"{a.id} ({a.role})" if a.role and a.role != a.id else a.id for a in spec.agents)
    seat = "every agent (self-play)" if len(mine) == len(spec.agents) else ", ".join(mine)
    click.echo(f"agents: {agents}; {'simultaneous' if simultaneous else 'turn-based'}; you act for {seat}")
    if join_hint:
        click.echo(f"another player joins with: {join_hint}")
    if not client.world.owner:
        click.echo("waiting for the owner's episode...")
    returns = dict.fromkeys(mine, 0.0)

    def took(r: Any, fresh: bool = False) -> Any:
        if fresh:
            returns.update(dict.fromkeys(mine, 0.0))
        for a, part in r.agents.items():
            if a in returns:
                returns[a] += part.reward or 0.0
        return r

    def to_act(r: Any) -> list[str]:
        return [a for a in r.to_act if a in returns]

    def wait_turn(r: Any) -> Any:
        while not r.done and not to_act(r):
            click.echo(f"waiting for {', '.join(r.to_act)}...")
            before = r.episode_id
            r = env.observe(wait=True)
            took(r, fresh=r.episode_id != before)
            _show_world(r, mine, returns, to_act(r) or mine[:1])
        return r

    try:
        r = took(env.reset(seed=seed), fresh=True)
    except EnvError as e:
        raise click.ClickException(str(e)) from e
    _show_world(r, mine, returns, to_act(r) or mine[:1])
    r = wait_turn(r)
    while True:
        if r.done:
            click.echo(
                "episode over: r to reset, q to quit"
                if client.world.owner
                else "episode over: r waits for the next episode, q to quit"
            )
        cmd = click.prompt(">", default="s", show_default=False).strip()
        try:
            if cmd in ("q", "quit", "exit"):
                return
            if cmd in ("s", "step", ""):
                acting = to_act(r)
                if not acting:
                    click.echo("nobody of yours is to act: r to reset, q to quit", err=True)
                    continue
                actions: dict[str, Any] = {}
                try:
                    for agent in acting if simultaneous else acting[:1]:
                        click.echo(f"{agent} to act")
                        actions[agent] = _ask_action(client, [])
                except _Quit:
                    return
                if simultaneous:
                    r = took(env.step_agents(actions))
                else:
                    ((agent, action),) = actions.items()
                    r = took(env.step(action, agent_id=agent))
                _show_world(r, mine, returns, to_act(r) or mine[:1])
                r = wait_turn(r)
                continue
            if cmd.startswith("r"):
                arg = cmd[1:].strip()
                r = took(env.reset(seed=int(arg) if arg.isdigit() else None), fresh=True)
                _show_world(r, mine, returns, to_act(r) or mine[:1])
                r = wait_turn(r)
            elif cmd in ("t", "state"):
                st = env.state()
                click.echo(
                    json.dumps(
                        {
                            "episode_id": st.episode_id,
                            "step_count": st.step_count,
                            "status": st.status.name,
                            "state": _json(st.state),
                        },
                        indent=1,
                        default=str,
                    )
                )
            else:
                click.echo("s: act, r [seed]: reset, t: state, q: quit", err=True)
        except EnvError as e:
            click.echo(f"error: {e}", err=True)
            if e.fatal:
                raise click.ClickException("the session ended") from e


@click.command("play")
@click.argument("target", required=False)
@click.option("--seed", type=int, default=None, help="Seed of the first episode.")
@click.option("--connect-timeout", type=float, default=30.0, show_default=True, help="How long to wait for the server.")
@click.option(
    "--agent",
    "agent_ids",
    multiple=True,
    metavar="ID",
    help="Multi-agent: act for this agent only (repeatable); another player may join for the rest.",
)
@click.option(
    "--join",
    "join",
    default=None,
    metavar="TICKET",
    help="Multi-agent: join a world: TOKEN@URL (TARGET not needed), or a join token with TARGET.",
)
def play_command(
    target: str | None, seed: int | None, connect_timeout: float, agent_ids: tuple[str, ...], join: str | None
) -> None:
    """Play TARGET by hand: a URL (grpc://, http://, ws://) or module:Class (served here).

    Each turn: Enter (or s) steps with an action asked from the environment's schema,
    r resets (optionally with a seed: "r 7"), t shows the state, q quits. A multi-agent
    environment is self-play unless --agent or --join picks a seat."""
    ticket = WorldTicket.parse(join) if join else None
    if ticket is not None and ticket.server:
        target = target or ticket.server
    if not target:
        raise click.UsageError("give TARGET, or --join TOKEN@URL")
    world: dict[str, Any] = {}
    if ticket is not None:
        world["join_token"] = ticket.join_token
    if agent_ids:
        world["agent_ids"] = agent_ids
    with contextlib.ExitStack() as stack:
        url = target if "://" in target else stack.enter_context(_served_here(target))
        try:
            env = stack.enter_context(_JsonActions(url, connect_timeout=connect_timeout, **world).sync())
        except EnvError as e:
            raise click.ClickException(str(e)) from e
        client = cast(_JsonActions, env.client)  # the sync view of the _JsonActions opened above
        info = client.info
        assert info is not None
        click.echo(
            f"playing {info.name} {info.version} (session {client.session_id}); "
            "s (or Enter): step, r [seed]: reset, t: state, q: quit (at any prompt)"
        )
        if client.multi_agent is not None:
            spec = client.multi_agent
            free = len(client.world.agent_ids) < len(spec.agents) and client.world.join_token
            hint = ""
            if free:
                where = url if "://" in url else f"grpc://{url}"
                hint = f"openenv play --join {WorldTicket(client.world.join_token, where)}"
            _play_world(env, client, seed, hint)
            return
        if world:
            raise click.ClickException(f"{info.name} is not a multi-agent environment: --agent/--join do not apply")
        ret = 0.0
        try:
            tools = env.list_tools() if info.capabilities.tools else []
            r = env.reset(seed=seed)
        except EnvError as e:  # e.g. the environment's reset raised: say so, no traceback
            raise click.ClickException(str(e)) from e
        _show(r, ret)
        while True:
            over = r.terminated or r.truncated
            # After an episode, Enter ends the game (a step would only be refused).
            cmd = click.prompt(">", default="q" if over else "s", show_default=False).strip()
            try:
                if cmd in ("q", "quit", "exit"):
                    return
                if cmd in ("s", "step", "") and over:
                    click.echo("the episode is over: r [seed] plays another, q (or Enter) quits", err=True)
                    continue
                if cmd in ("s", "step", ""):
                    try:
                        action = _ask_action(client, tools)
                    except _Quit:
                        return
                    r = env.step(action)
                    ret = (0.0 if r.step_count == 0 else ret) + (r.reward or 0.0)
                    _show(r, ret)
                    if r.terminated or r.truncated:
                        click.echo("episode over: r [seed] plays another, q (or Enter) quits")
                    continue
                if cmd.startswith("r"):
                    arg = cmd[1:].strip()
                    ret = 0.0
                    r = env.reset(seed=int(arg) if arg.isdigit() else None)
                    _show(r, ret)
                elif cmd in ("t", "state"):
                    st = env.state()
                    click.echo(
                        json.dumps(
                            {
                                "episode_id": st.episode_id,
                                "step_count": st.step_count,
                                "status": st.status.name,
                                "state": _json(st.state),
                            },
                            indent=1,
                            default=str,
                        )
                    )
                else:
                    click.echo("s: step, r [seed]: reset, t: state, q: quit", err=True)
            except EnvError as e:
                click.echo(f"error: {e}", err=True)
                if e.fatal:
                    raise click.ClickException("the session ended") from e
