"""Environment descriptions kept by digest (RFC 0013): a client that opens many sessions on one
server receives and decodes the server's ``EnvironmentInfo`` once.

A handshake states the digest of the info the process already holds from that server
(``HandshakeRequest.known_info_digest``); a server of protocol 1.4 that has the same one leaves
``HandshakeResponse.info`` out, and the connection takes the kept one. Keys are the server's
address as the connection names it; values are immutable in practice (nothing modifies a
connection's ``info``). Bounded: the last :data:`KEEP` descriptions.
"""

from __future__ import annotations

import collections

from openenv.errors import Internal
from openenv.v1 import environment_pb2

__all__ = ["KEEP", "info_of", "known_digest"]

KEEP = 64

_BY_DIGEST: collections.OrderedDict[str, environment_pb2.EnvironmentInfo] = collections.OrderedDict()
_DIGEST_OF: dict[str, str] = {}  # server -> the digest of its info, as last received


def known_digest(server: str) -> str:
    """The digest to send in a handshake to ``server`` (empty: none held)."""
    digest = _DIGEST_OF.get(server, "")
    return digest if digest in _BY_DIGEST else ""


def info_of(server: str, answer: environment_pb2.HandshakeResponse) -> environment_pb2.EnvironmentInfo:
    """The environment's description from a handshake's ``answer``: the one it carries (then
    kept under its digest), or the one kept under its digest when the server left it out."""
    digest = answer.info_digest
    if answer.HasField("info") or not digest:
        info = answer.info
        if digest:
            _BY_DIGEST[digest] = info
            _BY_DIGEST.move_to_end(digest)
            while len(_BY_DIGEST) > KEEP:
                _BY_DIGEST.popitem(last=False)
            _DIGEST_OF[server] = digest
        return info
    kept = _BY_DIGEST.get(digest)
    if kept is None:
        raise Internal(
            f"the server left the environment's description out of the handshake (digest {digest}), "
            "and this client does not hold it",
            fatal=True,
        )
    return kept
