"""Pipelined requests coalesced into one message (RFC 0009): the server's rules, in one place.

A ``SessionRequest`` whose kind is ``pipelined`` carries several ordinary requests. The
server applies them strictly in order, as if each had arrived on its own, and answers with
one ``SessionResponse`` carrying their answers in order (:func:`answer`). The rules
(proto/openenv/v1/environment.proto, ``PipelinedRequests``):

* refused as a whole, nothing applied, one non-fatal error for the enclosing request id:
  no requests (INVALID_ARGUMENT), more than ``max_pipelined_requests``
  (RESOURCE_EXHAUSTED), a server that does not offer it (UNIMPLEMENTED);
* refused in place, the others applied: a handshake (FAILED_PRECONDITION), a nested
  ``pipelined`` or a request without a kind (INVALID_ARGUMENT);
* a request that ends the session (close, a fatal error) stops the rest: each is answered
  FAILED_PRECONDITION (fatal), then the stream ends;
* answers that together exceed the message limit go out as separate messages, in order.

Transport-free: the listeners (``openenv.server``'s servicer, shared by both gRPC engines)
pass how one request is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from openenv.errors import EnvError, FailedPrecondition, InvalidArgument, ResourceExhausted, Unimplemented
from openenv.runtime.limits import DEFAULT_MAX_PIPELINED_REQUESTS  # declared with the other limits
from openenv.v1 import environment_pb2

__all__ = ["DEFAULT_MAX_PIPELINED_REQUESTS", "answer", "ends_session"]


SessionRequest = environment_pb2.SessionRequest
SessionResponse = environment_pb2.SessionResponse


def ends_session(resp: SessionResponse) -> bool:
    """True when the server ends the stream after sending ``resp`` (close, fatal error)."""
    kind = resp.WhichOneof("kind")
    return kind == "close" or (kind == "error" and resp.error.fatal)


def _refusal(req: SessionRequest, max_requests: int) -> EnvError | None:
    """Why the whole message is refused (nothing in it applied), or None."""
    n = len(req.pipelined.requests)
    if max_requests <= 0:
        return Unimplemented(
            "this server does not accept pipelined requests (Capabilities.pipelined_requests is false): "
            "send them as separate messages"
        )
    if n == 0:
        return InvalidArgument("pipelined carries no requests")
    if n > max_requests:
        return ResourceExhausted(
            f"pipelined carries {n} requests; this server accepts at most {max_requests} "
            "(Capabilities.max_pipelined_requests): nothing in it was applied",
            details={"requests": n, "max_pipelined_requests": max_requests},
        )
    return None


def _item_refusal(item: SessionRequest) -> EnvError | None:
    """Why one request may not be inside a pipelined message, or None."""
    kind = item.WhichOneof("kind")
    if kind == "pipelined":
        return InvalidArgument("pipelined requests may not be nested: put the requests in one pipelined message")
    if kind == "handshake":
        return FailedPrecondition("a handshake may not be pipelined: it opens the session, as the first message")
    if kind is None:
        return InvalidArgument("request has no kind set")
    return None


def _error(rid: int, err: EnvError) -> SessionResponse:
    resp = SessionResponse(request_id=rid)
    err.to_proto(resp.error)
    return resp


async def answer(
    req: SessionRequest,
    answer_one: Callable[[SessionRequest], Awaitable[SessionResponse]],
    *,
    max_requests: int,
    max_message_bytes: int,
) -> tuple[list[SessionResponse], bool]:
    """The messages answering the pipelined message ``req``, to be written in order, and
    whether the stream ends after them (a request in it closed the session or failed fatally).

    ``answer_one`` answers one ordinary request (applies it, or answers from a resumable
    session's record; never raises an :class:`EnvError`, it answers with it). Normally one
    message (kind ``pipelined``); one error when the whole message is refused; the separate
    answers when together they would exceed ``max_message_bytes``.
    """
    refused = _refusal(req, max_requests)
    if refused is not None:
        return [_error(req.request_id, refused)], False
    out = SessionResponse(request_id=req.request_id)
    answers = out.pipelined.responses
    ended_by: int | None = None  # request id of the request that ended the session
    for item in req.pipelined.requests:
        if ended_by is not None:
            answers.append(
                _error(
                    item.request_id,
                    FailedPrecondition(
                        f"not applied: the session ended at request {ended_by} of the same pipelined message",
                        fatal=True,
                    ),
                )
            )
            continue
        bad = _item_refusal(item)
        resp = _error(item.request_id, bad) if bad is not None else await answer_one(item)
        answers.append(resp)
        if ends_session(resp):
            ended_by = item.request_id
    ended = ended_by is not None
    if out.ByteSize() <= max_message_bytes:
        return [out], ended
    return list(answers), ended  # too big together: each answer on its own (each bounded by the listener)
