"""Peak memory one hostile message costs a server, per message kind and listener (docs/security.md).

For each kind: a fresh ``openenv serve`` subprocess, a warm-up with the same kind of message
small, then the peak resident memory (``VmHWM``, reset through ``/proc/PID/clear_refs`` just
before) it gains while it receives, parses and answers one message of ``--size-mib``. Listeners:
``grpcio`` and ``grpclib`` (raw ``SessionRequest`` bytes), ``ws`` (OpenEnv frames on ``/ws``),
``mcp`` (``POST /mcp``, OpenEnv's JSON-RPC and the MCP SDK's Streamable HTTP). Environments:
:class:`JsonEcho` (JSON actions echoed back, a tool ``echo``) and the echo environment (a stock
client's tool calls over ``/ws``).

    .venv/bin/python tools/bench/message_memory.py --limit-mb 16 --size-mib 15
    .venv/bin/python tools/bench/message_memory.py --limit-mb 16 --size-mib 15 --src /tmp/base/python/src

``--src`` serves another source tree (e.g. ``git archive HEAD~1 python/src | tar -x -C /tmp/base``)
for before/after figures. One JSON object per line; Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openenv

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MiB = 1 << 20


class JsonEcho(openenv.Environment):
    """JSON actions, echoed back as the observation; ``echo`` and ``size`` tools."""

    name = "json_echo"
    max_sessions = 1024
    run_in_thread = False

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> dict[str, int]:
        return {"n": len(options or {})}

    def step(self, action: Any) -> Any:
        return action

    @openenv.tool
    def echo(self, text: str = "") -> str:
        """The text, back."""
        return text

    @openenv.tool
    def size(self, text: str = "", items: Any = None) -> int:
        """The text's length plus the number of items."""
        return len(text) + len(items or ())


