"""Not a mutant: a correct environment that offers the timeout search its test hook
(``EnvironmentInfo.metadata["openenv.certify"]["slow_action"]``). Its steps answer at once on
the event loop, but for one action no generated value reaches (a token string), which awaits
a 20 ms remote call: ``lifecycle.timeout_aborts`` must try it first and pass, naming it."""

import asyncio
from typing import Any, ClassVar

from mutants.base import ACTION, Counter

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()

SLOW = {"delta": 1, "token": "conformance-slow-7f3a"}


class Env(Counter):
    action_type: ClassVar[dict[str, Any]] = {
        **ACTION,
        "properties": {**ACTION["properties"], "token": {"type": "string"}},
    }
    metadata: ClassVar[dict[str, Any]] = {"openenv.certify": {"slow_action": SLOW}}

    async def step(self, action):
        if action.get("token") == SLOW["token"]:
            await asyncio.sleep(0.020)  # awaited: the loop stays free, and a timeout can fire
        return Counter.step(self, action)
