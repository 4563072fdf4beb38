"""A control, not a mutant: a correct server that takes at most 3 requests per pipelined
message (``max_pipelined_requests=3``, RFC 0009). It must certify: protocol.pipelined_messages
sends its requests in messages of at most 3 and probes the limit with 4."""

from mutants.base import Counter as Env

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
SERVER_KWARGS = {"max_pipelined_requests": 3}

__all__ = ["Env"]
