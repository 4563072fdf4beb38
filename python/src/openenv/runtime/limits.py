"""Serving limits: what one server allows its clients, and how it contains their sessions.

:class:`Limits` is the one declaration of every serving limit (its type, default, validation
and meaning). :class:`~openenv.runtime.session.EnvironmentRuntime`, the protocol engine, both gRPC
listeners, the HTTP side, :class:`openenv.Host`, :func:`openenv.serve` and ``openenv serve``
all read it; the CLI derives its options' defaults and help from the fields here, so the four
cannot drift apart.

The machinery (:func:`setting`, :class:`Settings`, :func:`documented`) is shared by the other
settings objects (:class:`openenv.security.SecuritySettings`, :mod:`openenv.settings`): a
frozen dataclass whose fields carry their documentation and their check, validated when the
object is built, so a bad value fails where it is written, with a ``ValueError`` naming the
class, the field and the value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, Self, TypedDict, TypeVar

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_PIPELINED_REQUESTS",
    "DEFAULT_RESUME_GRACE_S",
    "ISOLATION_MODES",
    "LimitKeywords",
    "Limits",
    "SettingError",
    "Settings",
    "documented",
    "field_default",
    "field_doc",
    "setting",
]

DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # gRPC's own default; docs/security.md, "What one message may cost"
DEFAULT_IDLE_TIMEOUT_S = 300.0
DEFAULT_RESUME_GRACE_S = 60.0  # how long a dropped resumable session waits for its client (RFC 0006)
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_PIPELINED_REQUESTS = 256
"""Requests one pipelined message may carry unless the server is told otherwise (enough to
amortise a message's cost many times over; the message size limit bounds it as well)."""
ISOLATION_MODES = ("thread", "process")

_S = TypeVar("_S", bound="Settings")


# ---------------------------------------------------------------------------- the machinery


def setting(
    default: Any,
    doc: str,
    *,
    check: Callable[[Any], bool] | None = None,
    expect: str = "",
    convert: Callable[[Any], Any] | None = None,
) -> Any:
    """A settings field: its default, its documentation (the API reference and the CLI's help
    both show it), and optionally a ``check`` (``expect`` says what it accepts, for the error)
    and a ``convert`` applied first (e.g. a list to a tuple)."""
    return dataclasses.field(
        default=default, metadata={"doc": doc, "check": check, "expect": expect, "convert": convert}
    )


class SettingError(ValueError):
    """A settings field given a value it does not accept; ``owner`` (the class name),
    ``field`` and ``value`` say which (the CLI names its option from ``field``)."""

    def __init__(self, owner: str, field: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.owner, self.field, self.value = owner, field, value


class Settings:
    """Base of the settings dataclasses: fields converted and checked when built."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            convert, check = f.metadata.get("convert"), f.metadata.get("check")
            if convert is not None:
                try:
                    converted = convert(value)
                except (TypeError, ValueError) as e:
                    why = f"{owner}.{f.name} must be {f.metadata['expect']}, not {value!r} ({e})"
                    raise SettingError(owner, f.name, value, why) from None
                object.__setattr__(self, f.name, converted)  # frozen: only here, while building
                value = converted
            if check is not None and not check(value):
                why = f"{owner}.{f.name} must be {f.metadata['expect']}, not {value!r}"
                raise SettingError(owner, f.name, value, why)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (checked as when built); unknown names are a TypeError."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    @classmethod
    def names(cls) -> frozenset[str]:
        """The field names."""
        return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def documented(cls: type[_S]) -> type[_S]:
    """Append each field's documentation to the class docstring (``Attributes:``), so the
    reference shows what :func:`setting` declared, once."""
    lines = [(cls.__doc__ or "").rstrip(), "", "Attributes:"]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        default = "" if f.default is dataclasses.MISSING else f" Default: ``{f.default!r}``."
        lines.append(f"    {f.name}: {f.metadata.get('doc', '')}{default}")
    cls.__doc__ = "\n".join(lines) + "\n"
    return cls


def field_doc(cls: type[Settings], name: str) -> str:
    """The documentation of ``cls``'s field ``name`` (for CLI help)."""
    return str(_field(cls, name).metadata.get("doc", ""))


def field_default(cls: type[Settings], name: str) -> Any:
    """The default of ``cls``'s field ``name`` (for CLI defaults)."""
    return _field(cls, name).default


def _field(cls: type[Settings], name: str) -> dataclasses.Field[Any]:
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def integer(minimum: int, *, optional: bool = False) -> dict[str, Any]:
    """``check``/``expect`` of an integer ``>= minimum`` (or None when ``optional``)."""
    return {
        "check": lambda v: (optional and v is None) or (_is_int(v) and v >= minimum),
        "expect": f"an integer >= {minimum}" + (" or None" if optional else ""),
    }


def seconds(*, optional: bool = False) -> dict[str, Any]:
    """``check``/``expect`` of a duration in seconds ``>= 0`` (or None when ``optional``)."""
    return {
        "check": lambda v: (optional and v is None) or (_is_number(v) and v >= 0),
        "expect": "a number of seconds >= 0" + (" or None" if optional else ""),
    }


def boolean() -> dict[str, Any]:
    """``check``/``expect`` of a bool (not merely a truthy value)."""
    return {"check": lambda v: isinstance(v, bool), "expect": "True or False"}


def one_of(options: tuple[str, ...]) -> dict[str, Any]:
    """``check``/``expect`` of one of ``options``."""
    return {"check": lambda v: v in options, "expect": "one of " + ", ".join(map(repr, options))}


# ---------------------------------------------------------------------------- the limits


@documented
@dataclasses.dataclass(frozen=True)
class Limits(Settings):
    """What one server allows its clients, and how it contains their sessions (frozen;
    :meth:`replace` makes a changed copy).

    What users may rely on: every field below, its name, default and meaning; a bad value
    raises ``ValueError`` naming the field when the object is built; the same limits apply
    on every listener (gRPC, the HTTP side) of a server, since they share one runtime.
    """

    max_sessions: int | None = setting(
        None,
        "Capacity: sessions held at once over every listener (None: the environment class's "
        "``max_sessions``; 1 for classes that declare ``concurrent_sessions = False``).",
        **integer(1, optional=True),
    )
    max_sessions_per_client: int = setting(
        0,
        "Sessions one client address may hold at once over every listener (0: no limit); beyond "
        "it a handshake is refused RESOURCE_EXHAUSTED (RFC 0003).",
        **integer(0),
    )
    max_message_bytes: int = setting(
        DEFAULT_MAX_MESSAGE_BYTES,
        "Largest message accepted and sent, on every listener; a larger reply is an in-band "
        "RESOURCE_EXHAUSTED. Each message may cost up to ~10x its size to parse (docs/security.md).",
        **integer(1),
    )
    idle_timeout_s: float = setting(
        DEFAULT_IDLE_TIMEOUT_S, "Sessions idle for longer are closed, in seconds (0: never).", **seconds()
    )
    resume_grace_s: float = setting(
        DEFAULT_RESUME_GRACE_S,
        "How long a resumable session whose connection dropped waits for its client, in seconds "
        "(RFC 0006; 0: no resumption).",
        **seconds(),
    )
    max_num_envs: int | None = setting(
        None,
        "The most instances one vectorised session may hold (RFC 0002; None: the capacity; "
        "never more than the capacity).",
        **integer(1, optional=True),
    )
    handshake_timeout_s: float | None = setting(
        DEFAULT_HANDSHAKE_TIMEOUT_S,
        "A stream silent for longer before its handshake is ended DEADLINE_EXCEEDED, in seconds (None or 0: never).",
        **seconds(optional=True),
    )
    max_pipelined_requests: int = setting(
        DEFAULT_MAX_PIPELINED_REQUESTS,
        "The most requests one pipelined message may carry (RFC 0009; 0: not offered, clients "
        "send each request alone).",
        **integer(0),
    )
    isolation: Literal["thread", "process"] = setting(
        "thread",
        "``thread``: environments run in the server process; ``process``: each session's "
        "environment in its own worker process, so a crash loses only that session (docs/security.md).",
        **one_of(ISOLATION_MODES),
    )
    inline_threshold_s: float | None = setting(
        None,
        "Sync environment hooks measured consistently faster than this run on the event loop "
        "instead of a worker thread, in seconds (0: never; None: ``$OPENENV_INLINE_THRESHOLD_US``, "
        "else 50 µs; docs/performance.md).",
        **seconds(optional=True),
    )
    tools_only: bool = setting(False, "Production mode: only tools are reachable.", **boolean())

    @classmethod
    def of(cls, limits: Limits | None, keywords: Mapping[str, Any]) -> Limits:
        """``limits`` (default: all defaults) with ``keywords`` (field names) applied: how the
        keyword arguments of the constructors that predate this class map onto it."""
        base = limits if limits is not None else cls()
        unknown = set(keywords) - cls.names()
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        return base.replace(**keywords) if keywords else base


class LimitKeywords(TypedDict, total=False):
    """The fields of :class:`Limits` as keyword arguments (the constructors' ``**keywords``)."""

    max_sessions: int | None
    max_sessions_per_client: int
    max_message_bytes: int
    idle_timeout_s: float
    resume_grace_s: float
    max_num_envs: int | None
    handshake_timeout_s: float | None
    max_pipelined_requests: int
    isolation: Literal["thread", "process"]
    inline_threshold_s: float | None
    tools_only: bool
