"""The protocol's error table, as Python exceptions.

One table of codes (``docs/protocol.md`` §5.2, the data ``proto/tables/errors.json``) is shared
by the gRPC server, the WebSocket bridge, the clients and the conformance suite. Every exception
here carries the code, so a caller can branch on ``err.code`` or catch the specific class, and
says whether the request may be retried (``err.retryable``, from the generated
``openenv._contract``). The classes are checked against the data at import: a code added to
the table and not here (or the other way round) fails every import of ``openenv``.
"""

from __future__ import annotations

import enum
from typing import Any, cast

from google.protobuf import struct_pb2

from openenv import _contract
from openenv.v1 import error_pb2
from openenv.values import from_value, to_value

__all__ = [
    "Aborted",
    "Cancelled",
    "ClientTimeout",
    "DeadlineExceeded",
    "EnvError",
    "ErrorCode",
    "FailedPrecondition",
    "Internal",
    "InvalidAction",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
]


MAX_MESSAGE_CHARS = 1024
"""Error messages are cut to this many characters (plus a note saying how many were cut)."""


class ErrorCode(enum.IntEnum):
    """Error codes; numbers equal ``google.rpc.Code`` and ``openenv.v1.ErrorCode``."""

    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    UNAUTHENTICATED = 16


class EnvError(Exception):
    """An error answer of the protocol.

    Attributes:
        code: the :class:`ErrorCode`.
        message: human-readable explanation.
        details: machine-readable details (JSON-like), e.g. schema violations.
        fatal: True when the session ended with this error.
    """

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(
        self, message: str = "", *, details: Any = None, fatal: bool = False, code: ErrorCode | None = None
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = ErrorCode(code)
        if len(message) > MAX_MESSAGE_CHARS:  # messages may quote input: never echo megabytes back
            cut = len(message) - MAX_MESSAGE_CHARS
            message = f"{message[:MAX_MESSAGE_CHARS]}... ({cut} more characters cut)"
            super().__init__(message)
        self.message = message
        self.details = details
        self.fatal = fatal

    @property
    def retryable(self) -> bool:
        """True when the same request may succeed if sent again, later or to another server (in
        a new session when this error ended the session): the error table's "Retryable" column
        (docs/protocol.md §5.2): ``RESOURCE_EXHAUSTED`` (capacity), ``ABORTED``, ``UNAVAILABLE``."""
        return int(self.code) in _RETRYABLE

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}" + (" (session ended)" if self.fatal else "")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.code, self.message, self.details, self.fatal))

    def to_proto(self, out: error_pb2.Status | None = None) -> error_pb2.Status:
        """The wire form: an ``openenv.v1.Status`` (details packed as a ``google.protobuf.Value``;
        details that are not JSON travel as their text)."""
        st = out if out is not None else error_pb2.Status()
        # The generated stubs type an enum field as its enum class; the field holds the number.
        st.code = cast(error_pb2.ErrorCode, int(self.code))
        st.message, st.fatal = self.message, bool(self.fatal)
        if self.details is not None:
            try:
                value = to_value(self.details)
            except (TypeError, RecursionError):
                value = to_value(str(self.details)[:MAX_MESSAGE_CHARS])
            if value.ByteSize() > 16 * MAX_MESSAGE_CHARS:  # details quoting huge input: cut as text
                value = to_value(str(self.details)[:MAX_MESSAGE_CHARS] + "... (details cut)")
            st.details.add().Pack(value)
        return st

    @classmethod
    def from_proto(cls, st: error_pb2.Status) -> EnvError:
        """The exception of an ``openenv.v1.Status`` (one detail: its value; several: a list;
        a detail of another type: ``{"@type": type_url}``)."""
        details: Any = None
        if st.details:
            values: list[Any] = []
            for d in st.details:
                v = struct_pb2.Value()
                values.append(from_value(v) if d.Unpack(v) else {"@type": d.type_url})
            details = values[0] if len(values) == 1 else values
        return cls.from_code(st.code, st.message, details=details, fatal=st.fatal)

    @classmethod
    def from_code(cls, code: int, message: str, *, details: Any = None, fatal: bool = False) -> EnvError:
        """Build the exception class matching ``code`` (unknown codes give ``EnvError``)."""
        try:
            code = ErrorCode(code)
        except ValueError:
            return EnvError(f"unknown error code {code}: {message}", details=details, fatal=fatal)
        return _BY_CODE.get(code, EnvError)(message, details=details, fatal=fatal, code=code)


