"""The gRPC listener's gatekeeper: a server interceptor (RFC 0003).

* Bearer tokens: every call but the health service's needs ``authorization: Bearer
  <token>`` metadata when a :class:`~openenv.security.TokenSet` is configured; others end
  with ``UNAUTHENTICATED`` before any handler runs.
* Undecodable requests: the listed stream methods get a deserializer that does not fail;
  a message that is not valid protobuf reaches the handler as :class:`Undecodable`, which
  answers it ``INVALID_ARGUMENT`` in band, instead of the gRPC library ending the stream
  with UNKNOWN. So does a message too fine-grained to parse (more nested messages and
  strings than :func:`openenv.runtime.granularity.element_budget` allows): it is refused
  before upb materialises it.
* Replies: a method may get its own response serializer (the server's bounds replies to the
  message limit while serializing them once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from openenv.runtime.granularity import Undecodable, tolerant_parse
from openenv.security.auth import Authenticator
from openenv.security.tokens import TokenSet

__all__ = ["GuardInterceptor", "Undecodable", "tolerant_parse"]  # the last two: from runtime.granularity

HEALTH_PREFIX = "/grpc.health.v1.Health/"


class GuardInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks the bearer token of every call (except ``open_prefixes``) and makes the
    ``tolerant`` methods' request decoding non-fatal (given as a mapping, method -> the
    request's descriptor, too fine-grained requests are refused unparsed as well)."""

    def __init__(
        self,
        tokens: TokenSet | Authenticator,
        *,
        tolerant: Iterable[str] | Mapping[str, Any] = (),
        open_prefixes: tuple[str, ...] = (HEALTH_PREFIX,),
        serializers: Mapping[str, Callable[[Any], bytes]] | None = None,
    ) -> None:
        #: The server's one token check (:mod:`openenv.security.auth`).
        self.auth = tokens if isinstance(tokens, Authenticator) else Authenticator(tokens)
        self.tokens = self.auth.tokens
        self.tolerant: dict[str, Any] = dict(tolerant) if isinstance(tolerant, Mapping) else dict.fromkeys(tolerant)
        self.serializers = dict(serializers or {})
        self.open_prefixes = open_prefixes

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        if self.auth and not method.startswith(self.open_prefixes):
            auth = None
            for key, value in details.invocation_metadata or ():
                if key == "authorization":
                    auth = value
            why = self.auth.refusal(auth)
            if why is not None:
                return _refusal(await continuation(details), grpc.StatusCode.UNAUTHENTICATED, why)
        handler = await continuation(details)
        if handler is not None and method in self.tolerant and handler.request_deserializer is not None:
            parse = tolerant_parse(handler.request_deserializer, self.tolerant[method])
            handler = handler._replace(request_deserializer=parse)
        if handler is not None and method in self.serializers:
            handler = handler._replace(response_serializer=self.serializers[method])
        return handler


#: How long a refusal of a client-streaming call waits for the call's first request
#: before ending it anyway (a client that sends nothing is refused after this).
FIRST_REQUEST_WAIT = 5.0


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, why: str) -> None:
    """``context.abort``, returning once the status is sent: grpc.aio keeps the AbortError on
    the call and raises it again itself once the handler returns, so the handler may end
    normally. Its traceback is dropped: its frames hold the context, which holds the error (a
    reference cycle per refused call, freed only by a full collection)."""
    try:
        await context.abort(code, why)
    except grpc.aio.AbortError as e:
        e.__traceback__ = e.__context__ = e.__cause__ = None


def _refusal(handler: Any, code: grpc.StatusCode, why: str, first_request_wait: float = FIRST_REQUEST_WAIT) -> Any:
    """A handler of the same shape as ``handler`` that ends the call with ``code``; the
    request is never decoded.

    A client-streaming call is ended only after its first request arrived (or
    ``first_request_wait`` seconds passed): grpc's client, when the status of a
    bidirectional call arrives while its own first write is still in flight, fails that
    write and reports the call as ``INTERNAL`` ("Internal error from Core") instead of
    the status the server sent (measured: 12 of 300 anonymous handshakes refused at
    once). Once the first request has arrived the client's opening writes are done, so
    it reads the real code."""

    async def abort(request: Any, context: grpc.aio.ServicerContext) -> None:
        await _abort(context, code, why)

    async def abort_after_first(requests: Any, context: grpc.aio.ServicerContext) -> None:
        async def first() -> None:
            async for _ in requests:
                return

        try:
            await asyncio.wait_for(first(), first_request_wait)
        except (TimeoutError, grpc.RpcError):
            pass
        await _abort(context, code, why)

    def raw(b: bytes) -> bytes:
        return b

    if handler is None or (handler.request_streaming and handler.response_streaming):
        return grpc.stream_stream_rpc_method_handler(abort_after_first, request_deserializer=raw)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort_after_first, request_deserializer=raw)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort, request_deserializer=raw)
    return grpc.unary_unary_rpc_method_handler(abort, request_deserializer=raw)
