"""Rule broken: a request waiting on other sessions ends at its SessionRequest.wait_timeout, answered
DEADLINE_EXCEEDED with nothing changed (RFC 0016, Wait deadlines).

The runtime's seats drop the wait_timeout (``setup`` patches them in the mutant's own server
process): an observe whose client gave up keeps waiting for the other agent's move, and the
session answers nothing meanwhile, as protocol 1.4 did."""

from typing import Any

from openenv.games import TicTacToe as Env

CAUGHT_BY = "multiagent.wait_deadlines"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("did not end the wait",)


def setup() -> None:
    from openenv.runtime import world

    real_observe, real_step = world.Seat.observe, world.Seat.step

    async def observe(self: Any, wait: bool, timeout: Any, wait_timeout: Any = None, seat_events: bool = False) -> Any:
        return await real_observe(self, wait, timeout, None, seat_events)

    async def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("wait_timeout", None)
        return await real_step(self, *args[:5], **kwargs)

    world.Seat.observe = observe
    world.Seat.step = step


__all__ = ["Env"]
