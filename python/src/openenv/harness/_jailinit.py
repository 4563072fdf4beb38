"""The first program in the agent's jail: the runner's loopback server, brought inside, then the agent.

Run by file path with the runner's Python (``-I -S``: the standard library only, nothing of the
agent's workspace or environment imported)::

    python -I -S _jailinit.py PORT SOCKET -- AGENT ARGV...

The jail has a network namespace of its own, so the host's loopback (the environment server,
every other local service) is out of the agent's reach. This program listens on the jail's
own ``127.0.0.1:PORT``, the port the runner's server has outside, and relays each connection
byte for byte to the UNIX socket ``SOCKET``, where the runner serves the same application:
the agent's configured URLs (capture proxy, tool relay, MCP) work unchanged. It then runs the
agent and exits with its status (128 + N when a signal N ended it); whatever the agent left
running dies with the jail's PID namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

CHUNK = 64 * 1024


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()  # a half-close is passed on: the other direction may still be talking
    except (OSError, RuntimeError):
        writer.close()


async def _relay(socket_path: str, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
    try:
        up_r, up_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        down_w.close()
        return
    try:
        await asyncio.gather(_pipe(down_r, up_w), _pipe(up_r, down_w))
    finally:
        for w in (up_w, down_w):
            with contextlib.suppress(OSError, RuntimeError):
                w.close()


async def _main(port: int, socket_path: str, argv: list[str]) -> int:
    server = await asyncio.start_server(
        lambda r, w: _relay(socket_path, r, w), "127.0.0.1", port, reuse_address=True, backlog=512
    )
    proc = await asyncio.create_subprocess_exec(*argv)  # stdio, environment and directory: ours
    code = await proc.wait()
    # No wait for open connections: a process the agent left behind may hold one, and it dies
    # with the jail anyway.
    server.close()
    return code if code >= 0 else 128 - code


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        print("usage: _jailinit.py PORT SOCKET -- ARGV...", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(_main(int(args[0]), args[1], args[3:])))


if __name__ == "__main__":
    main()