def _rebuild(code: int, message: str, details: Any, fatal: bool) -> EnvError:
    return EnvError.from_code(code, message, details=details, fatal=fatal)


class Cancelled(EnvError):
    """The client cancelled the request."""

    code = ErrorCode.CANCELLED


class InvalidArgument(EnvError):
    """The request or action is invalid whatever the state (schema, type, bytes)."""

    code = ErrorCode.INVALID_ARGUMENT


class InvalidAction(InvalidArgument):
    """Raise from ``Environment.step`` for an action the environment rejects (INVALID_ARGUMENT)."""


class DeadlineExceeded(EnvError):
    """A per-request timeout elapsed."""

    code = ErrorCode.DEADLINE_EXCEEDED


class ClientTimeout(DeadlineExceeded):
    """This client's own timeout elapsed before the server answered (RFC 0016).

    Raised by the client, never sent by a server: the request may still be carried out (its late
    answer is discarded). A server's ``DEADLINE_EXCEEDED`` answer (a step timeout, a world wait
    that passed its ``wait_timeout``) raises :class:`DeadlineExceeded` itself, so ``except
    ClientTimeout`` tells the two apart while ``except DeadlineExceeded`` still catches both.
    """


class NotFound(EnvError):
    """A named thing (e.g. a tool) does not exist."""

    code = ErrorCode.NOT_FOUND


class ResourceExhausted(EnvError):
    """A capacity or size limit was hit."""

    code = ErrorCode.RESOURCE_EXHAUSTED


class FailedPrecondition(EnvError):
    """The session's state does not allow the request (e.g. step before reset)."""

    code = ErrorCode.FAILED_PRECONDITION


class Aborted(EnvError):
    """The session was lost: its resume token is unknown or its grace period passed (RFC 0006)."""

    code = ErrorCode.ABORTED


class Unimplemented(EnvError):
    """The request kind or capability is not supported."""

    code = ErrorCode.UNIMPLEMENTED


class Internal(EnvError):
    """The environment raised; the message names the exception."""

    code = ErrorCode.INTERNAL


class Unavailable(EnvError):
    """The server is shutting down or cannot serve."""

    code = ErrorCode.UNAVAILABLE


class Unauthenticated(EnvError):
    """The server requires a bearer token and none (or none it accepts) was given (RFC 0003)."""

    code = ErrorCode.UNAUTHENTICATED


class PermissionDenied(EnvError):
    """The request is not allowed from where it came (e.g. a foreign ``Origin``; RFC 0003)."""

    code = ErrorCode.PERMISSION_DENIED


_BY_CODE: dict[ErrorCode, type[EnvError]] = {
    c.code: c
    for c in (
        Cancelled,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        Unimplemented,
        Internal,
        Unavailable,
        Unauthenticated,
        PermissionDenied,
    )
}

_RETRYABLE = frozenset(row.number for row in _contract.ERRORS if row.retryable)

# The proto enum, the error table's data and these classes must agree; checked at import so
# drift cannot ship (python/tests/test_contract_tables.py says where they differ).
assert {c.name: c.value for c in ErrorCode} == {
    n.removeprefix("ERROR_CODE_"): v for n, v in error_pb2.ErrorCode.items() if v
}, "openenv.errors.ErrorCode is out of sync with openenv.v1.ErrorCode"
assert {(c.code.name, c.__name__) for c in _BY_CODE.values()} == {(r.name, r.cls) for r in _contract.ERRORS}, (
    "openenv.errors is out of sync with proto/tables/errors.json (run `make generate`)"
)
