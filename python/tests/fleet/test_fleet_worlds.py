"""Agent vs agent through a fleet (RFC 0012, "Fleets"): one client creates a tic-tac-toe world on
the server the fleet picks, a second client (its own ``FleetClient``, as another process would
have) joins the same world from a ticket or the bare join token, and they play it out. Real
``openenv serve`` processes (the ``local`` provider, port 0), real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openenv_testkit import server_thread

from openenv import EnvClient
from openenv.errors import FailedPrecondition, InvalidArgument, NotFound
from openenv.fleet import FleetClient, LocalProvider, WorldTicket
from openenv.games import TicTacToe

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def ttt_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProvider]:
    # One world per server: a server whose slot a world holds is full, yet takes that world's joins.
    state = tmp_path_factory.mktemp("fleet")
    provider = LocalProvider("openenv.games:TicTacToe", max_sessions=1, state_dir=str(state))
    try:
        provider.up(2)
        yield provider
    finally:
        provider.down(grace_s=5.0)


async def _play(moves: dict[str, list[int]], seats: dict[str, EnvClient]) -> dict[str, float]:
    """Each seat plays its own moves in turn, waiting for its turn with observe(wait); the
    returns each seat received for its agent."""
    returns = {a: 0.0 for a in seats}
    r = {a: await s.reset() for a, s in sorted(seats.items(), key=lambda kv: not kv[1].world.owner)}
    assert all(x.to_act == ["x"] for x in r.values())
    done = False
    while not done:
        for agent, seat in seats.items():
            now = await seat.observe(wait=True)
            if now.done:
                done = True
                returns[agent] += now.agents[agent].reward or 0.0
                continue
            assert now.to_act == [agent]
            view = now.agents[agent].observation
            cell = moves[agent].pop(0)
            assert view["action_mask"][cell] == 1
            after = await seat.step(cell)
            returns[agent] += after.agents[agent].reward or 0.0
            done = after.done
            if done:
                break
    for agent, seat in seats.items():  # the other seat's reward of the last move
        last = await seat.observe()
        if last.agents[agent].reward is not None:
            returns[agent] += last.agents[agent].reward
    return returns


async def test_two_clients_of_a_fleet_play_tic_tac_toe_in_one_world(ttt_fleet: LocalProvider) -> None:
    """The creator is placed by load; the joiner reaches the same world on a full server from the
    ticket alone, and another pair finds its world from the bare join token."""
    urls = {ep.url for ep in ttt_fleet.endpoints()}
    async with FleetClient(ttt_fleet) as alice_fleet, FleetClient(ttt_fleet) as bob_fleet:
        alice = await alice_fleet.open(agent_ids=["x"])
        ticket = alice_fleet.ticket(alice)
        assert ticket.server == alice_fleet.server_of(alice) and ticket.join_token == alice.world.join_token
        assert WorldTicket.parse(str(ticket)) == ticket

        bob = await bob_fleet.join(str(ticket))  # its server is now full: the join takes no slot
        assert bob_fleet.server_of(bob) == ticket.server
        assert (bob.world.world_id, list(bob.world.agent_ids), bob.world.owner) == (alice.world.world_id, ["o"], False)

        # x takes the diagonal; o answers elsewhere: x wins on its third move.
        returns = await _play({"x": [0, 4, 8], "o": [1, 2]}, {"x": alice, "o": bob})
        assert returns == {"x": 1.0, "o": -1.0}

        # A second world goes to the other server (the first is full); joined by token alone.
        carol = await alice_fleet.open(agent_ids=["o"])
        assert {alice_fleet.server_of(alice), alice_fleet.server_of(carol)} == urls
        dave = await bob_fleet.join(carol.world.join_token)
        assert bob_fleet.server_of(dave) == alice_fleet.server_of(carol)
        assert (dave.world.world_id, list(dave.world.agent_ids)) == (carol.world.world_id, ["x"])
        returns = await _play({"x": [4, 0, 6, 5, 7], "o": [8, 2, 3, 1]}, {"x": dave, "o": carol})
        assert returns == {"x": 0.0, "o": 0.0}  # a draw

        # Refusals: the world's own (its agents are taken), an unknown token, a foreign server.
        with pytest.raises(FailedPrecondition):
            await bob_fleet.join(ticket)
        with pytest.raises(NotFound, match="no server of the fleet has a world with that join token"):
            await bob_fleet.join("no-such-token")
        with pytest.raises(InvalidArgument, match="not a server of this fleet"):
            await bob_fleet.join(WorldTicket(ticket.join_token, "grpc://127.0.0.1:1"))


def test_the_blocking_fleet_client_hands_over_and_joins_a_world_too() -> None:
    """``fleet.sync()``: ``ticket`` of a blocking session and ``join`` returning one, on two
    servers in threads (port 0)."""
    with server_thread(TicTacToe) as a, server_thread(TicTacToe) as b:
        urls = [a.address, b.address]
        with FleetClient(urls).sync() as first, FleetClient(urls).sync() as second:
            x = first.open(agent_ids=["x"])
            ticket = first.ticket(x)
            o = second.join(ticket)
            assert o.server == x.server == ticket.server
            assert list(o.client.world.agent_ids) == ["o"]
            x.reset()
            assert o.reset().to_act == ["x"]
            x.step(4)
            seen = o.observe(wait=True)
            assert seen.to_act == ["o"] and seen.agents["o"].observation["board"][4] == 2
