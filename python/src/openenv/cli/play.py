"""``openenv play TARGET``: play an environment by hand in the terminal.

The prompts come from the environment's advertised schema (``EnvironmentInfo``): an enum is
a numbered choice, a number is asked within its bounds, a boolean is a yes/no, an object
field by field, and anything else as JSON; a tool environment first asks which tool, then
its arguments from the tool's input schema. Each turn shows the observation (JSON), the
reward, the return so far, ``terminated``/``truncated`` and the reward breakdown.

TARGET is a URL (``grpc://``, ``http(s)://``, ``ws(s)://``) or ``module:Class``, served
in-process on a free loopback port for the game.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from typing import Any

import click
import numpy as np
from google.protobuf.message import Message

from openenv.cli.common import load_factory
from openenv.client import EnvClient
from openenv.errors import EnvError
from openenv.host import Host
from openenv.json_protocol.payloads import PayloadJson, message_to_json
from openenv.v1 import payload_pb2
from openenv.values import from_struct

__all__ = ["play_command"]

_CALL_TOOL = "openenv.v1.CallToolRequest"
_MAX_SHOWN = 4000  # characters of an observation printed per turn


class _JsonActions(EnvClient):
    """An EnvClient whose actions are canonical JSON, translated with the server's own
    descriptors (so a message-typed environment is played without its generated code)."""

    def encode_action(self, action: Any, out: payload_pb2.Payload) -> None:
        assert self.info is not None
        PayloadJson(self.info.action, self.info).from_json(action, out)


def _json(value: Any) -> Any:
    if isinstance(value, Message):
        return message_to_json(value)
    if isinstance(value, np.ndarray):
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


def _ask_json(label: str, required: bool) -> Any:
    while True:
        text = click.prompt(f"{label} (JSON)", default="" if not required else None, show_default=False)
        if not text and not required:
            return None
        try:
            return json.loads(text)
        except ValueError as e:
            click.echo(f"  not JSON: {e}", err=True)


def _ask(name: str, schema: Any, root: dict[str, Any], required: bool = True) -> Any:
    """A value for ``schema``, asked interactively (None: leave an optional field out)."""
    s = _resolve(schema, root)
    label = s.get("title") or name
    if "const" in s:
        return s["const"]
    if isinstance(s.get("enum"), list):
        named = [v for v in s["enum"] if isinstance(v, str)] or list(s["enum"])
        choices = [v for v in named if not str(v).endswith("_UNSPECIFIED")] or named
        click.echo(f"{label}: " + "  ".join(f"{i}) {v}" for i, v in enumerate(choices, 1)))
        while True:
            text = click.prompt(f"{label}", default="" if not required else None, show_default=False).strip()
            if not text and not required:
                return None
            if text.isdigit() and 1 <= int(text) <= len(choices):
                return choices[int(text) - 1]
            match = [v for v in choices if str(v).lower() == text.lower()]
            if match:
                return match[0]
            click.echo(f"  pick 1-{len(choices)} or one of: {', '.join(map(str, choices))}", err=True)
    kind = s.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "boolean":
        return click.confirm(label, default=bool(s.get("default", False)))
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
        if not required and default is None:
            text = click.prompt(label, default="", show_default=False)
            return None if text == "" else typ.convert(text, None, None)
        return click.prompt(label, type=typ, default=default)
    if kind == "string":
        text = click.prompt(label, default=s.get("default", "" if not required else None), show_default=False)
        return None if text == "" and not required else text
    props = s.get("properties")
    if isinstance(props, dict) and props:
        need = set(s.get("required") or [])
        out: dict[str, Any] = {}
        for key, sub in props.items():
            v = _ask(key, sub, root, key in need)
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
            text = click.prompt("tool").strip()
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


def _show(r: Any, ret: float) -> None:
    text = json.dumps(_json(r.observation), indent=1, default=str)
    click.echo("observation: " + (text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + " …"))
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


@click.command("play")
@click.argument("target")
@click.option("--seed", type=int, default=None, help="Seed of the first episode.")
@click.option("--connect-timeout", type=float, default=30.0, show_default=True, help="How long to wait for the server.")
def play_command(target: str, seed: int | None, connect_timeout: float) -> None:
    """Play TARGET by hand: a URL (grpc://, http://, ws://) or module:Class (served here).

    Each turn: Enter (or s) steps with an action asked from the environment's schema,
    r resets (optionally with a seed: "r 7"), t shows the state, q quits."""
    with contextlib.ExitStack() as stack:
        url = target if "://" in target else stack.enter_context(_served_here(target))
        try:
            env = stack.enter_context(_JsonActions(url, connect_timeout=connect_timeout).sync())
        except EnvError as e:
            raise click.ClickException(str(e)) from e
        client = env.client
        info = client.info
        assert info is not None
        click.echo(
            f"playing {info.name} {info.version} (session {client.session_id}); "
            "s: step, r [seed]: reset, t: state, q: quit"
        )
        tools = env.list_tools() if info.capabilities.tools else []
        ret = 0.0
        r = env.reset(seed=seed)
        _show(r, ret)
        while True:
            cmd = click.prompt(">", default="s", show_default=False).strip()
            try:
                if cmd in ("q", "quit", "exit"):
                    return
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
                elif cmd in ("s", "step", ""):
                    r = env.step(_ask_action(client, tools))  # type: ignore[arg-type]
                    ret = (0.0 if r.step_count == 0 else ret) + (r.reward or 0.0)
                    _show(r, ret)
                    if r.terminated or r.truncated:
                        click.echo("episode over: r to reset, q to quit")
                else:
                    click.echo("s: step, r [seed]: reset, t: state, q: quit", err=True)
            except EnvError as e:
                click.echo(f"error: {e}", err=True)
                if e.fatal:
                    raise click.ClickException("the session ended") from e
