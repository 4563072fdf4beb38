"""Sessions across a fleet: :class:`FleetClient` places each new session on the least-loaded
server, with no load balancer in the data path.

::

    async with FleetClient(provider) as fleet:            # or a list of grpc:// URLs
        env = await fleet.open()                          # an EnvClient on the emptiest server
        r = await env.reset(seed=1)

        envs = await fleet.open_many(1024)                # spread by live load
        batch = await fleet.reset_batch(seeds=[0])        # over every open session
        batch = await fleet.step_batch(actions)           # FleetBatchResult (RFC 0002's BatchResult)

What you may rely on:

* **Placement by live load.** Each server's load comes from ``GetLoad`` (RFC 0005), polled
  every ``refresh_s``; between polls the client adds the sessions it opened and closed there
  itself, so a burst of opens spreads evenly. A new session goes to the server with the smallest fraction
  of its capacity in use; a server that is full (``RESOURCE_EXHAUSTED``), draining or
  unreachable is skipped and the open retried on the next one. ``Unavailable`` is raised only
  when no server can take the session.
* **One HTTP/2 channel per server.** Every session on a server is a stream of that server's
  channel; the session's stream goes straight to its server.
* **A dead server fails only its own sessions**, each with ``Unavailable`` (fatal) whose
  message names the server, the session and its episode id (also in ``details``). New
  sessions go elsewhere. When the server comes back, or the provider replaces it (a new
  address from :meth:`Provider.endpoints`), it rejoins at the next poll.
* Sessions are ordinary :class:`openenv.EnvClient` objects, exactly of ``client_cls`` (e.g. a
  typed client), so everything an ``EnvClient`` does works on them; what the fleet adds (the
  lost server named in errors, its count of sessions) lives in their connection, a decorator
  (:class:`openenv.client.MapErrors`) of the server's gRPC stream. :meth:`FleetClient.server_of`
  says which server a session runs on.
* **Agent vs agent across a fleet** (RFC 0012, "Fleets"). A world lives on one server, and its
  join token is valid there only. The session that creates it is placed like any other
  (``open(agent_ids=["x"])``); :meth:`FleetClient.ticket` gives a :class:`WorldTicket` (the
  join token and the server's URL; ``str()`` is one line to hand over), and another client of
  the fleet joins the same world with :meth:`FleetClient.join`, given the ticket or only the
  join token (then it asks each server until one knows the token). A join goes to the world's
  server whatever its load (joins take no capacity slot), and only to a server of the fleet:
  a ticket naming another address is refused, so the fleet's token is never sent elsewhere.

  ::

      alice = await fleet.open(agent_ids=["x"])      # creates a world, acts for "x"
      ticket = fleet.ticket(alice)                   # "TOKEN@grpc://10.0.0.7:50051"
      bob = await other_fleet.join(str(ticket))      # the same world, the free "o"
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import itertools
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from openenv.client.connection import Connection, MapErrors
from openenv.client.env import BatchResult, EnvClient
from openenv.client.grpc import GrpcConnection, open_channel
from openenv.client.load import get_load
from openenv.client.urls import parse_url
from openenv.errors import EnvError, ErrorCode, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from openenv.fleet.provider import Endpoint, Provider
from openenv.protocol import StepResult
from openenv.security import TOKEN_ENV
from openenv.v1 import environment_pb2, load_pb2

__all__ = ["FleetBatchResult", "FleetClient", "SyncFleetClient", "WorldTicket"]

_T = TypeVar("_T")
Servers = Provider | Sequence[str | Endpoint] | Callable[[], Iterable[str | Endpoint]]

# Codes with which a stream ends when its server went away (rather than answering).
_SERVER_LOST = (ErrorCode.UNAVAILABLE, ErrorCode.INTERNAL, ErrorCode.CANCELLED)


@dataclasses.dataclass
class FleetBatchResult(BatchResult):
    """A :class:`BatchResult` over sessions of many servers. ``env_ids`` are indices into
    :attr:`FleetClient.sessions`; sessions that failed are left out of ``env_ids``/``results``
    and reported in ``errors`` (index -> error), so one server's failure never hides the
    results of the others."""

    errors: dict[int, EnvError] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class WorldTicket:
    """Where a multi-agent world of a fleet is joined (RFC 0012): its ``join_token`` and the URL of
    the ``server`` it lives on. ``str()`` is ``TOKEN@URL``, one line to hand to the other side;
    :meth:`parse` reads it back (a bare token parses with ``server=""``: the fleet finds it)."""

    join_token: str
    server: str = ""

    def __str__(self) -> str:
        return f"{self.join_token}@{self.server}" if self.server else self.join_token

    @classmethod
    def parse(cls, text: str | WorldTicket) -> WorldTicket:
        """A ticket from ``TOKEN@URL`` or a bare ``TOKEN`` (``InvalidArgument`` when empty)."""
        if isinstance(text, WorldTicket):
            return text
        token, _, server = text.strip().partition("@")  # join tokens are URL-safe: never an "@"
        if not token:
            raise InvalidArgument(f"not a world ticket (TOKEN or TOKEN@URL): {text!r}")
        if server and "://" not in server:
            server = f"grpc://{server}"
        return cls(token, server)


class _Server:
    """The client's view of one server: its channel, its last load and what this client
    opened and closed there since that load was read."""

    def __init__(
        self, ep: Endpoint, channel_options: list[tuple[str, Any]], token: str | None, ca_file: str | None
    ) -> None:
        self.endpoint = ep
        self.url = ep.url
        scheme, self.target = parse_url(ep.url)
        self.secure, self.ca_file = scheme == "grpcs", ca_file
        self.token = ep.token or token  # the server's own (e.g. a container's), else the fleet's
        self.channel = open_channel(self.target, secure=self.secure, ca_file=ca_file, options=channel_options)
        self.load: load_pb2.ServerLoad | None = None
        self.up = False
        self.full = False  # refused a handshake (RESOURCE_EXHAUSTED) since the last poll
        self.error = "not polled yet"
        self.opening = 0  # handshakes in flight
        self.opened = self.closed = 0  # sessions this client opened / closed there, ever
        self._base = (0, 0)  # (opened, closed) when the last load was asked for
        self.sessions: set[EnvClient] = set()
        self.listed = True  # still among the provider's endpoints

    def estimate(self) -> int:
        """Sessions open there: the last load plus this client's opens and closes since (opens
        in flight included). It may overcount a handshake that was in flight during the poll,
        never undercount, until the next poll."""
        base = self.load.sessions_open if self.load is not None else 0
        return base + (self.opened - self._base[0]) - (self.closed - self._base[1]) + self.opening

    def usage(self) -> float:
        """Fraction of capacity in use."""
        ld = self.load
        if ld is None or ld.max_sessions == 0:
            return float("inf")
        return self.estimate() / ld.max_sessions

    def has_room(self) -> bool:
        ld = self.load
        return self.up and not self.full and ld is not None and not ld.draining and self.estimate() < ld.max_sessions


class _FleetSession(MapErrors):
    """A fleet session's connection (a decorator of its :class:`GrpcConnection`): an error that
    ends the session because its server went away names the server and the episode
    (:meth:`FleetClient._session_failed`), and closing it tells the fleet the session is gone.
    The episode id is read from the answers of ``reset`` and ``step`` as they pass."""

    def __init__(self, inner: Connection, fleet: FleetClient, server: _Server) -> None:
        super().__init__(inner, self._lost)
        self.fleet, self.server = fleet, server
        self.episode_id = ""
        self.joined = False  # a join of a world (RFC 0012): it takes no capacity slot there

    def _lost(self, e: EnvError) -> EnvError:
        return self.fleet._session_failed(self, e)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        resp = await super().request(req, timeout)
        kind = resp.WhichOneof("kind")
        if kind == "step":
            self.episode_id = resp.step.time_step.episode_id
        elif kind == "reset":
            self.episode_id = resp.reset.time_step.episode_id
        return resp

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self.fleet._forget(self)

    async def abort(self) -> None:
        try:
            await super().abort()
        finally:
            self.fleet._forget(self)

    def sibling(self) -> Connection | None:
        """A fork's connection: its own channel to the same server, its errors named the same
        way; the fleet does not count it among its sessions."""
        make = getattr(self.inner, "sibling", None)
        return None if make is None else _FleetSession(make(), self.fleet, self.server)


class FleetClient:
    """Async client of a fleet of environment servers; see the module's docstring.

    ``servers``: a :class:`Provider` (its :meth:`~Provider.endpoints` are re-read at every
    poll), a list of ``grpc://`` URLs, or a callable returning them. ``client_cls`` and
    ``client_kwargs`` make each session's client (``options``, ``timeout``, ...; ``resume``
    defaults to False here: a lost server's sessions fail at once, naming their episodes).
    """

    def __init__(
        self,
        servers: Servers,
        *,
        client_cls: type[EnvClient] = EnvClient,
        refresh_s: float = 1.0,
        load_timeout: float = 5.0,
        connect_timeout: float = 30.0,
        **client_kwargs: Any,
    ) -> None:
        self._discover = _discoverer(servers)
        self.client_cls = client_cls
        self.refresh_s, self.load_timeout, self.connect_timeout = refresh_s, load_timeout, connect_timeout
        self.client_kwargs = client_kwargs
        # RFC 0003: servers that require a token get an endpoint's own (a docker provider's
        # containers), else ``token=`` (default $OPENENV_TOKEN); grpcs:// servers are
        # verified against ``ca_file=``. Both are also the sessions' client keywords.
        self._token: str | None = client_kwargs.get("token") or os.environ.get(TOKEN_ENV) or None
        self._ca_file: str | None = client_kwargs.get("ca_file")
        self.servers: dict[str, _Server] = {}
        self.sessions: list[EnvClient] = []
        self._placed: dict[_FleetSession, EnvClient] = {}  # open sessions by their connection
        self._poller: asyncio.Task[None] | None = None
        self._rr = itertools.count()
        self._channel_options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            # A restarted server on the same address is found again quickly.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> FleetClient:
        """Find the servers and read their loads; start polling. Idempotent."""
        if self._poller is None:
            await self.refresh()
            self._poller = asyncio.ensure_future(self._poll_forever())
        return self

    async def close(self) -> None:
        """Close every open session, stop polling, close the channels."""
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        await asyncio.gather(*(s.close() for s in list(self.sessions)), return_exceptions=True)
        for srv in self.servers.values():
            await srv.channel.close()
        self.servers.clear()

    async def __aenter__(self) -> FleetClient:
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def sync(self) -> SyncFleetClient:
        """A blocking view of this client (its loop in a private thread)."""
        return SyncFleetClient(self)

    # ------------------------------------------------------------------ servers and loads

    async def refresh(self) -> None:
        """Re-read the endpoints and poll every server's load now."""
        endpoints = await asyncio.get_running_loop().run_in_executor(None, self._discover)
        seen = set()
        for ep in endpoints:
            seen.add(ep.url)
            if ep.url not in self.servers:
                self.servers[ep.url] = _Server(ep, self._channel_options, self._token, self._ca_file)
            self.servers[ep.url].listed = True
        for url, srv in list(self.servers.items()):
            if url not in seen:
                srv.listed, srv.up = False, False
                srv.error = "no longer an endpoint of the fleet"
                if not srv.sessions:
                    del self.servers[url]
                    await srv.channel.close()
        await asyncio.gather(*(self._poll(s) for s in self.servers.values() if s.listed))

    async def _poll(self, srv: _Server) -> None:
        base = (srv.opened, srv.closed)
        try:
            load = await get_load(srv.channel, self.load_timeout, target=srv.url, token=srv.token)
        except EnvError as e:
            srv.up, srv.error = False, e.message
            return
        srv.load, srv._base = load, base
        srv.up, srv.full, srv.error = True, False, ""

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            with contextlib.suppress(Exception):  # a failing discovery is retried next round
                await self.refresh()

    def loads(self) -> dict[str, load_pb2.ServerLoad | None]:
        """The last load read from each server (None: unreachable), by URL."""
        return {url: (s.load if s.up else None) for url, s in self.servers.items()}

    def _pick(self, exclude: set[str]) -> _Server | None:
        candidates = [s for s in self.servers.values() if s.listed and s.url not in exclude and s.has_room()]
        if not candidates:
            return None
        best = min(s.usage() for s in candidates)
        ties = [s for s in candidates if s.usage() <= best + 1e-9]
        return ties[next(self._rr) % len(ties)]  # equal loads: take turns

    # ------------------------------------------------------------------ sessions

    async def open(self, **overrides: Any) -> EnvClient:
        """Open a session on the least-loaded server that can take it (``overrides`` replace
        the client keywords for this session). Raises ``Unavailable`` when none can."""
        if self._poller is None:
            await self.connect()
        tried: dict[str, str] = {}
        while True:
            srv = self._pick(set(tried))
            if srv is None:
                await self.refresh()  # the loads may be stale: read them once more
                srv = self._pick(set(tried))
            if srv is None:
                why = "; ".join(f"{u}: {m}" for u, m in tried.items()) or "; ".join(
                    f"{s.url}: {s.error or 'full'}" for s in self.servers.values()
                )
                raise Unavailable(f"no server of the fleet can take a session ({why or 'no servers'})", fatal=True)
            try:
                return await self._open_on(srv, overrides)
            except EnvError as e:
                if e.code == ErrorCode.RESOURCE_EXHAUSTED:
                    srv.full = True  # until the next poll says otherwise
                elif e.code in _SERVER_LOST or e.code == ErrorCode.DEADLINE_EXCEEDED:
                    srv.up, srv.error = False, e.message
                else:
                    raise  # the session's own fault (bad options...): trying elsewhere would not help
                tried[srv.url] = f"{e.code.name}: {e.message}"

    async def _open_on(self, srv: _Server, overrides: Mapping[str, Any], joined: bool = False) -> EnvClient:
        """A session on ``srv`` (``joined``: a join of a world there, not counted against its
        capacity); the handshake's error is raised as it is."""
        srv.opening += 0 if joined else 1
        kwargs = {**self.client_kwargs, **overrides}
        kwargs.setdefault("connect_timeout", self.connect_timeout)
        # A fleet routes around a lost server (new sessions go elsewhere), so a session whose
        # server went away is reported at once instead of being waited on for the resume
        # grace period (RFC 0006); pass resume=True to ride out drops of a live server.
        kwargs.setdefault("resume", False)
        if srv.token:  # the server's token: the session's forks open their own connections with it
            kwargs["token"] = srv.token
        conn = GrpcConnection(
            srv.target,
            url=srv.url,
            channel=srv.channel,
            token=srv.token,
            secure=srv.secure,
            ca_file=srv.ca_file,
            client_cert=kwargs.get("client_cert"),
        )
        session = _FleetSession(conn, self, srv)
        session.joined = joined
        client = self.client_cls(srv.url, connection=session, **kwargs)
        try:
            await client.connect()
        finally:
            srv.opening -= 0 if joined else 1
        srv.opened += 0 if joined else 1
        srv.sessions.add(client)
        self.sessions.append(client)
        self._placed[session] = client
        return client

    # ------------------------------------------------------------------ worlds (RFC 0012)

    def ticket(self, client: EnvClient) -> WorldTicket:
        """Where another client joins the world of ``client``, an open session of this fleet in
        a multi-agent environment: its join token and its server's URL (``FailedPrecondition``
        for a session of a single-agent environment, or of a world that takes no joins)."""
        url = self.server_of(client)
        if not client.world.world_id:
            raise FailedPrecondition(f"session {client.session_id} is not in a multi-agent world: nothing to join")
        if not client.world.join_token:
            raise FailedPrecondition(f"the world {client.world.world_id} takes no joins (joinable = False)")
        return WorldTicket(client.world.join_token, url)

    async def join(self, ticket: str | WorldTicket, agent_ids: Sequence[str] = (), **overrides: Any) -> EnvClient:
        """Join a world of this fleet, acting for ``agent_ids`` (empty: every free agent), from a
        :class:`WorldTicket` (or its ``TOKEN@URL`` text) or a bare join token. With the server
        given, the join goes there, whatever its load (joins take no capacity slot); a server
        that is not one of this fleet's is ``InvalidArgument``. With a token alone, each
        server that answered its last load poll is asked in turn until one knows it
        (``NotFound``, naming each server's answer, when none does).
        The world's refusals (agent taken, none left, unknown agent) are raised as they are."""
        if self._poller is None:
            await self.connect()
        t = WorldTicket.parse(ticket)
        kw = {**overrides, "join_token": t.join_token, "agent_ids": tuple(agent_ids)}
        if t.server:
            srv = self.servers.get(t.server)
            if srv is None:
                await self.refresh()  # a server that joined the fleet since the last poll
                srv = self.servers.get(t.server)
            if srv is None or not srv.listed:
                raise InvalidArgument(
                    f"{t.server} is not a server of this fleet ({', '.join(self.servers) or 'no servers'}): "
                    "a ticket is joined only on the fleet's own servers"
                )
            return await self._open_on(srv, kw, joined=True)
        asked: dict[str, str] = {}
        for srv in list(self.servers.values()):
            if not srv.listed:
                continue
            if not srv.up:  # unreachable at the last poll: its worlds cannot be joined now
                asked[srv.url] = f"down: {srv.error}"
                continue
            try:
                return await self._open_on(srv, kw, joined=True)
            except EnvError as e:
                if e.code != ErrorCode.NOT_FOUND and e.code not in (*_SERVER_LOST, ErrorCode.DEADLINE_EXCEEDED):
                    raise  # the world is there and refused: taken agent, none left, ...
                asked[srv.url] = f"{e.code.name}: {e.message}"
        why = "; ".join(f"{u}: {m}" for u, m in asked.items()) or "no servers"
        raise NotFound(f"no server of the fleet has a world with that join token ({why})", fatal=True)

    async def open_many(self, n: int, **overrides: Any) -> list[EnvClient]:
        """Open ``n`` sessions at once, spread by load. All or none: if one cannot be opened
        the others are closed and its error raised."""
        results = await asyncio.gather(*(self.open(**overrides) for _ in range(n)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(r.close() for r in results if isinstance(r, EnvClient)), return_exceptions=True)
            raise errors[0]
        return [r for r in results if isinstance(r, EnvClient)]

    def server_of(self, client: EnvClient) -> str:
        """The URL of the server an open session of this fleet runs on (``KeyError`` for a
        client that is not one: closed, a fork, or another fleet's)."""
        conn = client.connection
        if not isinstance(conn, _FleetSession) or self._placed.get(conn) is not client:
            raise KeyError(f"{client!r} is not an open session of this fleet")
        return conn.server.url

    def _forget(self, session: _FleetSession) -> None:
        """``session``'s connection closed: the fleet no longer counts it (a fork's: no-op)."""
        client = self._placed.pop(session, None)
        if client is None:
            return
        srv = session.server
        if client in srv.sessions and not session.joined:
            srv.closed += 1
        srv.sessions.discard(client)
        with contextlib.suppress(ValueError):
            self.sessions.remove(client)

    def _session_failed(self, session: _FleetSession, e: EnvError) -> EnvError:
        srv = session.server
        if not (e.fatal and e.code in _SERVER_LOST):
            return e  # e.g. a client-side timeout: the stream is still there
        srv.up, srv.error = False, e.message
        details = {"server": srv.url, "session_id": session.session_id, "episode_id": session.episode_id}
        return Unavailable(
            f"server {srv.url} went away: session {session.session_id or '?'} "
            f"(episode {session.episode_id or 'none'}) is lost: {e.message}",
            details=details,
            fatal=True,
        )

    # ------------------------------------------------------------------ vectorised

    def _chosen(self, indices: Sequence[int]) -> list[int]:
        ids = list(indices) if indices else list(range(len(self.sessions)))
        bad = [i for i in ids if not 0 <= i < len(self.sessions)]
        if bad:
            raise IndexError(f"session indices {bad} out of range: {len(self.sessions)} sessions are open")
        return ids

    async def _batch(
        self, ids: list[int], call: Callable[[int, EnvClient], Awaitable[StepResult[Any]]]
    ) -> FleetBatchResult:
        sessions = [self.sessions[i] for i in ids]
        outs = await asyncio.gather(*(call(k, s) for k, s in enumerate(sessions)), return_exceptions=True)
        result = FleetBatchResult([], [], {})
        for i, out in zip(ids, outs, strict=True):
            if isinstance(out, EnvError):
                result.errors[i] = out
            elif isinstance(out, BaseException):
                raise out
            else:
                result.env_ids.append(i)
                result.results.append(out)
        return result

    async def reset_batch(
        self,
        seeds: Sequence[int] = (),
        indices: Sequence[int] = (),
        options: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> FleetBatchResult:
        """Reset sessions (all open ones by default, by index into :attr:`sessions`), each on
        its own server, concurrently. ``seeds`` as RFC 0002: none, one ``s`` (the k-th reset
        session gets ``s + k``), or one per session."""
        ids = self._chosen(indices)
        if len(seeds) not in (0, 1, len(ids)):
            raise ValueError(f"{len(seeds)} seeds for {len(ids)} sessions: give 0, 1 or one per session")
        per: list[int | None] = (
            [None] * len(ids)
            if not seeds
            else [seeds[0] + k for k in range(len(ids))]
            if len(seeds) == 1
            else list(seeds)
        )
        return await self._batch(ids, lambda k, s: s.reset(per[k], None, options, **kw))

    async def step_batch(self, actions: Sequence[Any], indices: Sequence[int] = (), **kw: Any) -> FleetBatchResult:
        """Step sessions (all open ones by default) with one action each, concurrently."""
        ids = self._chosen(indices)
        if len(actions) != len(ids):
            raise ValueError(f"{len(actions)} actions for {len(ids)} sessions")
        return await self._batch(ids, lambda k, s: s.step(actions[k], **kw))


def _discoverer(servers: Servers) -> Callable[[], list[Endpoint]]:
    def as_endpoints(items: Iterable[str | Endpoint]) -> list[Endpoint]:
        out = []
        for k, it in enumerate(items):
            if isinstance(it, Endpoint):
                out.append(it)
            else:
                scheme, _ = parse_url(it)
                if scheme != "grpc":
                    raise ValueError(f"a fleet speaks gRPC: {it!r} is not a grpc:// URL")
                out.append(Endpoint(f"server-{k}", it if "://" in it else f"grpc://{it}"))
        return out

    if isinstance(servers, Provider):
        return servers.endpoints
    if callable(servers):
        fn = servers
        return lambda: as_endpoints(fn())
    fixed = as_endpoints(servers)
    return lambda: list(fixed)


class SyncFleetClient:
    """Blocking view of a :class:`FleetClient`: sessions come back as blocking
    :class:`_SyncSession` objects sharing the fleet client's private event loop."""

    def __init__(self, fleet: FleetClient) -> None:
        self.fleet = fleet
        self._cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    def __enter__(self) -> SyncFleetClient:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def connect(self) -> SyncFleetClient:
        if self._portal is None:
            self._cm = cm = start_blocking_portal("asyncio")
            self._portal = portal = cm.__enter__()
            try:
                portal.call(self.fleet.connect)
            except BaseException:
                cm.__exit__(None, None, None)
                self._portal = self._cm = None
                raise
        return self

    def close(self) -> None:
        if self._portal is not None and self._cm is not None:
            try:
                self._portal.call(self.fleet.close)
            finally:
                self._cm.__exit__(None, None, None)
                self._portal = self._cm = None

    def _run(self, fn: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any) -> _T:
        if self._portal is None:
            raise FailedPrecondition("not connected: use `with fleet.sync() as fleet:` or call connect()")
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    def open(self, **overrides: Any) -> _SyncSession:
        return _SyncSession(self, self._run(self.fleet.open, **overrides))

    def open_many(self, n: int, **overrides: Any) -> list[_SyncSession]:
        return [_SyncSession(self, c) for c in self._run(self.fleet.open_many, n, **overrides)]

    def reset_batch(self, seeds: Sequence[int] = (), indices: Sequence[int] = (), **kw: Any) -> FleetBatchResult:
        return self._run(self.fleet.reset_batch, seeds, indices, **kw)

    def step_batch(self, actions: Sequence[Any], indices: Sequence[int] = (), **kw: Any) -> FleetBatchResult:
        return self._run(self.fleet.step_batch, actions, indices, **kw)

    def refresh(self) -> None:
        self._run(self.fleet.refresh)

    def ticket(self, session: _SyncSession | EnvClient) -> WorldTicket:
        return self.fleet.ticket(session.client if isinstance(session, _SyncSession) else session)

    def join(self, ticket: str | WorldTicket, agent_ids: Sequence[str] = (), **overrides: Any) -> _SyncSession:
        return _SyncSession(self, self._run(self.fleet.join, ticket, agent_ids, **overrides))

    def loads(self) -> dict[str, load_pb2.ServerLoad | None]:
        return self.fleet.loads()


class _SyncSession:
    """One fleet session, blocking: ``reset``, ``step``, ``state``, ``call_tool``, ``close``."""

    def __init__(self, owner: SyncFleetClient, client: EnvClient) -> None:
        self._owner, self.client = owner, client

    @property
    def server(self) -> str:
        """The URL of the server this session runs on."""
        return self._owner.fleet.server_of(self.client)

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.client, name)
        if not inspect.iscoroutinefunction(fn):
            return fn
        return functools.partial(self._owner._run, fn)
