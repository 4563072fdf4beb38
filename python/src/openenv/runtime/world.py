"""Multi-agent worlds (RFC 0012): one environment instance, several agents, one or more sessions.

A :class:`World` holds one :class:`~openenv.runtime.multiagent.MultiAgentEnvironment` instance
(through an ordinary :class:`~openenv.runtime.session.Session`, which counts against the
server's capacity, and is reaped and drained like any other) and the world's episode: who is to
act, which agents are done, the rewards each agent has not yet been told, the actions of a
simultaneous step still being gathered. A :class:`Seat` is one stream's part of a world: the
agents it acts for. The owner's seat creates the world (a handshake without a join token);
other seats join with the world's join token (:class:`Worlds`, one registry per server). The
world closes when its last seat leaves.

Seats are announced (RFC 0016): a seat that leaves, joins, or whose rejoin deadline passes is
reported to every other seat in its next time step (``seat_events``), and ``observe`` with
``wait`` answers for it. A seat left empty while the episode runs is held for the environment's
``rejoin_timeout``; then its ``vacancy`` rule (truncate, or the environment's ``forfeit``) ends
the episode. Every wait on other seats may carry a deadline (``wait_timeout``): at its expiry
the wait ends ``DEADLINE_EXCEEDED`` with nothing changed, so the seat answers its next request.

Every call into the environment goes through the world's lock, whichever seat makes it, so
calls never overlap. Waiting (for one's turn, for the other agents of a simultaneous step, for
the owner's next episode) is on the world's condition, woken by every change.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from openenv.errors import (
    Aborted,
    DeadlineExceeded,
    EnvError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from openenv.protocol import AgentStep, EpisodeStatus, SeatEvent, SessionState, StepResult
from openenv.runtime.multiagent import MultiAgentEnvironment, WorldStep
from openenv.runtime.session import Session, SessionManager, _check_reward

__all__ = ["Seat", "World", "Worlds"]

log = logging.getLogger("openenv.world")


def _bound(*timeouts: float | None) -> float | None:
    """The earliest of the given timeouts (None: unbounded), never negative."""
    given = [t for t in timeouts if t is not None]
    return max(min(given), 0.0) if given else None


def _flags(value: Mapping[str, bool] | bool, agents: Sequence[str]) -> dict[str, bool]:
    if isinstance(value, bool):
        return dict.fromkeys(agents, value)
    if not isinstance(value, Mapping):
        raise TypeError(f"terminated, truncated: a bool or a mapping agent id -> bool, not {type(value).__name__}")
    return {str(k): bool(v) for k, v in value.items()}


class World:
    """One multi-agent environment instance and its episode, shared by the seats in it."""

    def __init__(self, worlds: Worlds, session: Session) -> None:
        self.worlds = worlds
        self.session = session
        self.runtime = session.runtime
        cls = self.runtime.env_cls
        assert issubclass(cls, MultiAgentEnvironment)
        self.cls = cls
        self.env: MultiAgentEnvironment = session.env  # type: ignore[assignment]
        self.agents: tuple[str, ...] = cls.agent_ids()
        self.id = session.id
        self.join_token = worlds.manager.token_prefix + secrets.token_urlsafe(24) if cls.joinable else ""
        self.seats: list[Seat] = []
        self.controller: dict[str, Seat] = {}
        self.lock = asyncio.Lock()
        self.changed = asyncio.Condition(self.lock)
        self.version = 0  # +1 on every reset, world step and refused joint step
        self.to_act: list[str] = []
        self.terminated: dict[str, bool] = {}
        self.truncated: dict[str, bool] = {}
        self.pending_rewards: dict[str, float] = {}  # not yet told to the agent's session
        self.breakdowns: dict[str, Any] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        self.metadata: dict[str, Any] = {}
        self.last_actor: str | None = None
        self.gathered: dict[str, Any] = {}  # simultaneous: actions of the current world step so far
        self.step_error: tuple[int, EnvError] | None = None  # a joint step the environment refused
        self.closed = False
        self._wakes: set[asyncio.Future[None]] = set()
        # RFC 0016: agents whose seat was left empty in a running episode -> rejoin deadline
        # (time.monotonic()), and the task applying the vacancy rule when it passes.
        self.vacant: dict[str, float] = {}
        self._expiries: set[asyncio.Task[None]] = set()
        session.on_terminate(self._terminate_all)

    # -- plumbing

    @property
    def status(self) -> EpisodeStatus:
        return self.session.status

    def _terminate_all(self, error: EnvError) -> None:
        for seat in list(self.seats):
            if seat._terminate is not None:
                err = type(error)(error.message)
                err.fatal = True
                seat._terminate(err)

    async def _env(self, fn: Callable[..., Any], hook: str, *args: Any, timeout: float | None = None) -> Any:
        s = self.session
        return await s._guard(s._call(fn, hook in self.runtime.is_async, *args, timeout=timeout, what=hook))

    async def _who_acts(self) -> list[str]:
        if self.status is not EpisodeStatus.RUNNING:
            return []
        acting = await self._env(self.env.to_act, "to_act")
        out = [str(a) for a in acting]
        unknown = [a for a in out if a not in self.agents]
        if unknown:
            raise Internal(f"{self.cls.__name__}.to_act named unknown agents {unknown}")
        return out

    def _apply(self, out: Any, *, reset: bool) -> None:
        """Fold what reset or step returned into the world's per-agent state."""
        if out is None:
            out = WorldStep()
        if not isinstance(out, WorldStep):
            raise Internal(
                f"{self.cls.__name__}.{'reset' if reset else 'step'} returned {type(out).__name__}: "
                "return None or an openenv.WorldStep"
            )
        for agent, r in dict(out.rewards).items():
            if agent not in self.agents:
                raise Internal(f"a reward for unknown agent {agent!r}")
            value = _check_reward(r)
            if value is not None:
                self.pending_rewards[agent] = self.pending_rewards.get(agent, 0.0) + value
        for target, given in ((self.terminated, out.terminated), (self.truncated, out.truncated)):
            for agent, flag in _flags(given, self.agents).items():
                if agent not in self.agents:
                    raise Internal(f"an end flag for unknown agent {agent!r}")
                if flag:
                    target[agent] = True
        for agent, info in dict(out.infos).items():
            self.infos[str(agent)] = dict(info)
        for agent, bd in dict(out.reward_breakdowns).items():
            self.breakdowns[str(agent)] = bd
        self.metadata = dict(out.metadata or {})

    def _done(self, agent: str) -> bool:
        return self.terminated.get(agent, False) or self.truncated.get(agent, False)

    def _settle_status(self) -> None:
        limit = self.cls.max_episode_steps
        s = self.session
        if limit is not None and s.step_count >= limit:
            for a in self.agents:
                if not self._done(a):
                    self.truncated[a] = True
        if all(self._done(a) for a in self.agents):
            s.status = (
                EpisodeStatus.TERMINATED
                if all(self.terminated.get(a, False) for a in self.agents)
                else EpisodeStatus.TRUNCATED
            )

    def _bump(self) -> None:
        self.version += 1
        self.changed.notify_all()

    # -- seats

    def seat(self, agent_ids: Sequence[str], *, joining: bool) -> Seat:
        """A new seat acting for ``agent_ids`` (empty: every agent nobody acts for)."""
        if self.closed:
            raise NotFound("the world is closed", fatal=True)
        unknown = [a for a in agent_ids if a not in self.agents]
        if unknown:
            raise InvalidArgument(f"unknown agents {unknown}: this world's agents are {list(self.agents)}", fatal=True)
        if len(set(agent_ids)) != len(agent_ids):
            raise InvalidArgument("agent ids must not repeat", fatal=True)
        taken = [a for a in agent_ids if a in self.controller]
        if taken:
            raise FailedPrecondition(f"another session acts for {taken}", fatal=True)
        chosen = list(agent_ids) or [a for a in self.agents if a not in self.controller]
        if not chosen:
            raise FailedPrecondition(
                f"every agent of world {self.id} has a session acting for it; none is left to join", fatal=True
            )
        seat = Seat(self, tuple(a for a in self.agents if a in chosen))
        for a in seat.agents:
            self.controller[a] = seat
            self.vacant.pop(a, None)  # filled before its deadline: the rule no longer applies
        self.seats.append(seat)
        if joining:
            self._announce("joined", seat.agents, None, but=seat)
            self.changed_soon()
        return seat

    def _announce(self, kind: str, agents: Sequence[str], deadline: float | None, but: Seat | None = None) -> None:
        """Queue a seat event for every seat but ``but`` (delivered with its next time step)."""
        for other in self.seats:
            if other is not but:
                other.events.append((kind, tuple(agents), deadline))

    def changed_soon(self) -> None:
        """Wake the waiters (a join or a leave) without a version change."""

        async def wake() -> None:
            async with self.changed:
                self.changed.notify_all()

        task = asyncio.ensure_future(wake())
        self._wakes.add(task)
        task.add_done_callback(self._wakes.discard)

    async def leave(self, seat: Seat) -> None:
        if seat not in self.seats:
            return
        self.seats.remove(seat)
        for a in seat.agents:
            if self.controller.get(a) is seat:
                del self.controller[a]
            self.gathered.pop(a, None)
        if self.seats:
            deadline = None
            timeout = getattr(self.cls, "rejoin_timeout", None)
            in_play = [a for a in seat.agents if not self._done(a)]
            if self.status is EpisodeStatus.RUNNING and in_play and timeout is not None:
                deadline = time.monotonic() + timeout
                for a in in_play:
                    self.vacant[a] = deadline
                task = asyncio.ensure_future(self._expire(tuple(in_play), deadline, self.session.episode_id))
                self._expiries.add(task)
                task.add_done_callback(self._expiries.discard)
            self._announce("left", seat.agents, deadline)
            self.changed_soon()
            return
        self.closed = True
        for task in list(self._expiries):
            task.cancel()
        self.worlds.forget(self)
        await self.session.close()

    async def _expire(self, agents: tuple[str, ...], deadline: float, episode: str) -> None:
        """At ``deadline``: if ``agents`` still have nobody acting for them in the same running
        episode, announce it and end the episode by the environment's vacancy rule."""
        await asyncio.sleep(max(deadline - time.monotonic(), 0.0))
        async with self.changed:
            absent = [a for a in agents if self.vacant.get(a) == deadline and a not in self.controller]
            if (
                self.closed
                or not absent
                or self.session.episode_id != episode
                or self.status is not EpisodeStatus.RUNNING
            ):
                return
            for a in absent:
                self.vacant.pop(a, None)
            self._announce("expired", absent, None)
            if getattr(self.cls, "vacancy", "truncate") == "forfeit":
                try:
                    out = await self._env(self.env.forfeit, "forfeit", list(absent))
                    self._apply(out, reset=False)
                except Exception:  # the rule still ends the episode: truncation, as if declared
                    log.warning("%s.forfeit failed; the episode is truncated instead", self.cls.__name__, exc_info=True)
            for a in self.agents:
                if not self._done(a):
                    self.truncated[a] = True
            self.gathered = {}
            self._settle_status()
            self.to_act = []
            self._bump()


