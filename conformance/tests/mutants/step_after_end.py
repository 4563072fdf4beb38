"""Rule broken: a step after the episode ended is FAILED_PRECONDITION (docs/protocol.md §3.5).

The wire turns that refusal into an accepted step (the last time step again, counted)."""

from mutants.base import Counter as Env
from mutants.proxy import Proxy
from openenv.v1 import environment_pb2 as pb

CAUGHT_BY = "lifecycle.step_after_end"
COLLATERAL = frozenset({"lifecycle.state_machine", "lifecycle.state_never_fails", "lifecycle.step_count"})


class Wire(Proxy):
    def answer(self, stream, req, resp):
        kind = resp.WhichOneof("kind")
        if kind in ("reset", "step"):
            stream.state["last"] = pb.TimeStep()
            stream.state["last"].CopyFrom(getattr(resp, kind).time_step)
        elif (
            kind == "error"
            and req is not None
            and req.WhichOneof("kind") == "step"
            and resp.error.code == 9
            and "over" in resp.error.message
            and "last" in stream.state
        ):
            fake = pb.SessionResponse(request_id=resp.request_id)
            fake.step.time_step.CopyFrom(stream.state["last"])
            fake.step.time_step.step_count += 1
            stream.state["last"].step_count += 1
            return [fake]
        return [resp]


__all__ = ["Env", "Wire"]
