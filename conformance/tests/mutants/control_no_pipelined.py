"""A control, not a mutant: a correct server that does not offer pipelined messages
(``max_pipelined_requests=0``, RFC 0009). It must certify: protocol.pipelined_messages skips,
saying so, and nothing else depends on the capability."""

from mutants.base import Counter as Env

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
SERVER_KWARGS = {"max_pipelined_requests": 0}

__all__ = ["Env"]
