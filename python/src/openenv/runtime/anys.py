"""``google.protobuf.Any`` values in one canonical form, so equal contents give equal bytes.

An ``Any`` holds its message serialized, and ``==`` on an ``Any`` compares those bytes. A
protobuf map (a ``Struct``'s members among them) serializes in no fixed order, and upb's
order differs from one process to the next (its hash seed is per process). So one example
action with two arguments, packed in two processes (a server's gRPC side, and a client that
parsed the server's JSON description), gave two different ``Any`` values: the descriptions
compared unequal and their digests (RFC 0013) differed across replicas and restarts.

:func:`canonicalize_anys` re-packs every ``Any`` it can resolve with the deterministic
serialization (map entries sorted by key), at any depth. What the protocol carries does not
change: any order of map entries is valid protobuf, this one is merely reproducible.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

__all__ = ["canonicalize_anys"]

_ANY = "google.protobuf.Any"


def canonicalize_anys(msg: Message, pools: Iterable[descriptor_pool.DescriptorPool] = ()) -> None:
    """Re-pack, in place, every ``Any`` inside ``msg`` (``msg`` itself included) with its
    message's deterministic serialization.

    A packed type is looked up in ``pools`` and then in the default pool (where generated
    modules register their types); an ``Any`` whose type neither knows, or whose bytes do not
    parse as it, is left as it is.
    """
    _walk(msg, [*pools, descriptor_pool.Default()])


def _walk(msg: Message, pools: list[descriptor_pool.DescriptorPool]) -> None:
    if msg.DESCRIPTOR.full_name == _ANY:
        _repack(msg, pools)
        return
    for field, value in msg.ListFields():
        entry = field.message_type
        if field.type != FieldDescriptor.TYPE_MESSAGE or entry is None:
            continue
        if entry.GetOptions().map_entry:
            if entry.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                for key in value:
                    _walk(value[key], pools)
        elif field.is_repeated:
            for item in value:
                _walk(item, pools)
        else:
            _walk(value, pools)


def _repack(any_msg: Message, pools: list[descriptor_pool.DescriptorPool]) -> None:
    desc = _find(any_msg.type_url.rpartition("/")[2], pools)  # type: ignore[attr-defined]
    if desc is None:
        return
    inner = message_factory.GetMessageClass(desc)()
    try:
        inner.ParseFromString(any_msg.value)  # type: ignore[attr-defined]
    except DecodeError:
        return
    _walk(inner, pools)
    any_msg.value = inner.SerializeToString(deterministic=True)  # type: ignore[attr-defined]


def _find(name: str, pools: list[descriptor_pool.DescriptorPool]) -> Descriptor | None:
    for pool in pools:
        try:
            return pool.FindMessageTypeByName(name)
        except KeyError:
            continue
    return None
