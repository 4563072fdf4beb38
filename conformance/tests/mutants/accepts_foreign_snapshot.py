"""Rule broken: a snapshot of another environment or version is refused with
FAILED_PRECONDITION (RFC 0006 §3). The wire acknowledges every restore the server refused."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy
from openenv.v1 import environment_pb2 as pb

CAUGHT_BY = "sessions.foreign_snapshot_refused"
COLLATERAL: frozenset[str] = frozenset()


class Wire(Proxy):
    def answer(self, stream, req, resp):
        if req is not None and req.WhichOneof("kind") == "restore" and resp.WhichOneof("kind") == "error":
            snap = req.restore.snapshot
            ok = pb.SessionResponse(request_id=resp.request_id)
            ok.restore.episode_id, ok.restore.step_count, ok.restore.status = (
                snap.episode_id,
                snap.step_count,
                snap.status,
            )
            return [ok]
        return [resp]


__all__ = ["Env", "Wire"]
