"""Rule broken: an observation's Any holds the declared message type (docs/protocol.md §2.1).
A typed (protobuf) environment whose observations are sent as gridworld.v1.State."""

from gridworld.server import GridWorldEnvironment as Env
from mutants.proxy import Proxy

CAUGHT_BY = "schema.observations"
COLLATERAL = frozenset({"parity.grpc_vs_http", "vector.batch_matches_sequential"})


class Wire(Proxy):
    def answer(self, stream, req, resp):
        kind = resp.WhichOneof("kind")
        if kind == "step":
            resp.step.time_step.observation.message.type_url = "type.googleapis.com/gridworld.v1.State"
        return [resp]


__all__ = ["Env", "Wire"]