# --------------------------------------------------------------------------- protobuf bytes


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _values(item: bytes, size: int) -> bytes:
    """A ``Value`` holding a list of about ``size`` bytes of ``item`` (one ``Value``'s bytes each)."""
    entry = _ld(1, item)
    return _ld(6, entry * (size // len(entry)))


def _struct(key: bytes, value: bytes) -> bytes:
    return _ld(1, _ld(1, key) + _ld(2, value))


def _req(rid: int, field: int, payload: bytes) -> bytes:
    return b"\x08" + _varint(rid) + _ld(field, payload)


_EMPTY_STRUCT, _NUMBER, _EMPTY_STR = b"\x2a\x00", b"\x11" + b"\x00" * 7 + b"\x3f", b"\x1a\x00"
_HANDSHAKE = _req(1, 2, _ld(1, b"1.0"))
_RESET = _req(9, 3, b"")


def grpc_kinds(size: int) -> dict[str, tuple[list[bytes], bytes]]:
    """kind -> (messages sent first, the hostile message; empty: the last first message is)."""

    def step(value: bytes) -> bytes:
        return _req(2, 4, _ld(1, _ld(2, value)))  # StepRequest.action = Payload.json

    def tool(name: bytes, text: bytes) -> bytes:
        return _req(2, 7, _ld(1, name) + _ld(2, _struct(b"text", _ld(3, text))))

    structs = _struct(b"a", _values(_EMPTY_STRUCT, size))
    open_ = [_HANDSHAKE, _RESET]
    return {
        "handshake options: empty structs": ([_req(1, 2, _ld(1, b"1.0") + _ld(3, structs))], b""),
        "reset options: empty structs": (open_, _req(2, 3, _ld(3, structs))),
        "step action: list of empty structs": (open_, step(_values(_EMPTY_STRUCT, size))),
        "step action: list of numbers": (open_, step(_values(_NUMBER, size))),
        "step action: list of empty strings": (open_, step(_values(_EMPTY_STR, size))),
        "step action: list of 4-char strings": (open_, step(_values(b"\x1a\x04abcd", size))),
        "step action: list of 16-char strings": (open_, step(_values(b"\x1a\x10abcdefghijklmnop", size))),
        "reset options: map of 24-char keys to numbers": (
            open_,
            _req(2, 3, _ld(3, b"".join(_ld(1, _ld(1, b"k%023d" % i) + _ld(2, _NUMBER)) for i in range(size // 40)))),
        ),
        "step action: string, echoed": (open_, step(_ld(3, b"x" * size))),
        "tool argument: string, echoed": (open_, tool(b"echo", b"x" * size)),
        "tool argument: string, its length": (open_, tool(b"size", b"x" * size)),
    }


def ws_kinds(size: int) -> dict[str, tuple[str, str]]:
    """kind -> (environment, the hostile frame)."""

    def step(data: str) -> str:
        return '{"type":"step","data":' + data + "}"

    def listed(item: str, n: int) -> str:
        return "[" + ",".join([item] * n) + "]"

    call = {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": "x" * size}}
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x" * size}},
    }
    return {
        "step: string, echoed": ("json", step(json.dumps("x" * size))),
        "step: list of numbers 0.5": ("json", step(listed("0.5", size // 4))),
        "step: list of numbers 0.123456": ("json", step(listed("0.123456", size // 9))),
        "step: list of 1-char strings": ("json", step(listed('"a"', size // 4))),
        "reset options: list of numbers": ("json", '{"type":"reset","data":{"a":' + listed("0.5", size // 4) + "}}"),
        "a stock client's tool call, echoed": ("echo", step(json.dumps(call))),
        "mcp frame tools/call, echoed": ("json", '{"type":"mcp","data":' + json.dumps(rpc) + "}"),
    }


def mcp_kinds(size: int) -> dict[str, tuple[bool, bytes]]:
    """kind -> (over the MCP SDK's Streamable HTTP, the hostile body)."""
    rpc = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x" * size}},
    }
    numbers = ",".join(["0.5"] * (size // 4))
    listed = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"size","arguments":{"items":['
    return {
        "tools/call, echoed": (False, json.dumps(rpc).encode()),
        "tools/call with a list of numbers": (False, (listed + numbers + "]}}}").encode()),
        "Streamable HTTP tools/call, echoed": (True, json.dumps(rpc).encode()),
    }


# --------------------------------------------------------------------------- clients


async def grpc_answer(addr: str, first: list[bytes], hostile: bytes) -> str:
    """Send the messages on one Session stream; how the last one was answered."""
    import grpc

    from openenv.v1 import environment_pb2

    opts = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    async with grpc.aio.insecure_channel(addr, options=opts) as ch:
        call = ch.stream_stream(
            "/openenv.v1.EnvironmentService/Session", request_serializer=lambda b: b, response_deserializer=lambda b: b
        )()
        answer = ""
        for m in [*first, hostile] if hostile else first:
            await call.write(m)
            r = await call.read()
            if r is grpc.aio.EOF:
                return f"stream ended: {(await call.code()).name}"
            resp = environment_pb2.SessionResponse.FromString(r)
            answer = f"{resp.WhichOneof('kind')} ({len(r)} B)"
            if resp.HasField("error"):
                answer += f" {openenv.ErrorCode(resp.error.code).name}: {resp.error.message[:80]}"
        await call.done_writing()
        with_status = answer
        try:
            while await call.read() is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as e:
            with_status += f"; {e.code().name}"
        return with_status


async def ws_answer(url: str, frames: list[str]) -> str:
    from websockets.asyncio.client import connect

    async with connect(url.replace("http://", "ws://") + "/ws", max_size=None) as ws:
        answer = ""
        for f in frames:
            await ws.send(f)
            r = await asyncio.wait_for(ws.recv(), 120)
            d = json.loads(r)
            answer = f"{d.get('type')} ({len(r.encode() if isinstance(r, str) else r)} B)"
            if d.get("type") == "error":
                answer += f" {d['data'].get('code')}: {d['data'].get('message', '')[:80]}"
        return answer


async def mcp_session(url: str) -> tuple[Any, dict[str, str]]:
    """An httpx client with an initialized MCP Streamable HTTP session (and its headers)."""
    import httpx

    http = httpx.AsyncClient(base_url=url, timeout=120, trust_env=False)
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    r = await http.post(
        "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, headers=headers
    )
    headers = {**headers, "mcp-session-id": r.headers.get("mcp-session-id", ""), "mcp-protocol-version": "2025-06-18"}
    await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return http, headers


# --------------------------------------------------------------------------- measurement


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(line.split()[1]) * 1024
    return out


class Served:
    """``openenv serve TARGET`` in a subprocess (gRPC and HTTP), from ``src`` when given."""

    def __init__(self, target: str, limit_mb: float, engine: str, src: str | None) -> None:
        self.dir = tempfile.TemporaryDirectory()
        g, h = Path(self.dir.name) / "g", Path(self.dir.name) / "h"
        cmd = [sys.executable, "-m", "openenv.cli", "serve", target, "--port", "0", "--http-port", "0", "--no-web"]
        cmd += ["--ready-file", str(g), "--http-ready-file", str(h), "--max-message-mb", str(limit_mb)]
        cmd += ["--engine", engine]
        path = os.pathsep.join(p for p in (src, str(HERE), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": path}
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not (g.exists() and h.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            time.sleep(0.05)
        self.addr, self.url = g.read_text().strip().removeprefix("grpc://"), h.read_text().strip()

    async def peak(self, send: Any) -> tuple[int, Any, float]:
        """(peak resident memory gained while ``send()`` ran, its result, seconds)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        before = _status(self.proc.pid)["VmRSS"]
        t0 = time.monotonic()
        result = await send()
        dt = time.monotonic() - t0
        await asyncio.sleep(0.2)
        return _status(self.proc.pid)["VmHWM"] - before, result, dt

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.dir.cleanup()


async def measure(listener: str, kind: str, ns: argparse.Namespace) -> dict[str, Any]:
    size = int(ns.size_mib * MiB)
    echo, json_echo = "echo_env.server:EchoEnvironment", "message_memory:JsonEcho"
    if listener in ("grpcio", "grpclib"):
        first, hostile = grpc_kinds(size)[kind]
        small_first, small = grpc_kinds(1000)[kind]
        srv = Served(json_echo, ns.limit_mb, listener, ns.src)
        warm = lambda: grpc_answer(srv.addr, small_first, small)  # noqa: E731
        send = lambda: grpc_answer(srv.addr, first, hostile)  # noqa: E731
        nbytes = len(hostile or first[-1])
    elif listener == "ws":
        env, frame = ws_kinds(size)[kind]
        srv = Served(echo if env == "echo" else json_echo, ns.limit_mb, "grpcio", ns.src)
        warm = lambda: ws_answer(srv.url, ['{"type":"reset"}', ws_kinds(1000)[kind][1]])  # noqa: E731
        send = lambda: ws_answer(srv.url, ['{"type":"reset"}', frame])  # noqa: E731
        nbytes = len(frame.encode())
    else:
        sdk, body = mcp_kinds(size)[kind]
        srv = Served(json_echo, ns.limit_mb, "grpcio", ns.src)
        http, headers = await mcp_session(srv.url) if sdk else (None, {"content-type": "application/json"})
        if http is None:
            import httpx

            http = httpx.AsyncClient(base_url=srv.url, timeout=120, trust_env=False)
        small = mcp_kinds(1000)[kind][1]

        async def post(b: bytes) -> str:
            r = await http.post("/mcp", content=b, headers=headers)
            return f"HTTP {r.status_code} ({len(r.content)} B) {r.content[:100]!r}"

        warm = lambda: post(small)  # noqa: E731
        send = lambda: post(body)  # noqa: E731
        nbytes = len(body)
    try:
        await warm()
        await asyncio.sleep(0.3)
        grown, answer, dt = await srv.peak(send)
        return {
            "listener": listener,
            "kind": kind,
            "message_mib": round(nbytes / MiB, 2),
            "peak_growth_mib": round(grown / MiB, 1),
            "ratio": round(grown / nbytes, 1),
            "seconds": round(dt, 2),
            "answer": answer[:200],
            "alive": srv.proc.poll() is None,
        }
    finally:
        if listener == "mcp":
            await http.aclose()
        srv.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-mb", type=float, default=16.0, help="the server's --max-message-mb")
    ap.add_argument("--size-mib", type=float, default=15.0, help="the hostile message's size")
    ap.add_argument("--listeners", default="grpcio,grpclib,ws,mcp")
    ap.add_argument("--only", default="", help="only kinds whose name contains this")
    ap.add_argument("--src", default=None, help="serve this source tree (its python/src) instead of the installed one")
    ns = ap.parse_args()
    kinds = {"grpcio": grpc_kinds(1000), "grpclib": grpc_kinds(1000), "ws": ws_kinds(1000), "mcp": mcp_kinds(1000)}
    for listener in ns.listeners.split(","):
        for kind in kinds[listener]:
            if ns.only in kind:
                print(json.dumps(await measure(listener, kind, ns)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
