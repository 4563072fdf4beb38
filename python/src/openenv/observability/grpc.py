"""The gRPC side's observation: a ``grpc.aio`` server interceptor on ``EnvironmentService.Session``.

It watches the messages of each ``Session`` stream through a proxy of the servicer context
(``read``/``write``), without touching the servicer: the handshake's outcome, each request's
kind, request id, status code, duration, size and the time the environment took, and the
time steps (for episode returns). The stream's ``traceparent`` metadata is the parent of
its request spans.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from openenv.errors import ErrorCode
from openenv.observability.observer import Observer, Pending, SessionObserver
from openenv.runtime.session import SessionManager
from openenv.v1 import environment_pb2

__all__ = ["ObservingInterceptor", "env_clock", "observe_context"]

SESSION_METHOD = "/openenv.v1.EnvironmentService/Session"
_EOF = grpc.aio.EOF


def env_clock(manager: SessionManager) -> Callable[[str], Callable[[], float | None] | None]:
    """``session id -> (() -> seconds spent in its environment so far)`` for the sessions of ``manager``."""

    def of(session_id: str) -> Callable[[], float | None] | None:
        s = manager.sessions.get(session_id)
        if s is None:
            return None
        return lambda: s.env_seconds

    return of


def code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"CODE_{code}"


class _Context:
    """The servicer context, observed: every other attribute is the real context's."""

    def __init__(self, ctx: Any, so: SessionObserver, clock: Callable[[str], Callable[[], float | None] | None]):
        self._ctx = ctx
        self._so = so
        self._clock = clock
        self._pending: dict[int, Pending] = {}
        # A pipelined message's id -> its requests' ids (RFC 0009). An entry whose answers went out
        # one message each (too big together) stays until the stream ends: rare, and per stream.
        self._envelopes: dict[int, list[int]] = {}
        self._vector = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    async def read(self) -> Any:
        req = await self._ctx.read()
        if req is not _EOF:
            if not isinstance(req, environment_pb2.SessionRequest):  # undecodable bytes (the listener's guard)
                self._pending[req.request_id] = self._so.begin("undecodable", req.request_id, 0)
                return req
            kind = req.WhichOneof("kind") or "none"
            if kind == "handshake":
                self._vector = req.handshake.num_envs > 1
                self._so.client_name = req.handshake.client_name
            if kind == "pipelined":  # each request inside is observed as if it had come alone
                items = req.pipelined.requests
                self._envelopes[req.request_id] = [item.request_id for item in items]
                for item in items:
                    item_kind = item.WhichOneof("kind") or "none"
                    self._pending[item.request_id] = self._so.begin(item_kind, item.request_id, item.ByteSize())
            else:
                self._pending[req.request_id] = self._so.begin(kind, req.request_id, req.ByteSize())
        return req

    async def write(self, resp: environment_pb2.SessionResponse, encoded: Any = None) -> None:
        # A gRPC stream (grpc.aio's context, grpclib's Stream) has no encode_result: nothing encoded.
        await self._ctx.write(resp)
        if self._envelopes:
            items = self._envelopes.pop(resp.request_id, None)
            if items is not None:  # the answer to a pipelined message: each of its answers in turn
                if resp.WhichOneof("kind") == "pipelined":
                    for answer in resp.pipelined.responses:
                        self._observe(answer)
                else:  # refused as a whole: that error ends each of its requests
                    for rid in items:
                        refused = environment_pb2.SessionResponse(request_id=rid)
                        refused.error.CopyFrom(resp.error)
                        self._observe(refused)
                return
        self._observe(resp)

    def _observe(self, resp: environment_pb2.SessionResponse) -> None:
        p = self._pending.pop(resp.request_id, None)
        if p is None:
            return
        so = self._so
        kind = resp.WhichOneof("kind")
        code = code_name(resp.error.code) if kind == "error" else "OK"
        if p.kind == "handshake":
            if kind == "handshake":
                sid = resp.handshake.session_id
                so.open(sid, None if self._vector else self._clock(sid))
            else:
                so.refuse(code, resp.error.message)
        episode_id = ""
        if kind in ("step", "reset"):
            ts = resp.step.time_step if kind == "step" else resp.reset.time_step
            episode_id = ts.episode_id
            so.time_step(0, ts.reward if ts.HasField("reward") else None, ts.step_count, ts.terminated, ts.truncated)
        elif kind == "batch_step":
            bs = resp.batch_step
            for env_id, ts in zip(bs.env_ids, bs.time_steps, strict=False):
                if env_id in bs.final_time_steps:  # next-step autoreset: the episode's last step
                    f = bs.final_time_steps[env_id]
                    so.time_step(env_id, f.reward, f.step_count, f.terminated, f.truncated)
                so.time_step(env_id, ts.reward, ts.step_count, ts.terminated, ts.truncated)
        elif kind == "batch_reset":
            br = resp.batch_reset
            for env_id, ts in zip(br.env_ids, br.time_steps, strict=False):
                so.time_step(env_id, ts.reward, ts.step_count, ts.terminated, ts.truncated)
        so.end(p, code, resp.ByteSize(), episode_id)


def observe_context(interceptor: ObservingInterceptor, context: Any, metadata: Any) -> tuple[Any, Callable[[], None]]:
    """For listeners that are not grpc.aio (the grpclib engine): ``context`` (``read``/``write``
    of one ``Session`` stream) observed as ``interceptor`` observes grpc.aio's, and the callable
    that ends the observation when the stream is over."""
    so = interceptor.observer.session("grpc", trace_headers=metadata)
    return _Context(context, so, interceptor.clock), so.close


class ObservingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc is untyped here
    """Reports every ``Session`` stream to an :class:`Observer` (transport ``grpc``)."""

    def __init__(
        self, observer: Observer, clock: Callable[[str], Callable[[], float | None] | None] | None = None
    ) -> None:
        self.observer = observer
        self.clock = clock or (lambda sid: None)

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or details.method != SESSION_METHOD or handler.stream_stream is None:
            return handler
        behavior = handler.stream_stream
        observer, clock = self.observer, self.clock

        async def observed(request_iterator: Any, context: Any) -> Any:
            so = observer.session("grpc", trace_headers=details.invocation_metadata)
            try:
                return await behavior(request_iterator, _Context(context, so, clock))
            finally:
                so.close()

        return grpc.stream_stream_rpc_method_handler(
            observed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