class Seat:
    """One stream's part of a world: the agents it acts for (the engine's session object for a
    multi-agent stream, as :class:`~openenv.runtime.vector.VectorSession` is for a vectorised one)."""

    def __init__(self, world: World, agents: tuple[str, ...]) -> None:
        self.world = world
        self.agents = agents
        self.id = uuid.uuid4().hex
        self.seen_version = -1
        self.seen_episode = ""
        self._terminate: Callable[[EnvError], None] | None = None
        self.closed = False
        # RFC 0016: seat events not yet delivered: (kind, agents, rejoin deadline or None).
        self.events: list[tuple[str, tuple[str, ...], float | None]] = []

    @property
    def owner(self) -> bool:
        """True for the seat whose reset starts the world's episodes (the first still in it)."""
        return bool(self.world.seats) and self.world.seats[0] is self

    @property
    def everyone(self) -> bool:
        """True when this seat acts for every agent (self-play): it may read the world's state."""
        return len(self.agents) == len(self.world.agents)

    def on_terminate(self, callback: Callable[[EnvError], None]) -> None:
        """Register how the transport ends this seat's stream (the world's idle timeout, drain)."""
        self._terminate = callback

    async def close(self) -> None:
        """Leave the world (its agents wait for another session); the last seat closes it."""
        if self.closed:
            return
        self.closed = True
        await asyncio.shield(self.world.leave(self))

    # -- the time step this seat sees

    async def _views(self) -> list[Any]:
        w = self.world
        if "observe" in w.runtime.is_async:
            return [await w._env(w.env.observe, "observe", a) for a in self.agents]
        env = w.env
        return list(await w._env(lambda: [env.observe(a) for a in self.agents], "observe"))  # one hand-off

    async def _time_step(self) -> StepResult[Any]:
        """This seat's time step now (under the world's lock): its agents' views, the rewards they
        have not been told yet (now told), their flags, and who is to act."""
        w = self.world
        views = await self._views()
        out: StepResult[Any] = StepResult()
        for agent, view in zip(self.agents, views, strict=True):
            reward = w.pending_rewards.pop(agent, None)
            out.agents[agent] = AgentStep(
                observation=view,
                reward=reward,
                terminated=w.terminated.get(agent, False),
                truncated=w.truncated.get(agent, False),
                metadata=w.infos.pop(agent, {}),
                reward_breakdown=w.breakdowns.pop(agent, None),
            )
        out.to_act = list(w.to_act)
        mine_to_act = [a for a in w.to_act if a in out.agents]
        summary = mine_to_act[0] if mine_to_act else self.agents[0]
        out.observation = out.agents[summary].observation
        if w.last_actor is not None and w.last_actor in out.agents:
            out.reward = out.agents[w.last_actor].reward
        out.terminated = w.status is EpisodeStatus.TERMINATED
        out.truncated = w.status is EpisodeStatus.TRUNCATED
        out.metadata = dict(w.metadata)
        out.episode_id, out.step_count = w.session.episode_id, w.session.step_count
        now = time.monotonic()
        out.seat_events = [
            SeatEvent(kind, list(agents), None if deadline is None else max(deadline - now, 0.0))
            for kind, agents, deadline in self.events
        ]
        self.events = []
        self.seen_version, self.seen_episode = w.version, w.session.episode_id
        return out

    # -- requests

    async def reset(
        self,
        seed: int | None,
        episode_id: str | None,
        options: Mapping[str, Any] | None,
        wait_timeout: float | None = None,
    ) -> StepResult[Any]:
        """The owner's reset starts a new episode of the world; another seat's waits for the
        first episode it has not seen (the owner's next reset, or the current one), at most
        ``wait_timeout`` seconds (then ``DEADLINE_EXCEEDED``, nothing changed)."""
        w = self.world
        async with w.changed:
            if not self.owner:
                try:
                    await asyncio.wait_for(
                        w.changed.wait_for(
                            lambda: self.closed or self.owner or w.session.episode_id != self.seen_episode
                        ),
                        _bound(wait_timeout),
                    )
                except TimeoutError:
                    raise DeadlineExceeded(
                        f"the world's owner started no episode within the request's wait_timeout ({wait_timeout:g} s)"
                    ) from None
                if not self.owner:  # the owner started an episode this seat has not seen
                    return await self._time_step()
            out = await w.session.reset(seed, episode_id, options)
            # The runtime's reset set episode id, step count 0 and the status from the flat
            # result; the world's own flags come from the WorldStep the environment returned.
            w.terminated, w.truncated, w.pending_rewards, w.breakdowns, w.infos = {}, {}, {}, {}, {}
            w.gathered, w.last_actor, w.step_error = {}, None, None
            w.session.status = EpisodeStatus.RUNNING
            w._apply(out.observation if isinstance(out.observation, WorldStep) else None, reset=True)
            w._settle_status()
            w.to_act = await w._who_acts()
            w._bump()
            return await self._time_step()

    def _one_agent(self, agent_id: str) -> str:
        w = self.world
        if agent_id:
            if agent_id not in w.agents:
                raise InvalidArgument(f"unknown agent {agent_id!r}: this world's agents are {list(w.agents)}")
            if agent_id not in self.agents:
                raise PermissionDenied(f"this session does not act for {agent_id!r} (it acts for {list(self.agents)})")
            return agent_id
        mine = [a for a in w.to_act if a in self.agents]
        if len(mine) == 1:
            return mine[0]
        if not mine:
            raise FailedPrecondition(
                f"none of this session's agents {list(self.agents)} is to act (to act: {w.to_act}); "
                "observe with wait waits for its turn"
            )
        raise InvalidArgument(f"several of this session's agents are to act ({mine}): name one with agent_id")

    def _require_running(self) -> None:
        s = self.world.session
        if s.status is EpisodeStatus.NOT_STARTED:
            raise FailedPrecondition("step before reset: call reset first")
        if s.status is not EpisodeStatus.RUNNING:
            raise FailedPrecondition(f"the episode is over ({s.status.name.lower()}): call reset first")

    async def step(
        self,
        action: Any,
        agent_id: str,
        actions: Mapping[str, Any] | None,
        timeout: float | None,
        has_action: bool = True,
        wait_timeout: float | None = None,
    ) -> StepResult[Any]:
        """One action (turn-based, or one agent's part of a simultaneous step) or this seat's
        part of a joint action (``actions``). A simultaneous step waits for the other seats'
        actions at most ``timeout`` and ``wait_timeout`` seconds (``DEADLINE_EXCEEDED``, this
        seat's actions withdrawn); a seat of an agent to act that leaves meanwhile ends the wait
        ``ABORTED`` (the actions withdrawn: RFC 0016)."""
        w = self.world
        if actions and has_action:
            raise InvalidArgument("set either action or actions, not both")
        async with w.changed:
            self._require_running()
            if actions:
                for a in actions:
                    if a not in w.agents:
                        raise InvalidArgument(f"unknown agent {a!r}: this world's agents are {list(w.agents)}")
                    if a not in self.agents:
                        raise PermissionDenied(f"this session does not act for {a!r} (it acts for {list(self.agents)})")
                given = dict(actions)
            else:
                given = {self._one_agent(agent_id): action}
            not_to_act = [a for a in given if a not in w.to_act]
            if not_to_act:
                raise FailedPrecondition(f"{not_to_act[0]!r} is not to act now (to act: {w.to_act})")
            if not w.cls.simultaneous:
                if len(given) != 1:
                    raise InvalidArgument("a turn-based world takes one action per step")
                return await self._world_step({a: self._narrowed(a, x) for a, x in given.items()}, timeout)
            missing = [a for a in w.to_act if a in self.agents and a not in given and a not in w.gathered]
            if missing:
                raise InvalidArgument(
                    f"a simultaneous step needs an action for each of this session's agents to act: missing {missing}"
                )
            again = [a for a in given if a in w.gathered]
            if again:
                raise FailedPrecondition(f"{again} already have an action for this world step")
            given = {a: self._narrowed(a, x) for a, x in given.items()}
            w.gathered.update(given)
            if all(a in w.gathered for a in w.to_act):
                joint, w.gathered = {a: w.gathered[a] for a in w.to_act}, {}
                try:
                    return await self._world_step(joint, timeout)
                except EnvError as e:
                    w.step_error = (w.version, e)  # the others' parts were refused with it
                    w._bump()
                    raise
            # Wait for the other sessions' agents; the world steps in the last one's request.
            version, episode = w.version, w.session.episode_id
            seated = [a for a in w.to_act if a in w.controller and a not in self.agents]

            def gone() -> list[str]:  # agents to act whose seat left during this wait
                return [a for a in seated if a not in w.controller]

            bound = _bound(timeout, wait_timeout)
            try:
                await asyncio.wait_for(
                    w.changed.wait_for(lambda: w.version != version or self.closed or bool(gone())), bound
                )
            except TimeoutError:
                for a in given:
                    w.gathered.pop(a, None)
                raise DeadlineExceeded(
                    f"the other agents did not act within {bound:g} s; this session's actions were withdrawn"
                ) from None
            if w.version == version and gone():
                for a in given:
                    w.gathered.pop(a, None)
                left = gone()
                deadline = min((w.vacant[a] for a in left if a in w.vacant), default=None)
                within = (
                    ""
                    if deadline is None
                    else f" (a session may join for them within {deadline - time.monotonic():.0f} s)"
                )
                raise Aborted(
                    f"the session acting for {left} left the world{within}; this session's actions were withdrawn"
                )
            if w.step_error is not None and w.step_error[0] == version:
                err = w.step_error[1]
                raise type(err)(f"the joint action was refused: {err.message}")
            if w.session.episode_id != episode:
                raise Aborted("the world's owner started a new episode before the joint action was complete")
            return await self._time_step()

    def _narrowed(self, agent: str, action: Any) -> Any:
        """``action`` validated against ``agent``'s own action declaration, when it has one
        (RFC 0016: ``agent_action_types``); INVALID_ARGUMENT otherwise."""
        codec = self.world.runtime.agent_action_codecs.get(agent)
        if codec is None:
            return action
        try:
            return codec.decode(codec.encode(action))
        except EnvError:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"{agent!r}'s action is not of its declared type: {e}") from None

    async def _world_step(self, joint: dict[str, Any], timeout: float | None) -> StepResult[Any]:
        w = self.world
        s = w.session
        try:
            out = await w._env(w.env.step, "step", joint, timeout=timeout)
        except DeadlineExceeded:  # the environment's state is unknown: the episode is aborted, as alone
            s.status, w.to_act = EpisodeStatus.ABORTED, []
            w._bump()
            raise
        w._apply(out, reset=False)
        s.step_count += 1
        w.last_actor = next(iter(joint)) if len(joint) == 1 else None
        w._settle_status()
        w.to_act = await w._who_acts()
        w._bump()
        return await self._time_step()

    async def observe(
        self, wait: bool, timeout: float | None, wait_timeout: float | None = None, seat_events: bool = False
    ) -> StepResult[Any]:
        """This seat's time step now, or (``wait``) once one of its agents is to act with no
        action pending, the episode ended, a new episode started, or (``seat_events``) a seat
        event happened (RFC 0016), that this seat has not seen; at most ``timeout`` and ``wait_timeout`` seconds
        (then ``DEADLINE_EXCEEDED``, nothing changed)."""
        w = self.world

        def ready() -> bool:
            if self.closed or (seat_events and self.events):
                return True
            if w.status is EpisodeStatus.NOT_STARTED:
                return False
            if w.session.episode_id != self.seen_episode:
                return bool(w.session.episode_id)
            if w.status is EpisodeStatus.RUNNING:
                return any(a in self.agents and a not in w.gathered for a in w.to_act)
            return w.version != self.seen_version

        async with w.changed:
            if wait and not ready():
                bound = _bound(timeout, wait_timeout)
                try:
                    await asyncio.wait_for(w.changed.wait_for(ready), bound)
                except TimeoutError:
                    raise DeadlineExceeded(f"nothing for this session's agents within {bound:g} s") from None
            return await self._time_step()

    async def state(self) -> SessionState:
        """The runtime's part of the world's state; the environment's (the whole world) only for
        a seat acting for every agent."""
        s = self.world.session
        st = await s.state() if self.everyone else None
        return SessionState(s.episode_id, s.step_count, s.status, st.state if st is not None else None)


