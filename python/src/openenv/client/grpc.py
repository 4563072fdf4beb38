"""The protocol's native transport: one gRPC ``Session`` stream per session (grpc.aio).

Requests carry increasing ids; a reader task matches answers to them, so calls may be
pipelined and a client-side timeout never shifts later answers. Pipelined requests are
coalesced (RFC 0009) when the server offers it: a request goes out at once when no earlier
message awaits its answer (lock-step use waits for nothing, and there is no timer); requests
issued while one does are held until that answer arrives, then go out together as one
``pipelined`` message. The server applies a session's requests strictly in order, so a held
request would not have started earlier anyway; it pays one trip from client to server.

Closing ends the stream the way the protocol does (close request, half-close, read to the end) so that every gRPC
operation completes on this event loop before ``close`` returns: a loop closed right after
(``asyncio.run`` per episode) is owed nothing (see python/tests/test_event_loops.py).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Any

import grpc

from openenv.client.infocache import info_of, known_digest
from openenv.client.options import DEFAULT_MAX_MESSAGE_BYTES, ConnectionOptions
from openenv.errors import (
    Aborted,
    ClientTimeout,
    EnvError,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
)
from openenv.observability import tracing
from openenv.security import grpc_channel_credentials
from openenv.v1 import environment_pb2, environment_pb2_grpc, multiagent_pb2

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "GrpcConnection", "channel_ready", "open_channel", "token_metadata"]


def open_channel(
    target: str,
    *,
    secure: bool = False,
    ca_file: str | None = None,
    options: list[tuple[str, Any]] | None = None,
    client_cert: tuple[str, str] | None = None,
) -> grpc.aio.Channel:
    """A grpc.aio channel to ``host:port``; ``secure``: TLS, verifying the server against
    ``ca_file`` (default: gRPC's bundled roots) and presenting ``client_cert`` (certificate
    and key files) to a server that requires one (mutual TLS)."""
    if secure:
        cert, key = client_cert or (None, None)
        return grpc.aio.secure_channel(target, grpc_channel_credentials(ca_file, cert, key), options=options)
    return grpc.aio.insecure_channel(target, options=options)


def token_metadata(token: str | None) -> tuple[tuple[str, str], ...] | None:
    """The call metadata carrying ``token`` (RFC 0003), or None without one."""
    return (("authorization", f"Bearer {token}"),) if token else None


END_GRACE_S = 5.0  # how long closing waits for the server to end the stream before cancelling it
# How a stream ends when its connection drops (not a status the server chose): worth a resume.
_TRANSPORT_CODES = frozenset({14, 1, 13, 2})  # UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN
# What grpc's client reports, in place of the server's status, when a call ends while one
# of its own writes is still in flight (the write fails; the status that ended the call is
# lost). The server did end the stream, so the session is gone for the same reason a
# dropped connection loses it: UNAVAILABLE, not a server bug.
_CORE_WRITE_FAILURE = "Internal error from Core"
# Bytes a pipelined message adds to its requests' own: per request a tag and a length (<= 6),
# and the envelope's id, tag and length (<= 32, rounded up).
_ITEM_OVERHEAD, _ENVELOPE_OVERHEAD = 6, 32


def stream_end_error(code: grpc.StatusCode, details: str | None) -> EnvError:
    """The fatal error for a Session stream that ended with ``code`` (not OK)."""
    if code is grpc.StatusCode.INTERNAL and details == _CORE_WRITE_FAILURE:
        return Unavailable("the stream ended while a request was being sent (its status was lost)", fatal=True)
    return EnvError.from_code(code.value[0], details or code.name, fatal=True)


async def channel_ready(channel: grpc.aio.Channel, timeout: float) -> bool:
    """Wait until ``channel`` is connected; on timeout close it and return False.

    The pending connectivity watch is not cancelled but resolved by closing the channel,
    and awaited: a watch merely cancelled would complete later, on a loop that may be gone."""
    ready = asyncio.ensure_future(channel.channel_ready())
    try:
        done, _ = await asyncio.wait({ready}, timeout=timeout)
    except BaseException:
        ready.cancel()
        await channel.close()
        raise
    if done:
        ready.result()
        return True
    await channel.close()  # the channel goes to SHUTDOWN, which resolves the watch
    await asyncio.wait({ready}, timeout=END_GRACE_S)
    if ready.done():
        if not ready.cancelled():
            ready.exception()  # retrieved: closing the channel may end the watch with an error
    else:
        ready.cancel()
    return False


class GrpcConnection:
    """One ``EnvironmentService.Session`` stream; a :class:`~openenv.client.Connection`."""

    def __init__(
        self,
        target: str,
        *,
        options: ConnectionOptions | None = None,
        max_message_bytes: int | None = None,
        keepalive_s: float | None = None,
        url: str | None = None,
        token: str | None = None,
        secure: bool = False,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        channel: grpc.aio.Channel | None = None,
    ) -> None:
        """``options``: the connection's settings (:class:`~openenv.client.ConnectionOptions`);
        the keywords ``max_message_bytes``, ``keepalive_s``, ``token``, ``ca_file`` and
        ``client_cert`` replace its fields when given. ``token``: the bearer token sent with
        every stream (RFC 0003); ``secure``: TLS, verifying the server against ``ca_file`` and
        presenting ``client_cert`` (mutual TLS).
        ``channel``: an open channel to ``target`` to multiplex this session's stream on
        (one HTTP/2 connection for many sessions, as :class:`openenv.fleet.FleetClient` does);
        its owner closes it, and chose its security (``secure``, ``ca_file`` and ``client_cert``
        then only apply to the channels a resume opens when the shared one is gone). Without it
        the connection opens and closes a channel of its own."""
        self.target = target
        self.options = (options or ConnectionOptions()).merged(
            max_message_bytes=max_message_bytes,
            keepalive_s=keepalive_s,
            token=token,
            ca_file=ca_file,
            client_cert=client_cert,
        )
        self.url = url or f"{'grpcs' if secure else 'grpc'}://{target}"
        self.secure = secure
        self.max_message_bytes = self.options.max_message_bytes
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self.world = multiagent_pb2.WorldInfo()
        self._channel: grpc.aio.Channel | None = None
        self._shared_channel = channel
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[environment_pb2.SessionResponse]] = {}
        self._next_id = 0
        self._ended: EnvError | None = None
        self._write_lock = asyncio.Lock()
        self._on_end: Callable[[EnvError], None] | None = None
        self._closing = False
        # RFC 0006: a resumable session survives a dropped stream.
        self.resume_token = ""
        self.resume_grace_s = 0.0
        self.resumes = 0  # how many times the session was resumed on a new stream
        self._handshake = environment_pb2.HandshakeRequest()
        self._unanswered: dict[int, environment_pb2.SessionRequest] = {}  # what a resume re-sends
        self._resuming: asyncio.Task[None] | None = None
        self._may_be_parked = False  # the stream broke: the server may be keeping the session
        # RFC 0009: requests waiting to go out (behind a write, or a message awaiting its answer),
        # and what the server allows per message.
        self._outbox: collections.deque[tuple[environment_pb2.SessionRequest, int]] = collections.deque()
        self._max_pipelined = 0  # 0/1: one message per request (the server does not offer pipelined)
        self._flusher: asyncio.Task[None] | None = None
        self._in_flight: set[int] = set()  # ids of the last request of each message awaiting its answer
        self._batches: dict[int, list[int]] = {}  # a pipelined message's id -> its requests' ids
        self._batch_of_last: dict[int, int] = {}  # the id of a pipelined message's last request -> its id
        self.messages_sent = 0  # Session messages written, the handshake too (requests / messages: coalescing)
        self.pipelined_messages = 0  # of which pipelined ones

    # The settings, read from the options (one place; the old attribute names still read).
    @property
    def token(self) -> str | None:
        return self.options.token

    @property
    def ca_file(self) -> str | None:
        return self.options.ca_file

    @property
    def client_cert(self) -> tuple[str, str] | None:
        return self.options.client_cert

    @property
    def keepalive_s(self) -> float:
        return self.options.keepalive_s

    @property
    def _limit(self) -> int:
        return self.options.max_message_bytes

    @property
    def ended(self) -> EnvError | None:
        return self._ended

    def sibling(self) -> GrpcConnection:
        """A new, unopened connection to the same server with the same settings, on a channel
        of its own (how :meth:`openenv.EnvClient.fork` reaches its forks)."""
        return type(self)(self.target, options=self.options, url=self.url, secure=self.secure)

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self._on_end = callback

    # ------------------------------------------------------------------ lifecycle

    def _options(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", self._limit),
            ("grpc.max_send_message_length", self._limit),
        ]
        if self.keepalive_s:  # 0: no keepalive pings (gRPC's default)
            out += [
                ("grpc.keepalive_time_ms", int(self.keepalive_s * 1000)),
                ("grpc.keepalive_timeout_ms", int(self.options.keepalive_timeout_s * 1000)),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.max_pings_without_data", 0),
            ]
        return out

    def _new_channel(self) -> grpc.aio.Channel:
        """A channel of this connection's own (TLS and client certificate as configured)."""
        return open_channel(
            self.target, secure=self.secure, ca_file=self.ca_file, options=self._options(), client_cert=self.client_cert
        )

    async def _channel_ready(self, channel: Any, timeout: float) -> bool:
        """Wait until ``channel`` is connected (False, and the channel closed, on timeout).
        The engine's hook, as are :meth:`_new_channel` and :meth:`_open_call`."""
        return await channel_ready(channel, timeout)

    def _not_ready_reason(self, channel: Any) -> str:
        """What :meth:`_channel_ready` saw fail, appended to "cannot connect" (a hook; gRPC's
        channel keeps no reason)."""
        return ""

    def _open_call(self, channel: Any, metadata: tuple[tuple[str, str], ...] | None) -> Any:
        """A ``Session`` stream on ``channel`` (not started: it starts with its first write)."""
        return environment_pb2_grpc.EnvironmentServiceStub(channel).Session(metadata=metadata)

    def _metadata(self, *, trace: bool = False) -> tuple[tuple[str, str], ...] | None:
        """A stream's metadata: the bearer token (RFC 0003) and, with ``trace``, the caller's
        trace context."""
        pairs = list(token_metadata(self.token) or ())
        if trace:
            pairs += tracing.inject()
        return tuple(pairs) or None

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        if not handshake.known_info_digest:  # the description this process holds (RFC 0013)
            handshake.known_info_digest = known_digest(self.url)
        self._handshake = handshake
        channel = self._shared_channel  # a fleet's: one HTTP/2 channel per server, not ours to close
        if channel is None:
            channel = self._new_channel()
            if not await self._channel_ready(channel, timeout):
                why = self._not_ready_reason(channel)
                raise Unavailable(f"cannot connect to {self.url} within {timeout:g} s{why}", fatal=True)
        self._channel = channel
        # The caller's trace context (W3C traceparent, with the otel extra) travels in the
        # stream's metadata beside the token: the server's request spans join the caller's trace.
        self._call = self._open_call(channel, self._metadata(trace=True))
        self._reader = asyncio.ensure_future(self._read_loop())
        try:
            resp = await self.request(environment_pb2.SessionRequest(handshake=handshake), timeout)
        except EnvError:
            await self._shutdown(graceful=True)
            raise
        except BaseException:
            await self._shutdown()
            raise
        if resp.WhichOneof("kind") == "error":
            await self._shutdown(graceful=True)  # a refused handshake: the server ends the stream
            err = EnvError.from_proto(resp.error)
            err.fatal = True
            raise err
        self.session_id = resp.handshake.session_id
        try:
            self.info = info_of(self.url, resp.handshake)
        except EnvError:
            await self._shutdown(graceful=True)
            raise
        self.world = resp.handshake.world  # RFC 0012: the world of a multi-agent session
        grace = self.info.capabilities.resume_grace
        self.resume_token = resp.handshake.resume_token
        self.resume_grace_s = grace.seconds + grace.nanos / 1e9
        server_limit = self.info.capabilities.max_message_bytes
        self.max_message_bytes = min(self._limit, server_limit) if server_limit else self._limit
        caps = self.info.capabilities  # a server that does not offer it is never sent one (RFC 0009)
        self._max_pipelined = caps.max_pipelined_requests if caps.pipelined_requests else 0

    async def close(self) -> None:
        """Close request, then end the stream gracefully and close the channel."""
        self._closing = True
        if self._call is not None and self._ended is None:
            with contextlib.suppress(EnvError):
                await self.request(environment_pb2.SessionRequest(close=environment_pb2.CloseRequest()), 10.0)
        await self._shutdown(graceful=True)
        if self._may_be_parked:
            await self._release_parked()

    async def _release_parked(self) -> None:
        """The stream broke and the session was given up (e.g. an answer over this client's
        size limit): the server keeps a resumable session for its grace period, so close it
        now through its token. Best effort, bounded."""
        self._may_be_parked = False
        channel = self._new_channel()
        call: Any = None
        try:
            if not await self._channel_ready(channel, END_GRACE_S):
                return
            call = self._open_call(channel, self._metadata())
            hs = environment_pb2.HandshakeRequest(
                protocol_version=self._handshake.protocol_version, resume_token=self.resume_token
            )
            self._next_id += 1
            await call.write(environment_pb2.SessionRequest(request_id=self._next_id, handshake=hs))
            # Wait for the handshake's answer before writing anything else: a session that is
            # not there (reaped, already released) is refused with a fatal error and the server
            # ends the stream, and a write racing that end is what leaves gRPC owing this loop
            # a completion after it closes (python/tests/test_event_loops.py).
            resp = await asyncio.wait_for(call.read(), END_GRACE_S)
            if resp is not grpc.aio.EOF and resp.WhichOneof("kind") == "handshake":
                self._next_id += 1
                await call.write(
                    environment_pb2.SessionRequest(request_id=self._next_id, close=environment_pb2.CloseRequest())
                )
            if not call.done():
                await call.done_writing()

            async def drain() -> None:
                while await call.read() is not grpc.aio.EOF:
                    pass

            with contextlib.suppress(Exception):
                await asyncio.wait_for(drain(), END_GRACE_S)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
            pass
        finally:
            if call is not None:
                call.cancel()  # a no-op once the server ended the stream, as it does above
            await channel.close()

    async def abort(self) -> None:
        """Cancel the stream without a close request, as a crashed client would."""
        self._closing = True
        await self._shutdown()

    async def _shutdown(self, graceful: bool = False) -> None:
        """End the stream and close the channel. ``graceful``: half-close and let the
        server end the stream (it does on a close request, a fatal error or end of input),
        so that every gRPC operation of the call completes on this loop before returning;
        a call cancelled instead still owes its loop completions. Cancels after a bound."""
        if self._resuming is not None and not self._resuming.done():
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
            self._end(FailedPrecondition("the client is closed", fatal=True))
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        call, reader = self._call, self._reader
        if graceful and call is not None and reader is not None and not reader.done():
            with contextlib.suppress(Exception):  # the stream may already be over
                await asyncio.wait_for(call.done_writing(), END_GRACE_S)
            await asyncio.wait({reader}, timeout=END_GRACE_S)
        if call is not None:
            call.cancel()
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if self._channel is not None and self._channel is not self._shared_channel:
            await self._channel.close()
        self._call = self._reader = self._channel = None
        if self._ended is None:
            self._ended = FailedPrecondition("the client is closed", fatal=True)

    # ------------------------------------------------------------------ requests

    async def _read_loop(self) -> None:
        err: EnvError | None = None
        call = self._call
        dropped = False
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    break
                self._deliver(resp)
            code = await call.code()
            if code is not grpc.StatusCode.OK:
                err = stream_end_error(code, await call.details())
                dropped = True
        except grpc.aio.AioRpcError as e:
            err = stream_end_error(e.code(), e.details())
            dropped = True
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        self._may_be_parked = dropped and bool(self.resume_token)
        if dropped and self.resume_token and not self._closing and err is not None and err.code in _TRANSPORT_CODES:
            # The stream ended abnormally: reattach with the token, re-send what is unanswered.
            self._resuming = asyncio.ensure_future(self._resume(err))
            return
        self._end(err)

    def _deliver(self, resp: environment_pb2.SessionResponse) -> None:
        """Hand an answer to its request's waiter (the answers of a pipelined message to theirs)."""
        rid = resp.request_id
        if rid in self._in_flight:  # the last answer to a message: the held requests may go
            self._in_flight.discard(rid)
            if self._outbox and not self._held() and not self._write_lock.locked() and self._flusher_idle():
                self._flusher = asyncio.ensure_future(self._flush_locked())
        if self._batch_of_last:  # a pipelined message answered one message per request
            batch = self._batch_of_last.pop(rid, None)
            if batch is not None:
                self._batches.pop(batch, None)
        self._unanswered.pop(rid, None)
        fut = self._pending.pop(rid, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(resp)
            return
        items = self._batches.pop(rid, None)
        if items is None:
            return  # the answer to a request whose caller stopped waiting
        self._batch_of_last.pop(items[-1], None)
        if resp.HasField("pipelined"):
            for answer in resp.pipelined.responses:
                self._deliver(answer)
        else:  # refused as a whole (nothing applied): that error answers each request in it
            for item in items:
                refused = environment_pb2.SessionResponse(request_id=item)
                refused.error.CopyFrom(resp.error)
                self._deliver(refused)

    def _end(self, err: EnvError | None) -> None:
        """The session is over: fail what is pending, tell the owner (once)."""
        self._ended = err or FailedPrecondition("the session has ended", fatal=True)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._ended)
        self._pending.clear()
        self._unanswered.clear()
        self._outbox.clear()
        self._in_flight.clear()
        self._batches.clear()
        self._batch_of_last.clear()
        if not self._closing and self._on_end is not None:
            self._on_end(self._ended)

    async def _resume(self, cause: EnvError) -> None:
        """Reattach the session on a new stream, with backoff, within its grace period;
        then re-send every unanswered request with its id (the server answers those it already
        applied from its record). Ends the session when the grace period passes or the server
        refuses the token (ABORTED: the session is gone)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.resume_grace_s, 1.0)
        delay, last = 0.05, cause
        old_call, old_channel = self._call, self._channel
        if old_call is not None:
            old_call.cancel()
        if old_channel is not None and old_channel is not self._shared_channel:
            await old_channel.close()
        self._call = self._channel = None
        while not self._closing:
            left = deadline - loop.time()
            if left <= 0:
                break
            channel = self._new_channel()
            try:
                if not await self._channel_ready(channel, min(left, 5.0)):
                    raise Unavailable(f"cannot connect to {self.url}")
                call = self._open_call(channel, self._metadata())
                self._next_id += 1
                hs = environment_pb2.HandshakeRequest(
                    protocol_version=self._handshake.protocol_version,
                    client_name=self._handshake.client_name,
                    resume_token=self.resume_token,
                )
                await call.write(environment_pb2.SessionRequest(request_id=self._next_id, handshake=hs))
                resp = await asyncio.wait_for(call.read(), max(left, 1.0))
                if resp is grpc.aio.EOF:
                    code = await call.code()
                    raise Unavailable(f"the stream ended at the resume handshake ({code.name})")
                if resp.WhichOneof("kind") == "error":
                    refused = EnvError.from_proto(resp.error)
                    self._may_be_parked = False
                    call.cancel()
                    await channel.close()
                    # The server ended the session (drain, restart): its reason is the error.
                    self._end(
                        EnvError.from_code(
                            cause.code,
                            f"{cause.message} (the session could not be resumed: {refused.code.name}: "
                            f"{refused.message})",
                            fatal=True,
                        )
                    )
                    return
                async with self._write_lock:
                    self._outbox.clear()  # all of it is unanswered, re-sent here
                    self._in_flight.clear()
                    for rid in sorted(self._unanswered):
                        await call.write(self._unanswered[rid])
                    self._channel, self._call = channel, call
                    self._resuming = None
                    self._reader = asyncio.ensure_future(self._read_loop())
                self.resumes += 1
                self._may_be_parked = False
                return
            except asyncio.CancelledError:
                await channel.close()
                raise
            except Exception as e:  # noqa: BLE001 - any failed attempt is retried until the deadline
                last = e if isinstance(e, EnvError) else Unavailable(f"{type(e).__name__}: {e}")
                await channel.close()
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))  # backoff, not a wait for state
            delay = min(delay * 2, 2.0)
        self._end(
            Aborted(
                f"the session was lost ({cause.code.name}: {cause.message}) and not resumed within its "
                f"{self.resume_grace_s:g} s grace period (last attempt: {last.message})",
                fatal=True,
            )
        )

    def _held(self) -> bool:
        """Whether queued requests wait for the answer to the message in flight (RFC 0009):
        only when the server takes pipelined messages; else each goes out at once, as ever.
        One message in flight, not two: measured, two in flight coalesce less (5 requests a
        message against 8 for a window of 16) and pay more messages (docs/performance.md)."""
        return bool(self._in_flight) and self._max_pipelined > 1

    async def _flush(self) -> None:
        """Send the outbox, coalescing what queued up (RFC 0009); the write lock is held."""
        try:
            while self._outbox and self._resuming is None and not self._held():
                msg, rids = self._next_message()
                try:
                    if self._call is None:  # closed meanwhile
                        raise asyncio.InvalidStateError("the stream is closed")
                    self._in_flight.add(rids[-1])  # before the write: its answer may be read first
                    await self._call.write(msg)
                    self.messages_sent += 1
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as e:
                    rids += [r.request_id for r, _ in self._outbox]
                    self._outbox.clear()
                    await self._write_failed(rids, e)
                    return
        except asyncio.CancelledError:  # this caller went away: the others' requests still go out
            if self._outbox and self._ended is None and self._flusher_idle():
                self._flusher = asyncio.ensure_future(self._flush_locked())
            raise

    def _flusher_idle(self) -> bool:
        """No flush task is pending (one that is sends whatever is queued when it runs)."""
        return self._flusher is None or self._flusher.done()

    async def _flush_locked(self) -> None:
        async with self._write_lock:
            await self._flush()

    def _next_message(self) -> tuple[environment_pb2.SessionRequest, list[int]]:
        """The next message to write: the first queued request, or as many queued requests as
        the server accepts in one message and its size limit allows, as one pipelined message."""
        req, size = self._outbox.popleft()
        if not self._outbox or self._max_pipelined < 2:
            return req, [req.request_id]
        items = [req]
        total, budget = size + _ITEM_OVERHEAD, self.max_message_bytes - _ENVELOPE_OVERHEAD
        while self._outbox and len(items) < self._max_pipelined:
            nxt, nsize = self._outbox[0]
            if total + nsize + _ITEM_OVERHEAD > budget:
                break
            self._outbox.popleft()
            items.append(nxt)
            total += nsize + _ITEM_OVERHEAD
        if len(items) == 1:
            return req, [req.request_id]
        self._next_id += 1
        msg = environment_pb2.SessionRequest(request_id=self._next_id)
        msg.pipelined.requests.extend(items)
        rids = [item.request_id for item in items]
        self._batches[self._next_id] = rids
        self._batch_of_last[rids[-1]] = self._next_id
        self.pipelined_messages += 1
        return msg, rids

    async def _write_failed(self, rids: list[int], e: Exception) -> None:
        """A write failed: the requests it (and the queue behind it) held are answered with why."""
        if self.resume_token and not self._closing and self._ended is None:
            return  # the stream dropped: the reader resumes the session and re-sends them
        if self._ended is None and self._reader is not None:
            # The server ended the stream and the reader has not read its status yet: that
            # status (e.g. DEADLINE_EXCEEDED of the idle reaper) is the answer, not this write.
            await asyncio.wait({self._reader}, timeout=END_GRACE_S)
        err = self._ended or Unavailable(f"session stream failed: {e}", fatal=True)
        for rid in rids:
            self._unanswered.pop(rid, None)
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(err)

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        if self._ended is not None:
            raise self._ended
        if self._call is None and self._resuming is None:
            raise FailedPrecondition("not connected: use `async with` or await connect()")
        size = req.ByteSize()
        if size > self.max_message_bytes:
            raise ResourceExhausted(f"request of {size} bytes exceeds the {self.max_message_bytes}-byte message limit")
        self._next_id += 1
        rid = req.request_id = self._next_id
        fut: asyncio.Future[environment_pb2.SessionResponse] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        if self.resume_token:
            self._unanswered[rid] = req
        if self._resuming is None:  # else the resume sends it
            self._outbox.append((req, size))
            if not self._write_lock.locked() and not self._held():  # else it goes with the next message
                async with self._write_lock:
                    await self._flush()
        try:
            return await (asyncio.wait_for(fut, timeout) if timeout is not None else fut)
        except TimeoutError:
            self._pending.pop(rid, None)  # its late answer will be matched and discarded
            self._unanswered.pop(rid, None)
            raise ClientTimeout(f"no answer within {timeout:g} s (client-side timeout)") from None
