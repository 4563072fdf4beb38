"""Rule broken: the other sessions of a world are told when a session leaves or joins (RFC 0016,
Seat events).

The runtime's worlds never queue a seat event (``setup`` patches them in the mutant's own server
process): a player whose opponent's connection dropped hears nothing, as in protocol 1.4."""

from typing import Any

from openenv.games import TicTacToe as Env

CAUGHT_BY = "multiagent.seat_events"
COLLATERAL: frozenset[str] = frozenset()
LEVELS = ("multiagent",)
CAUGHT_SAYING = ("LEFT",)


def setup() -> None:
    from openenv.runtime import world

    def announce(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    world.World._announce = announce


__all__ = ["Env"]
