"""How fine-grained a message may be before it is parsed (RFC 0003, docs/security.md).

A message's size is bounded (``max_message_bytes``), but what it costs to parse is not
proportional to its size: every nested protobuf message (a ``google.protobuf.Value``, a
``Struct``, a map entry) is materialised by upb at 30-50 bytes, then by the runtime as a Python
object at 30-70 more, whatever its size on the wire (an empty ``Struct`` in a list is 4 bytes).
A 15 MiB list of empty structs cost 500 MB to parse, then as much again to answer (measured).
Likewise a JSON value costs a Python object (a 1-character string, 4 bytes of JSON, 57 bytes).

So a message holding more than :func:`element_budget` elements (one per
:data:`ELEMENT_BYTES` bytes of the message on average, beyond :data:`MIN_ELEMENTS`) is
refused before it is parsed; each element then costs at most a small multiple of its share
of the message (about 10x for the densest admitted). The counts are cheap:

* protobuf (:func:`protobuf_refusal`): a walk over the wire bytes that follows the message's
  descriptor, counting nested messages, strings and bytes (a map entry twice) and skipping
  the contents of strings and bytes without copying them. It stops as soon as the budget is
  exceeded and is skipped for messages too small to exceed it (every element takes at least
  2 bytes);
* JSON (:func:`json_refusal`): the commas and colons outside strings, plus the strings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError

__all__ = [
    "ELEMENT_BYTES",
    "MIN_ELEMENTS",
    "Undecodable",
    "element_budget",
    "elements",
    "json_refusal",
    "protobuf_refusal",
    "tolerant_parse",
]

ELEMENT_BYTES = 8
"""Bytes of message per element, on average, below which a message is too fine-grained."""

MIN_ELEMENTS = 16_384
"""Elements any message may hold, however small (at most a few MB to parse)."""


def element_budget(size: int) -> int:
    """The most elements a message of ``size`` bytes may hold."""
    return max(MIN_ELEMENTS, size // ELEMENT_BYTES)


# Per message type: field number -> the descriptor of a message-typed field, or None for a string
# or bytes field. (Descriptors are typed Any: upb's and the pure-Python one are different classes
# to the checker.)
_Table = dict[int, Any]
_TABLES: dict[Any, _Table] = {}
_STRINGS = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES)
_UNKNOWN = object()


_MAP_ENTRIES: set[Any] = set()  # a map's entry costs a slot in upb's table and a Python dict entry: it counts twice


def _table(desc: Any) -> _Table:
    table = _TABLES.get(desc)
    if table is None:
        table = {f.number: f.message_type for f in desc.fields if f.type == FieldDescriptor.TYPE_MESSAGE}
        table.update((f.number, None) for f in desc.fields if f.type in _STRINGS)
        _MAP_ENTRIES.update(sub for sub in table.values() if sub is not None and sub.GetOptions().map_entry)
        _TABLES[desc] = table
    return table


class _Exceeded(Exception):
    pass


def elements(data: bytes, descriptor: Any, stop_after: int) -> int:
    """The number of elements in ``data``, a serialized ``descriptor`` message: nested
    messages and strings and bytes fields, at any depth, counted up to ``stop_after + 1``
    (each costs an object to parse, however short); a map entry counts twice (a slot in a
    hash table too).

    Strings and bytes are skipped without being read (``Any.value`` included: its codec
    checks it against its own type), fields the descriptor does not know too (upb keeps them
    as raw bytes). Bytes that are not a valid encoding end the count where they stop making
    sense; the parser refuses them there too.
    """
    n = 0
    i, end = 0, len(data)
    stack: list[tuple[int, _Table]] = []
    table = _table(descriptor)
    tables, entries = _TABLES, _MAP_ENTRIES
    try:
        while True:
            while i < end:
                b = data[i]
                i += 1
                key = b
                if b >= 0x80:
                    key, shift = b & 0x7F, 7
                    while True:
                        b = data[i]
                        i += 1
                        key |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                        if shift > 63:
                            return n  # not a varint: the parser refuses the bytes here
                wire = key & 7
                if wire == 2:
                    b = data[i]
                    i += 1
                    size = b
                    if b >= 0x80:
                        size, shift = b & 0x7F, 7
                        while True:
                            b = data[i]
                            i += 1
                            size |= (b & 0x7F) << shift
                            if b < 0x80:
                                break
                            shift += 7
                            if shift > 63:
                                return n
                    sub = table.get(key >> 3, _UNKNOWN)
                    if sub is _UNKNOWN:  # kept as raw bytes
                        i += size
                    elif sub is None:  # a string or bytes: one object, however short
                        i += size
                        n += 1
                        if n > stop_after:
                            raise _Exceeded
                    else:
                        if i + size > end:
                            return n  # truncated: the parser stops here too
                        n += 2 if sub in entries else 1
                        if n > stop_after:
                            raise _Exceeded
                        stack.append((end, table))
                        end = i + size
                        table = tables.get(sub) or _table(sub)
                elif wire == 0:
                    start = i
                    while data[i] >= 0x80:
                        i += 1
                        if i - start > 9:
                            return n  # not a varint
                    i += 1
                elif wire == 1:
                    i += 8
                elif wire == 5:
                    i += 4
                elif wire == 3:  # a group: counted as a message, its fields scanned in place
                    n += 1
                    if n > stop_after:
                        raise _Exceeded
                elif wire != 4:
                    return n  # not a wire type: the parser refuses the bytes
            if i > end or not stack:
                return n
            end, table = stack.pop()
    except _Exceeded:
        return n
    except IndexError:  # truncated
        return n


def protobuf_refusal(data: bytes, descriptor: Any) -> str | None:
    """Why ``data`` (a serialized ``descriptor`` message) is refused unparsed, or None: it
    holds more :func:`elements` than :func:`element_budget` allows."""
    budget = element_budget(len(data))
    if len(data) // 2 <= budget:
        return None
    if elements(data, descriptor, budget) <= budget:
        return None
    return (
        f"the {len(data)}-byte message holds more than {budget} nested messages and strings (at most one per "
        f"{ELEMENT_BYTES} bytes, or {MIN_ELEMENTS}): refused unparsed, it would cost too much memory"
    )


def json_refusal(text: Any) -> str | None:
    """Why a JSON text (``str`` or ``bytes``) is refused unparsed, or None: it holds more
    elements than :func:`element_budget` allows. Elements are the commas and colons outside
    strings (about one per value and key) plus the strings (a string is an object however
    short, so it counts twice). Three counts when the text is well under the budget;
    otherwise escapes are removed and the commas and colons between strings counted, without
    copying any string out (commas inside strings, CSV or code, do not count)."""
    size = len(text)
    budget = element_budget(size)
    if size <= budget:
        return None
    comma: Any
    colon: Any
    quote: Any
    bs2: Any
    bsq: Any
    if isinstance(text, str):
        comma, colon, quote, bs2, bsq = ",", ":", '"', "\\\\", '\\"'
    else:
        comma, colon, quote, bs2, bsq = b",", b":", b'"', b"\\\\", b'\\"'
    if text.count(comma) + text.count(colon) + text.count(quote) // 2 <= budget:
        return None
    bare = text.replace(bs2, text[:0]).replace(bsq, text[:0])  # escaped backslashes, then escaped quotes
    del text
    n = bare.count(quote) // 2  # the strings: keys and values
    pos = 0
    while n <= budget:
        q = bare.find(quote, pos)
        stop = len(bare) if q < 0 else q
        n += bare.count(comma, pos, stop) + bare.count(colon, pos, stop)  # outside strings
        if q < 0:
            break
        pos = bare.find(quote, q + 1) + 1  # past the string
        if pos == 0:
            break  # an unterminated string: the parser refuses it
    if n <= budget:
        return None
    return (
        f"the {size}-byte JSON text holds more than {budget} values, keys and strings (at most one per "
        f"{ELEMENT_BYTES} bytes, or {MIN_ELEMENTS}): refused unparsed, it would cost too much memory"
    )


class Undecodable:
    """A request whose bytes did not parse, or were not parsed (``too_fine``); ``error`` says
    why. ``request_id`` is field 1 when the bytes start with it (encoders write fields in
    number order), so the answer can still be matched to its request; else 0."""

    def __init__(self, error: str, request_id: int = 0, *, too_fine: bool = False) -> None:
        self.error = error
        self.request_id = request_id
        self.too_fine = too_fine

    def describe(self, what: str) -> str:
        """The answer's message for a ``what`` request."""
        return self.error if self.too_fine else f"undecodable {what} ({self.error})"


def _leading_uint64(data: bytes) -> int:
    """Field 1 (a varint) when ``data`` starts with it; 0 otherwise."""
    if not data or data[0] != 0x08:
        return 0
    value = shift = 0
    for b in data[1:11]:
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF
        shift += 7
    return 0


def tolerant_parse(deserialize: Callable[[bytes], Any], descriptor: Any = None) -> Callable[[bytes], Any]:
    """``deserialize``, returning :class:`Undecodable` for bytes that do not parse (any engine)
    and, given the message's ``descriptor``, for bytes too fine-grained to parse
    (:func:`openenv.runtime.granularity.protobuf_refusal`), which are not parsed."""

    def parse(data: bytes) -> Any:
        if descriptor is not None:
            why = protobuf_refusal(data, descriptor)
            if why is not None:
                return Undecodable(why, _leading_uint64(data), too_fine=True)
        try:
            return deserialize(data)
        except (DecodeError, ValueError, RecursionError) as e:
            return Undecodable(f"{type(e).__name__}: {str(e)[:200]}", _leading_uint64(data))

    return parse
