"""Run an environment in this process and talk to it through a real client: no socket, no
server process. For unit tests of environments and for notebooks.

::

    import openenv.testing

    async def test_echo():
        async with openenv.testing.client(Echo) as env:          # an EnvClient, connected
            r = await env.reset(seed=1)
            r = await env.step(openenv.CallToolAction("echo_message", {"message": "hi"}))

    def test_echo_blocking():
        with openenv.testing.sync_client(Echo, max_sessions=4) as env:   # a SyncEnvClient
            env.reset()

    async with openenv.testing.InProcessServer(GridWorld, max_sessions=8) as server:
        async with server.client(VectorEnvClient, num_envs=4) as envs, server.client() as one:
            ...

What you may rely on:

* The environment is served by the same protocol engine as ``openenv serve``
  (:class:`openenv.engine.Engine` over a :class:`~openenv.runtime.SessionManager`): the
  handshake, every request kind, vectorised sessions, forks and snapshots, limits, tasks,
  rubrics, idle timeouts and capacity refusals behave as over gRPC. Messages are encoded
  and decoded as on the wire (:class:`openenv.client.inprocess.InProcessConnection`), so a
  test that passes here exercises the payload codecs a socket would.
* ``**runtime_options`` are :class:`openenv.runtime.EnvironmentRuntime`'s keywords (``max_sessions``,
  ``idle_timeout_s``, ``max_message_bytes``, ``tools_only``, ``max_num_envs``,
  ``resume_grace_s``, ``isolation``, ``max_sessions_per_client``, ...) and the listener's
  ``handshake_timeout_s``, ``tokens`` (an :class:`openenv.security.TokenSet`) and
  ``max_pipelined_requests``, with the defaults of ``openenv serve``.
* Clients are ordinary :class:`openenv.EnvClient`/:class:`openenv.VectorEnvClient` objects
  (of ``client_cls``, e.g. a typed client); their URL is ``inprocess://<class name>``.
* Leaving the ``async with``/``with`` block closes the client, then drains the server and
  closes every session and environment it still holds.
* Everything runs on one event loop: the caller's for :func:`client` and
  :class:`InProcessServer`, a private thread's for :func:`sync_client` (so it works where a
  loop already runs, as in Jupyter).

What it does not show: a transport's own behaviour (TLS, keepalive, resume after a dropped
connection, message framing, the HTTP side): test those over a real listener.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, TypeVar

from anyio.from_thread import start_blocking_portal

from openenv.client.env import BaseEnvClient, EnvClient
from openenv.client.inprocess import InProcessConnection
from openenv.client.options import ConnectionOptions
from openenv.client.sync import SyncEnvClient
from openenv.engine import DEFAULT_HANDSHAKE_TIMEOUT_S, Engine
from openenv.runtime import pipelined
from openenv.runtime.environment import Environment
from openenv.runtime.session import EnvironmentRuntime, SessionManager
from openenv.security import SecuritySettings, TokenSet
from openenv.settings import ServerSettings

__all__ = ["InProcessConnection", "InProcessServer", "client", "sync_client"]

C = TypeVar("C", bound=BaseEnvClient)
EnvFactory = type[Environment] | Callable[..., Environment]


class InProcessServer:
    """An environment served in this process by the protocol engine, for in-process clients.

    ``env``: an :class:`openenv.Environment` subclass or a factory of instances; the keywords
    are described in the module docstring. Use it as an async context manager (or ``await
    start()`` / ``await stop()``) on the loop its clients run on.
    """

    def __init__(
        self,
        env: EnvFactory,
        *,
        handshake_timeout_s: float | None = DEFAULT_HANDSHAKE_TIMEOUT_S,
        tokens: TokenSet | None = None,
        max_pipelined_requests: int = pipelined.DEFAULT_MAX_PIPELINED_REQUESTS,
        **runtime_options: Any,
    ) -> None:
        self.runtime = EnvironmentRuntime(env, **runtime_options)
        self.manager = SessionManager(self.runtime)
        # The engine advertises what these settings make it enforce, as over a listener.
        limits = self.runtime.limits.replace(
            handshake_timeout_s=handshake_timeout_s, max_pipelined_requests=max(0, max_pipelined_requests)
        )
        settings = ServerSettings(limits=limits, security=SecuritySettings(tokens=tokens or TokenSet()))
        self.engine = Engine(self.manager, settings)
        self._started = False

    async def start(self) -> InProcessServer:
        """Start the idle reaper (on the running loop). Idempotent."""
        if not self._started:
            self.manager.start_reaper()
            self._started = True
        return self

    async def stop(self, grace_s: float = 1.0) -> None:
        """Drain (requests in progress finish, up to ``grace_s``; sessions end with
        ``UNAVAILABLE``) and close every session and environment."""
        if self._started:
            self._started = False
            await self.manager.drain(grace_s)
            await self.manager.shutdown()

    async def __aenter__(self) -> InProcessServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def connection(self, options: ConnectionOptions | None = None, **kwargs: Any) -> InProcessConnection:
        """A new, unopened connection to this server (keywords: :class:`InProcessConnection`'s)."""
        return InProcessConnection(self.engine, options=options, **kwargs)

    def client(self, client_cls: type[C] = EnvClient, /, **kwargs: Any) -> C:  # type: ignore[assignment]
        """A new, unconnected client of this server: ``client_cls(**kwargs)`` (``num_envs``
        for a :class:`~openenv.VectorEnvClient`, handshake ``options``, ``timeout``,
        ``connection_options`` (its ``token`` is presented to a server with ``tokens``), ...)."""
        opts = kwargs.pop("connection_options", None) or ConnectionOptions()
        opts = opts.merged(token=kwargs.pop("token", None), max_message_bytes=kwargs.pop("max_message_bytes", None))
        conn = InProcessConnection(self.engine, options=opts)
        return client_cls(conn.url, connection=conn, connection_options=opts, **kwargs)


@contextlib.asynccontextmanager
async def client(
    env: EnvFactory,
    /,
    *,
    client_cls: type[BaseEnvClient] = EnvClient,
    client_kwargs: Mapping[str, Any] | None = None,
    **runtime_options: Any,
) -> AsyncIterator[Any]:
    """A connected client (``client_cls``, default :class:`~openenv.EnvClient`) of ``env``
    served in this process; ``client_kwargs`` go to the client, ``runtime_options`` to the
    server (the module docstring). The server lives as long as the block."""
    async with InProcessServer(env, **runtime_options) as server:
        async with server.client(client_cls, **dict(client_kwargs or {})) as connected:
            yield connected


@contextlib.contextmanager
def sync_client(
    env: EnvFactory,
    /,
    *,
    client_cls: type[BaseEnvClient] = EnvClient,
    client_kwargs: Mapping[str, Any] | None = None,
    **runtime_options: Any,
) -> Iterator[SyncEnvClient]:
    """:func:`client`, blocking: a connected :class:`~openenv.client.SyncEnvClient` whose
    event loop (and the server's) runs in a private thread."""
    with start_blocking_portal("asyncio") as portal:
        # Made on the portal's loop: the server's tasks and its clients' share it.
        server: InProcessServer = portal.call(_started, env, runtime_options)
        try:
            with SyncEnvClient(server.client(client_cls, **dict(client_kwargs or {})), portal=portal) as connected:
                yield connected
        finally:
            portal.call(server.stop)


async def _started(env: EnvFactory, runtime_options: dict[str, Any]) -> InProcessServer:
    return await InProcessServer(env, **runtime_options).start()
