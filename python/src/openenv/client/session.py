"""The client half of the protocol, written once: :class:`ClientSession` over channels.

Every client transport (gRPC on grpc.aio or grpclib, the binary WebSocket, OpenEnv's JSON
``/ws`` by translation, in-process) is a :class:`~openenv.client.channel.Dialer` of channels;
this module does the rest, and is a :class:`~openenv.client.Connection`:

* requests carry increasing ids; a reader task matches answers to them, so calls may be
  pipelined (sent in call order) and a client-side timeout (``ClientTimeout``) never shifts
  later answers (over a transport whose answers carry no id, the session is dropped instead);
* pipelined requests are coalesced (RFC 0009) when the server offers it: a request goes out at
  once when no earlier message awaits its answer (lock-step use waits for nothing, and there
  is no timer); requests issued while one does are held until that answer arrives, then go out
  together as one ``pipelined`` message. The server applies a session's requests strictly in
  order, so a held request would not have started earlier anyway;
* a resumable session (RFC 0006) survives a dropped stream: the session reattaches on a new
  channel with its token, within its grace period, and re-sends every unanswered request with
  its id (the server answers those it already applied from its record);
* error answers of the protocol are returned, a stream's end is raised as a fatal
  :class:`~openenv.EnvError` (``ended``, the ``on_end`` callback, once);
* closing ends the stream the way the protocol does (close request, half-close, read to the
  end) so that everything the transport started completes on this event loop before ``close``
  returns: a loop closed right after (``asyncio.run`` per episode) is owed nothing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

from openenv.client.channel import Channel, Dialer, Unreachable
from openenv.client.infocache import info_of, known_digest
from openenv.client.options import ConnectionOptions
from openenv.errors import (
    Aborted,
    ClientTimeout,
    EnvError,
    ErrorCode,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
)
from openenv.v1 import environment_pb2, multiagent_pb2

__all__ = ["END_GRACE_S", "ClientSession"]

END_GRACE_S = 5.0  # how long closing waits for the server to end the stream before dropping it
# How a stream ends when its connection drops (not a status the server chose): worth a resume.
_TRANSPORT_CODES = frozenset({14, 1, 13, 2})  # UNAVAILABLE, CANCELLED, INTERNAL, UNKNOWN
# Bytes a pipelined message adds to its requests' own: per request a tag and a length (<= 6),
# and the envelope's id, tag and length (<= 32, rounded up).
_ITEM_OVERHEAD, _ENVELOPE_OVERHEAD = 6, 32


class ClientSession:
    """One session of the protocol over channels from ``dialer``; a
    :class:`~openenv.client.Connection` (see the module docstring). ``options``: the
    connection's settings (``max_message_bytes`` bounds what is sent; the transport applies
    the rest)."""

    def __init__(self, dialer: Dialer, options: ConnectionOptions) -> None:
        self.dialer = dialer
        self.options = options
        self.max_message_bytes = options.max_message_bytes
        self.session_id = ""
        self.info = environment_pb2.EnvironmentInfo()
        self.world = multiagent_pb2.WorldInfo()
        self._channel: Channel | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[environment_pb2.SessionResponse]] = {}
        self._next_id = 0
        self._ended: EnvError | None = None
        self._write_lock = asyncio.Lock()
        self._on_end: Callable[[EnvError], None] | None = None
        self._closing = False
        self._dropper: asyncio.Task[None] | None = None  # closes a channel given up on (no ids)
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

    # The settings every transport reads from its options (one place; the old attribute names
    # of the connections still read).
    @property
    def token(self) -> str | None:
        """The bearer token sent when a stream opens (RFC 0003), or None."""
        return self.options.token

    @property
    def ca_file(self) -> str | None:
        """The CA bundle a TLS connection verifies the server against, or None."""
        return self.options.ca_file

    @property
    def client_cert(self) -> tuple[str, str] | None:
        """The (certificate, key) files presented for mutual TLS, or None."""
        return self.options.client_cert

    @property
    def keepalive_s(self) -> float:
        """Seconds between the transport's keepalive pings."""
        return self.options.keepalive_s

    @property
    def url(self) -> str:
        """The server's address (the dialer's)."""
        return self.dialer.url

    @property
    def _limit(self) -> int:
        return self.options.max_message_bytes

    @property
    def ended(self) -> EnvError | None:
        return self._ended

    def on_end(self, callback: Callable[[EnvError], None] | None) -> None:
        self._on_end = callback

    # ------------------------------------------------------------------ lifecycle

    async def _dial(self, handshake: environment_pb2.HandshakeRequest, timeout: float, *, first: bool) -> Channel:
        try:
            return await self.dialer.dial(handshake, timeout, first=first)
        except Unreachable as e:
            why = f" ({e})" if str(e) else ""
            raise Unavailable(f"cannot connect to {self.url} within {timeout:g} s{why}", fatal=True) from None

    async def open(self, handshake: environment_pb2.HandshakeRequest, timeout: float) -> None:
        key = self.dialer.info_key
        if not handshake.known_info_digest:  # the description this process holds (RFC 0013)
            handshake.known_info_digest = known_digest(key)
        self._handshake = handshake
        self._channel = await self._dial(handshake, timeout, first=True)
        self._reader = asyncio.ensure_future(self._read_loop(self._channel))
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
            self.info = info_of(key, resp.handshake)
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
        offered = caps.max_pipelined_requests if caps.pipelined_requests and self.dialer.coalesces else 0
        self._max_pipelined = offered

    async def close(self) -> None:
        """Close request, then end the stream gracefully and release the channel."""
        self._closing = True
        if self._channel is not None and self._ended is None:
            with contextlib.suppress(EnvError):
                await self.request(environment_pb2.SessionRequest(close=environment_pb2.CloseRequest()), 10.0)
        await self._shutdown(graceful=True)
        if self._may_be_parked:
            await self._release_parked()

    async def abort(self) -> None:
        """Drop the stream without a close request, as a crashed client would."""
        self._closing = True
        await self._shutdown()

    async def _release_parked(self) -> None:
        """The stream broke and the session was given up (e.g. an answer over this client's
        size limit): the server keeps a resumable session for its grace period, so close it
        now through its token. Best effort, bounded."""
        self._may_be_parked = False
        hs = environment_pb2.HandshakeRequest(
            protocol_version=self._handshake.protocol_version, resume_token=self.resume_token
        )
        try:
            channel = await self.dialer.dial(hs, END_GRACE_S, first=False)
        except (Unreachable, EnvError):
            return
        try:
            self._next_id += 1
            await channel.send(environment_pb2.SessionRequest(request_id=self._next_id, handshake=hs))
            # Wait for the handshake's answer before writing anything else: a session that is
            # not there (reaped, already released) is refused with a fatal error and the server
            # ends the stream, and a write racing that end is what leaves a transport owing this
            # loop a completion after it closes (python/tests/test_event_loops.py).
            resp = await asyncio.wait_for(channel.receive(), END_GRACE_S)
            if resp is not None and resp.WhichOneof("kind") == "handshake":
                self._next_id += 1
                await channel.send(
                    environment_pb2.SessionRequest(request_id=self._next_id, close=environment_pb2.CloseRequest())
                )
            await channel.end()

            async def drain() -> None:
                while await channel.receive() is not None:
                    pass

            with contextlib.suppress(EnvError, TimeoutError):
                await asyncio.wait_for(drain(), END_GRACE_S)
        except (EnvError, TimeoutError):
            pass
        finally:
            await channel.close()  # a no-op for the stream once the server ended it, as it does above

    async def _shutdown(self, graceful: bool = False) -> None:
        """End the stream and release the channel. ``graceful``: half-close and let the server
        end the stream (it does on a close request, a fatal error or end of input), so that
        everything the transport started completes on this loop before returning; a stream
        dropped instead may still owe its loop completions. Drops it after a bound."""
        if self._resuming is not None and not self._resuming.done():
            self._resuming.cancel()
            await asyncio.gather(self._resuming, return_exceptions=True)
            self._end(FailedPrecondition("the client is closed", fatal=True))
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        channel, reader = self._channel, self._reader
        if graceful and channel is not None and reader is not None and not reader.done():
            with contextlib.suppress(Exception):  # the stream may already be over
                await asyncio.wait_for(channel.end(), END_GRACE_S)
            await asyncio.wait({reader}, timeout=END_GRACE_S)
        if reader is not None:
            reader.cancel()
        if channel is not None:
            await channel.close()
        if reader is not None:
            await asyncio.gather(reader, return_exceptions=True)
        if self._dropper is not None:
            await asyncio.gather(self._dropper, return_exceptions=True)
            self._dropper = None
        self._channel = self._reader = None
        if self._ended is None:
            self._ended = FailedPrecondition("the client is closed", fatal=True)

    # ------------------------------------------------------------------ answers

    async def _read_loop(self, channel: Channel) -> None:
        err: EnvError | None = None
        dropped = False
        try:
            while True:
                resp = await channel.receive()
                if resp is None:
                    break
                self._deliver(resp)
        except EnvError as e:
            err, dropped = e, True
        except asyncio.CancelledError:
            err = FailedPrecondition("the client is closed", fatal=True)
        except Exception as e:  # noqa: BLE001 - a transport's bug still ends the session, with why
            err, dropped = Unavailable(f"the stream failed: {type(e).__name__}: {e}", fatal=True), True
        if err is not None:
            err.fatal = True
        resumable = dropped and bool(self.resume_token) and self.dialer.resumable
        self._may_be_parked = resumable
        if resumable and not self._closing and err is not None and err.code in _TRANSPORT_CODES:
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
        if self._unanswered:
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
        if self._ended is not None and self._ended.code is not ErrorCode.FAILED_PRECONDITION:
            return  # already over for a reason of its own (a dropped session): that one stays
        first = self._ended is None
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
        if first and not self._closing and self._on_end is not None:
            self._on_end(self._ended)

    async def _resume(self, cause: EnvError) -> None:
        """Reattach the session on a new channel, with backoff, within its grace period;
        then re-send every unanswered request with its id (the server answers those it already
        applied from its record). Ends the session when the grace period passes or the server
        refuses the token (ABORTED: the session is gone)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.resume_grace_s, 1.0)
        delay, last = 0.05, cause
        old, self._channel = self._channel, None
        if old is not None:
            await old.close()
        while not self._closing:
            left = deadline - loop.time()
            if left <= 0:
                break
            hs = environment_pb2.HandshakeRequest(
                protocol_version=self._handshake.protocol_version,
                client_name=self._handshake.client_name,
                resume_token=self.resume_token,
            )
            channel: Channel | None = None
            try:
                try:
                    channel = await self.dialer.dial(hs, min(left, 5.0), first=False)
                except Unreachable:
                    raise Unavailable(f"cannot connect to {self.url}") from None
                self._next_id += 1
                await channel.send(environment_pb2.SessionRequest(request_id=self._next_id, handshake=hs))
                resp = await asyncio.wait_for(channel.receive(), max(left, 1.0))
                if resp is None:
                    raise Unavailable("the stream ended at the resume handshake (OK)")
                if resp.WhichOneof("kind") == "error":
                    refused = EnvError.from_proto(resp.error)
                    self._may_be_parked = False
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
                        await channel.send(self._unanswered[rid])
                    self._channel = channel
                    self._resuming = None
                    self._reader = asyncio.ensure_future(self._read_loop(channel))
                self.resumes += 1
                self._may_be_parked = False
                return
            except asyncio.CancelledError:
                if channel is not None:
                    await channel.close()
                raise
            except Exception as e:  # noqa: BLE001 - any failed attempt is retried until the deadline
                last = e if isinstance(e, EnvError) else Unavailable(f"{type(e).__name__}: {e}")
                if channel is not None:
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

    # ------------------------------------------------------------------ requests

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
                channel = self._channel
                try:
                    if channel is None:  # closed meanwhile
                        raise Unavailable("the stream is closed", fatal=True)
                    self._in_flight.add(rids[-1])  # before the write: its answer may be read first
                    answer = await channel.send(msg)
                    self.messages_sent += 1
                    if answer is not None:  # answered by the transport itself (a translation)
                        self._deliver(answer)
                except EnvError as e:
                    if not e.fatal:  # this message is refused, the stream goes on
                        self._in_flight.discard(rids[-1])
                        self._fail(rids, e)
                        continue
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

    def _fail(self, rids: list[int], err: EnvError) -> None:
        """Answer the requests ``rids`` with ``err`` (raised to their callers)."""
        for rid in rids:
            self._unanswered.pop(rid, None)
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_exception(err)

    async def _write_failed(self, rids: list[int], e: EnvError) -> None:
        """A write failed: the requests it (and the queue behind it) held are answered with why."""
        if self.resume_token and self.dialer.resumable and not self._closing and self._ended is None:
            return  # the stream dropped: the reader resumes the session and re-sends them
        if self._ended is None and self._reader is not None:
            # The server ended the stream and the reader has not read its status yet: that
            # status (e.g. DEADLINE_EXCEEDED of the idle reaper) is the answer, not this write.
            await asyncio.wait({self._reader}, timeout=END_GRACE_S)
        self._fail(rids, self._ended or Unavailable(f"session stream failed: {e.message}", fatal=True))

    async def request(
        self, req: environment_pb2.SessionRequest, timeout: float | None = None
    ) -> environment_pb2.SessionResponse:
        if self._ended is not None:
            raise self._ended
        if self._channel is None and self._resuming is None:
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
            if not self.dialer.answers_carry_ids:
                raise self._drop(timeout) from None
            raise ClientTimeout(f"no answer within {timeout:g} s (client-side timeout)") from None

    def _drop(self, timeout: float | None) -> EnvError:
        """Answers carry no id: give the session up so that a late answer can never be taken
        for the answer to a later request (OpenEnv issue #1143). Returns why."""
        err = ClientTimeout(
            f"no answer within {timeout:g} s (client-side timeout); the connection was dropped so that a "
            "late answer cannot be taken for the next one (stock OpenEnv frames carry no request id)",
            fatal=True,
        )
        self._end(err)
        channel, self._channel = self._channel, None
        if channel is not None:
            self._dropper = asyncio.ensure_future(channel.close())
        return err
