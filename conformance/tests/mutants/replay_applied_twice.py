"""Rule broken: a resumable session applies each request id once (RFC 0006 §2): a request
re-sent after a reconnect is answered from the record. The wire gives every request a fresh
id on its way to the server (mapping answers back), so re-sent requests are applied again."""

import itertools

from mutants.base import Counter as Env
from mutants.proxy import Proxy

CAUGHT_BY = "sessions.resume_exactly_once"
COLLATERAL: frozenset[str] = frozenset()

_fresh = itertools.count(1 << 40)


class Wire(Proxy):
    def request(self, stream, req):
        if req.WhichOneof("kind") != "handshake":
            new = next(_fresh)
            stream.state.setdefault("ids", {})[new] = req.request_id
            req.request_id = new
        return req

    def answer(self, stream, req, resp):
        resp.request_id = stream.state.get("ids", {}).pop(resp.request_id, resp.request_id)
        return [resp]


__all__ = ["Env", "Wire"]
