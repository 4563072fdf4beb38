"""Rule broken: the HTTP side of a server runs on the same session machinery as its gRPC side,
so the same seeded actions give the same results over both (docs/bridge.md). This server's HTTP
backend rewards a delta of 2 with 2.5 (inside the declared range, and consistent run after run,
so only a comparison of the two transports sees it)."""

from mutants.base import Counter as Env
from openenv.bridge.backend import LocalBackend, LocalSession

CAUGHT_BY = "parity.grpc_vs_http"
COLLATERAL: frozenset[str] = frozenset()


class _Session(LocalSession):
    async def step(self, action, timeout=None):
        ts = await super().step(action, timeout)
        if ts.reward == 2.0:
            ts.reward = 2.5
        return ts


class HttpBackend(LocalBackend):
    async def open(self, options=None, client_name=""):
        return _Session(self, await self.manager.open(options, client_name))


__all__ = ["Env", "HttpBackend"]
