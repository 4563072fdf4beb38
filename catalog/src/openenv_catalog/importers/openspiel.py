"""``openspiel:GAME``: an OpenSpiel game (``pyspiel``) as a multi-agent openenv environment.

``GAME`` is any OpenSpiel game string, parameters included (``tic_tac_toe``,
``goofspiel(num_cards=4)``). Agents are ``player_0`` .. ``player_{n-1}``; an action is an
OpenSpiel action id; each agent sees only its own view (kuhn poker: its own card); chance
nodes are played from the reset's seed; simultaneous-move games take joint actions
(:mod:`openenv_catalog.games.openspiel`).
"""

from __future__ import annotations

import re
from typing import Any

from openenv_catalog.games.bind import environment
from openenv_catalog.games.openspiel import OpenSpielGame, pyspiel

__all__ = ["CURATED", "load"]

# Listed and certified (each certification costs CI time): perfect and imperfect information,
# turn by turn and simultaneous. Any other game string imports too (leduc_poker, goofspiel(...)).
CURATED = (
    "tic_tac_toe",
    "connect_four",
    "kuhn_poker",
    "matrix_rps",
)


def load(game: str) -> type[Any]:
    """The environment class of the OpenSpiel game ``game``."""
    spiel = pyspiel()
    try:
        loaded = spiel.load_game(game)
    except spiel.SpielError as e:
        raise LookupError(f"open-spiel has no game {game!r}: {e}") from None
    kind = loaded.get_type()
    if kind.dynamics not in (spiel.GameType.Dynamics.SEQUENTIAL, spiel.GameType.Dynamics.SIMULTANEOUS):
        raise LookupError(f"{game!r} is a {kind.dynamics} game: only sequential and simultaneous games are served")
    if loaded.num_players() < 1:
        raise LookupError(f"{game!r} has no players")
    ident = re.sub(r"[^a-z0-9]+", "-", game.lower()).strip("-")
    game_cls = type(f"OpenSpiel_{ident.replace('-', '_')}", (OpenSpielGame,), {"game_string": game})
    dynamics = "simultaneous moves" if kind.dynamics == spiel.GameType.Dynamics.SIMULTANEOUS else "turn by turn"
    info = (
        "imperfect information"
        if kind.information != spiel.GameType.Information.PERFECT_INFORMATION
        else "perfect information"
    )
    return environment(
        game_cls,
        name=f"openspiel-{ident}",
        version=str(getattr(spiel, "__version__", "2")),
        description=(
            f"OpenSpiel's {kind.long_name} ({game}), imported: {loaded.num_players()} agents, {dynamics}, {info}."
        ),
        source=f"openspiel:{game}",
        kind="game",
    )
