"""Snapshots of a session (RFC 0006): the environment's part, the runtime's part, sealed.

A snapshot (``openenv.v1.Snapshot``) carries the environment's own state, as its
:meth:`~openenv.Environment.snapshot` hook encoded it, and the runtime's: episode id, step
count, episode status and the per-episode state of the session's rubric. A restored session
therefore continues exactly where the snapshot was taken.

Snapshots are sealed with an HMAC-SHA256 under the server's snapshot key, and a server
restores only snapshots whose seal verifies. That matters: the default hooks use pickle, and
unpickling bytes a client made up would run the client's code on the server. The key is
``OPENENV_SNAPSHOT_KEY`` (UTF-8 text) when set, so several replicas of one environment can
restore each other's snapshots, and otherwise random per process.

Nothing here does I/O or knows the session types: :mod:`openenv.runtime.session` calls it.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle
from typing import Any

from openenv.errors import FailedPrecondition, InvalidArgument
from openenv.v1 import environment_pb2

__all__ = ["FORMAT", "KEY_ENV", "default_key", "rubric_state", "restore_rubric", "seal", "verify"]

#: The snapshot format this runtime writes and reads (``Snapshot.format``).
FORMAT = 1
#: The environment variable holding a snapshot key shared by replicas.
KEY_ENV = "OPENENV_SNAPSHOT_KEY"

# Attributes of a rubric node that are wiring, not per-episode state.
_RUBRIC_SKIP = frozenset({"env", "_client", "_client_loop"})


def default_key() -> bytes:
    """``OPENENV_SNAPSHOT_KEY`` when set, else 32 random bytes (snapshots then verify only
    in this process)."""
    text = os.environ.get(KEY_ENV)
    return text.encode() if text else os.urandom(32)


def _mac(key: bytes, snap: environment_pb2.Snapshot) -> bytes:
    body = environment_pb2.Snapshot()
    body.CopyFrom(snap)
    body.ClearField("digest")
    return hmac.new(key, body.SerializeToString(deterministic=True), hashlib.sha256).digest()


def seal(key: bytes, snap: environment_pb2.Snapshot) -> environment_pb2.Snapshot:
    """Set ``snap.digest`` (HMAC-SHA256 of fields 1-8 under ``key``); returns ``snap``."""
    snap.digest = _mac(key, snap)
    return snap


def verify(key: bytes, snap: environment_pb2.Snapshot, name: str, version: str) -> None:
    """Refuse a snapshot this environment must not restore: another environment or version
    (FAILED_PRECONDITION), another format or a digest that does not verify (INVALID_ARGUMENT)."""
    if snap.env_name != name or snap.env_version != version:
        raise FailedPrecondition(
            f"the snapshot is of environment {snap.env_name or '?'!r} version {snap.env_version or '?'!r}; "
            f"this server runs {name!r} version {version!r}"
        )
    if snap.format != FORMAT:
        raise InvalidArgument(f"snapshot format {snap.format} is not supported (this server reads format {FORMAT})")
    if not hmac.compare_digest(snap.digest, _mac(key, snap)):
        raise InvalidArgument(
            "the snapshot's digest does not verify: it was altered, or made by a server with another "
            f"snapshot key (set {KEY_ENV} alike on replicas that restore each other's snapshots)"
        )


def _picklable(value: Any) -> bool:
    try:
        pickle.dump(value, io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - anything that does not pickle is configuration, not state
        return False
    return True


def rubric_state(rubric: Any) -> bytes:
    """The per-episode state of a rubric tree: each node's picklable attributes (scores,
    trajectories), by position in the tree. Wiring (the bound environment, HTTP clients) and
    values that do not pickle (functions given at construction) are configuration, equal in
    every session of the environment, and left out."""
    nodes = [
        {k: v for k, v in vars(node).items() if k not in _RUBRIC_SKIP and _picklable(v)} for _, node in rubric.walk()
    ]
    return pickle.dumps(nodes, protocol=pickle.HIGHEST_PROTOCOL)


def restore_rubric(rubric: Any, data: bytes) -> None:
    """Put back what :func:`rubric_state` captured (a verified snapshot's bytes only)."""
    nodes = pickle.loads(data)
    tree = [node for _, node in rubric.walk()]
    if len(nodes) != len(tree):
        raise InvalidArgument(f"the snapshot's rubric has {len(nodes)} nodes; this environment's has {len(tree)}")
    for node, attrs in zip(tree, nodes, strict=True):
        vars(node).update(attrs)
