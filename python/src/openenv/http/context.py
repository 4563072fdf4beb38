"""What the HTTP side's route handlers need of the application: :class:`AppContext`.

The handlers of ``/mcp`` (:mod:`openenv.http.mcp`), ``/ws`` (:mod:`openenv.http.ws`) and the
stateless routes (:mod:`openenv.http.stateless`) are given the application that routes to them
(:class:`openenv.http.app.BridgeApp`); they are typed by this protocol instead of by that class,
so the application imports its handlers and no handler imports the application back (no import
circle). :class:`SessionRegistry` (the sessions of ``openenv/session/create``) lives here for
the same reason: the application holds one, ``/mcp`` and ``/ws`` use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from openenv.errors import EnvError, FailedPrecondition, InvalidArgument
from openenv.http.backend import Backend, EngineSession, spawn

__all__ = ["AppContext", "SessionRegistry"]


class AppContext(Protocol):
    """The application, as its route handlers see it (:class:`openenv.http.app.BridgeApp`)."""

    #: The sessions' backend (a local engine, or a remote server through the bridge).
    backend: Backend
    #: The sessions of ``openenv/session/create`` (``/ws?session_id=`` attaches to them).
    registry: SessionRegistry
    #: The largest message accepted and sent (requests, replies, WebSocket messages).
    max_message_bytes: int
    #: The protocol version the application speaks, as ``openenv.hello`` tells it.
    protocol_version: str
    #: The ``EnvironmentInfo`` serialized and base64-encoded (``openenv.hello``).
    info_b64: str
    #: The listener's :class:`~openenv.security.BrowserPolicy` (set by the HTTP listener).
    browser: Any
    #: The worker siblings (:class:`openenv.workers.WorkerPeers`) of a server of several, or None.
    peers: Any

    async def mcp_http(self) -> Any:
        """The MCP SDK's Streamable HTTP handler of ``POST /mcp`` (made at its first use)."""
        ...


class SessionRegistry:
    """Sessions created over HTTP (``openenv/session/create`` on ``POST /mcp``), which a
    ``/ws?session_id=`` connection may attach to (:meth:`EngineSession.relay`: its requests
    go through the session's own engine stream). Idle reaping and drain close them."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.sessions: dict[str, EngineSession] = {}
        self.attached: set[str] = set()
        self.pending_close: set[str] = set()

    async def create(self, options: dict[str, Any] | None = None) -> EngineSession:
        s = await self.backend.open(options or {}, "openenv-mcp-http")
        self.sessions[s.id] = s
        s.on_terminate(self._expiry(s.id))
        return s

    def _expiry(self, sid: str) -> Callable[[EnvError], None]:
        def expire(err: EnvError) -> None:
            spawn(self.close(sid, force=True))

        return expire

    def get(self, sid: str) -> EngineSession:
        s = self.sessions.get(sid)
        if s is None:
            raise InvalidArgument(f"Unknown session_id: {sid}")
        return s

    def attach(self, sid: str) -> EngineSession:
        s = self.sessions.get(sid)
        if s is None:
            raise FailedPrecondition(f"Unknown session_id: {sid}", fatal=True)
        if sid in self.attached:
            raise FailedPrecondition(f"Session {sid} already has an attached WebSocket", fatal=True)
        self.attached.add(sid)
        return s

    def detach(self, sid: str) -> None:
        self.attached.discard(sid)
        s = self.sessions.get(sid)
        if s is None:
            return
        if sid in self.pending_close or s.ended:  # closing, or ended by the server while attached
            spawn(self.close(sid, force=True))
        else:
            s.on_terminate(self._expiry(sid))

    async def close(self, sid: str, *, force: bool = False) -> dict[str, Any]:
        """Close a session; one with an attached WebSocket is closed when it detaches."""
        if sid not in self.sessions:
            raise InvalidArgument(f"Unknown session_id: {sid}")
        if sid in self.attached and not force:
            self.pending_close.add(sid)
            return {"session_id": sid, "closed": False, "closing": True}
        s = self.sessions.pop(sid)
        self.pending_close.discard(sid)
        await s.close()
        return {"session_id": sid, "closed": True}

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            await self.close(sid, force=True)