class Worlds:
    """The worlds of one server, by join token."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        self.by_token: dict[str, World] = {}

    @classmethod
    def of(cls, manager: SessionManager) -> Worlds:
        """The registry of ``manager`` (one per server: every listener shares it)."""
        found: Worlds | None = getattr(manager, "_openenv_worlds", None)
        if found is None:
            found = cls(manager)
            manager._openenv_worlds = found  # type: ignore[attr-defined]
        return found

    async def create(self, options: Mapping[str, Any] | None, client_name: str, agent_ids: Sequence[str]) -> Seat:
        """A new world (a session slot) and its owner's seat."""
        cls = self.manager.runtime.env_cls
        if agent_ids and not getattr(cls, "joinable", True) and set(agent_ids) != set(cls.agent_ids()):  # type: ignore[attr-defined]
            raise FailedPrecondition(
                f"{cls.__name__} worlds are not joinable: a session acts for every agent (self-play)", fatal=True
            )
        session = await self.manager.open(options, client_name)
        world = World(self, session)
        try:
            seat = world.seat(list(agent_ids), joining=False)
        except BaseException:
            await session.close()
            raise
        if world.join_token:
            self.by_token[world.join_token] = world
        return seat

    def join(self, token: str, agent_ids: Sequence[str]) -> Seat:
        """A seat in the world of ``token``."""
        world = self.by_token.get(token)
        if world is None or world.closed:
            raise NotFound("no world on this server has this join token (it may have closed)", fatal=True)
        return world.seat(list(agent_ids), joining=True)

    def forget(self, world: World) -> None:
        self.by_token.pop(world.join_token, None)
