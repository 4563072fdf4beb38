"""Rule broken: a session that leaves frees its agents for another join (RFC 0012, Leaving).

The runtime's world forgets to release a leaving session's agents (``setup`` patches it in the
mutant's own server process): they stay taken, so nobody can ever act for them again."""

from typing import Any

from openenv.games import TicTacToe as Env

CAUGHT_BY = "multiagent.joins"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("left",)


def setup() -> None:
    from openenv.runtime import world

    real = world.World.leave

    async def leave(self: Any, seat: Any) -> None:
        held = {a: s for a, s in self.controller.items() if s is seat}
        await real(self, seat)
        if self.seats:  # the world goes on, but the leaver's agents stay taken
            self.controller.update(held)

    world.World.leave = leave


__all__ = ["Env"]
