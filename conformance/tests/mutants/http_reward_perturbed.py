"""Rule broken: the HTTP side of a server runs on the same session machinery as its gRPC side,
so the same seeded actions give the same results over both (docs/bridge.md). This server's HTTP
backend rewards a delta of 2 with 2.5 (inside the declared range, and consistent run after run,
so only a comparison of the two transports sees it)."""

from mutants.base import Counter as Env
from openenv.http.backend import LocalBackend

CAUGHT_BY = "parity.grpc_vs_http"
COLLATERAL: frozenset[str] = frozenset()


class HttpBackend(LocalBackend):
    def json_step(self, r):  # every time step of the HTTP side is shaped here (/ws, /mcp)
        ts = super().json_step(r)
        if ts.reward == 2.0:
            ts.reward = 2.5
        return ts


__all__ = ["Env", "HttpBackend"]
