"""Small environments the runtime's tests serve over real sockets.

Importable as ``openenv_testenvs`` (``conftest.py`` puts this directory on ``sys.path``),
so a subprocess can serve them too: ``openenv serve openenv_testenvs:Counter`` with this
directory as its working directory.

Every class counts how many instances were created and closed (``created``/``closed``,
class-level, thread-safe), so tests can assert that ``close()`` ran exactly once.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np

import openenv
from openenv.rubrics import ExponentialDiscountingTrajectoryRubric, Rubric, Score, WeightedSum
from openenv.v1 import tool_pb2

_LOCK = threading.Lock()


class Tracked(openenv.Environment):
    """Counts instances created and closed, per concrete class."""

    created: ClassVar[int] = 0
    closed: ClassVar[int] = 0

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        with _LOCK:
            type(self).created += 1

    def close(self) -> None:
        with _LOCK:
            type(self).closed += 1

    @classmethod
    def reset_counts(cls) -> None:
        with _LOCK:
            cls.created = cls.closed = 0


# --------------------------------------------------------------------------- counter


@dataclasses.dataclass
class CounterAction:
    """Add ``delta`` to the total; ``finish`` ends the episode after this step."""

    delta: int
    finish: Literal["", "terminated", "truncated"] = ""


class Counter(Tracked):
    """A stateful counter: the observation is the running total of the session's deltas.

    ``reset(seed=s)`` starts the total at ``s``. The reward of a step is ``float(delta)``.
    A ``delta`` above 1000 is rejected by the environment with ``InvalidAction``.
    Handshake option ``tag`` is echoed in every observation (session isolation checks).
    """

    action_type = CounterAction
    max_sessions = 128

    def __init__(self, tag: str = "", **options: Any) -> None:
        super().__init__(**options)
        self.tag = tag
        self.total = 0
        self.history: list[int] = []

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        self.total = seed or 0
        self.history = []
        return {"total": self.total, "tag": self.tag}

    def step(self, action: CounterAction) -> openenv.StepResult:
        if not isinstance(action, CounterAction):  # the runtime validated and built it
            raise TypeError(f"expected a CounterAction, got {type(action).__name__}")
        if action.delta > 1000:
            raise openenv.InvalidAction(f"delta {action.delta} is above 1000")
        self.total += action.delta
        self.history.append(action.delta)
        return openenv.StepResult(
            {"total": self.total, "tag": self.tag},
            reward=float(action.delta),
            terminated=action.finish == "terminated",
            truncated=action.finish == "truncated",
            metadata={"delta": action.delta},
        )

    def state(self) -> dict[str, Any]:
        return {"total": self.total, "history": list(self.history), "tag": self.tag}


class LimitedCounter(Counter):
    """The counter with a server-enforced step limit of 3."""

    max_episode_steps = 3


class AutoResetCounter(Counter):
    """The counter with ``auto_reset``: a step when no episode runs starts one."""

    auto_reset = True


class AsyncCounter(Counter):
    """The counter with coroutine methods (run on the event loop)."""

    async def reset(
        self,
        *,
        seed: int | None = None,
        episode_id: str | None = None,  # type: ignore[override]
        options: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        await asyncio.sleep(0)
        return Counter.reset(self, seed=seed, episode_id=episode_id, options=options)

    async def step(self, action: CounterAction) -> openenv.StepResult:  # type: ignore[override]
        await asyncio.sleep(0)
        return Counter.step(self, action)


# --------------------------------------------------------------------------- scripted


class Scripted(Tracked):
    """Untyped JSON actions that script the environment's behaviour, one op per step.

    ``{"op": "echo", "value": v}``: observation ``v``, no reward.
    ``{"op": "reward", "value": r}``: observation None, reward ``r`` (None, bool, number).
    ``{"op": "meta", "value": m}``: metadata ``m``.
    ``{"op": "raise", "message": s}``: raises ``ValueError(s)``.
    ``{"op": "invalid"}``: raises ``openenv.InvalidAction``.
    ``{"op": "sleep", "s": x}``: ``time.sleep(x)`` in the worker thread.
    ``{"op": "block"}``: waits (at most 10 s) until the class's ``gate`` is set.
    ``{"op": "bad_metadata"}``: returns metadata that is not JSON-like.
    ``{"op": "big", "n": n}``: observation of ``n`` characters (a small request, a big answer).
    """

    # "block" waits for the test (another party), so steps must stay on the worker threads even
    # after a run of fast ones (openenv.runtime.inline: such hooks opt out).
    inline_threshold_s = 0.0
    gate: ClassVar[threading.Event] = threading.Event()
    entered: ClassVar[threading.Event] = threading.Event()
    overlaps: ClassVar[int] = 0  # close() called while a step of the same instance still ran

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.stepping = False

    def close(self) -> None:
        if self.stepping:
            with _LOCK:
                type(self).overlaps += 1
        super().close()

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        return openenv.StepResult({"seed": seed, "episode_id": episode_id, "options": dict(options or {})})

    def step(self, action: Any) -> Any:
        self.stepping = True
        try:
            return self._step(action)
        finally:
            self.stepping = False

    def _step(self, action: Any) -> Any:
        op = action.get("op") if isinstance(action, dict) else None
        if op == "echo":
            return openenv.StepResult(action.get("value"))
        if op == "reward":
            return openenv.StepResult(None, reward=action.get("value"))
        if op == "meta":
            return openenv.StepResult("meta", metadata=action["value"])
        if op == "raise":
            raise ValueError(action.get("message", "boom"))
        if op == "invalid":
            raise openenv.InvalidAction("that move is against the rules")
        if op == "sleep":
            time.sleep(float(action["s"]))
            return openenv.StepResult("slept")
        if op == "block":
            type(self).entered.set()
            if not type(self).gate.wait(10.0):
                raise TimeoutError("the test never opened the gate")
            return openenv.StepResult("unblocked")
        if op == "big":
            return openenv.StepResult("y" * int(action["n"]))
        if op == "bad_metadata":
            return openenv.StepResult("x", metadata={"obj": object()})
        raise openenv.InvalidAction(f"unknown op {op!r}")

    def state(self) -> dict[str, Any]:
        return {"kind": "scripted"}


class AsyncSlow(Tracked):
    """Async environment whose step awaits ``asyncio.sleep(action["s"])``."""

    cancelled: ClassVar[int] = 0

    async def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> str:
        return "ready"

    async def step(self, action: Any) -> str:
        try:
            await asyncio.sleep(float(action["s"]))
        except asyncio.CancelledError:
            with _LOCK:
                type(self).cancelled += 1
            raise
        return "done"


class Failing(Tracked):
    """Every step raises ``ValueError("boom")``; reset and state work."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> str:
        return "ready"

    def step(self, action: Any) -> Any:
        raise ValueError("boom")


class CloseRaises(Counter):
    """A counter whose ``close()`` raises after counting."""

    def close(self) -> None:
        super().close()
        raise RuntimeError("close failed on purpose")


class FactoryFails(openenv.Environment):
    """The factory raises when the handshake option ``fail`` is true."""

    def __init__(self, fail: bool = False, **options: Any) -> None:
        super().__init__(**options)
        if fail:
            raise OSError("no GPU left")


# --------------------------------------------------------------------------- typed payloads


SCHEMA_ACTION: dict[str, Any] = {
    "type": "object",
    "properties": {"x": {"type": "integer", "minimum": 0}, "label": {"type": "string"}},
    "required": ["x"],
    "additionalProperties": False,
}


class SchemaEnv(Tracked):
    """Actions validated by an explicit JSON Schema (a dict)."""

    action_type = SCHEMA_ACTION

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return {}

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return {"x": action["x"] * 2}


class TensorEnv(Tracked):
    """float32[3] actions in [-10, 10]; the observation is the action times two."""

    action_type = openenv.TensorSpec("float32", (3,), minimum=-10.0, maximum=10.0)
    observation_type = openenv.TensorSpec("float32", (3,))

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        return np.zeros(3, dtype=np.float32)

    def step(self, action: np.ndarray) -> np.ndarray:
        return action * 2


class MessageEnv(Tracked):
    """Typed protobuf actions (``openenv.v1.TextContent``); the observation upper-cases them."""

    action_type = tool_pb2.TextContent
    observation_type = tool_pb2.TextContent

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> tool_pb2.TextContent:
        return tool_pb2.TextContent(text="")

    def step(self, action: tool_pb2.TextContent) -> Any:
        if action.text == "wrong-type":
            return {"not": "a message"}  # violates the declared observation type
        return tool_pb2.TextContent(text=action.text.upper())


# --------------------------------------------------------------------------- tools


class ToolEnv(Tracked):
    """Tools beside an ordinary step loop."""

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> str:
        return "ready"

    def step(self, action: Any) -> Any:
        return openenv.StepResult(action, reward=0.0)

    @openenv.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first term.
            b: second term.
        """
        return a + b

    @openenv.tool
    def explode(self) -> str:
        """Fails while running (a result with is_error, not a protocol error)."""
        raise RuntimeError("tool blew up")

    @openenv.tool
    async def nap(self, s: float) -> str:
        """Sleep ``s`` seconds on the event loop."""
        await asyncio.sleep(s)
        return "rested"


class FormTools(Tracked):
    """One tool of six arguments (one an object), with examples that fill them all: a
    description whose examples hold ``Struct`` maps (runtime/anys.py)."""

    action_type = openenv.CallToolAction
    example_actions = (
        openenv.CallToolAction(
            "register",
            {"name": "Ada", "city": "London", "age": 36, "email": "a@b.c", "phone": "0", "tags": {"y": 1, "x": 2}},
        ),
    )

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> openenv.StepResult:
        return openenv.StepResult(openenv.CallToolObservation())

    @openenv.tool
    def register(self, name: str, city: str, age: int, email: str, phone: str, tags: dict[str, int]) -> str:
        """Register a person.

        Args:
            name: their name.
            city: where they live.
            age: in years.
            email: an address.
            phone: a number.
            tags: labels and weights.
        """
        return f"{name} of {city}, {age}"


# --------------------------------------------------------------------------- concurrency


class Sleeper(Tracked):
    """Sync steps that block their worker thread (run_in_thread = True).

    Each step waits at the class's ``barrier`` (so N steps only finish if N run at the
    same time), then until ``release`` is set. Both waits are bounded.
    """

    run_in_thread = True
    inline_threshold_s = 0.0  # a barrier between sessions: never on the loop (openenv.runtime.inline)
    barrier: ClassVar[threading.Barrier] = threading.Barrier(1)
    release: ClassVar[threading.Event] = threading.Event()
    in_step: ClassVar[int] = 0  # steps past the barrier, waiting for release

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: Mapping[str, Any] | None = None
    ) -> str:
        return "ready"

    def step(self, action: Any) -> str:
        type(self).barrier.wait(timeout=20.0)
        with _LOCK:
            type(self).in_step += 1
        if not type(self).release.wait(20.0):
            raise TimeoutError("release was never set")
        time.sleep(0.01)
        return "slept"


# --------------------------------------------------------------------------- isolation (RFC 0003)


class Fragile(openenv.Environment):
    """Counts steps; the action ``"exit"`` calls ``os._exit``, ``"segv"`` dereferences NULL.
    Workers of ``--isolation process`` import it from here (by reference)."""

    max_sessions = 4

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.n = 0

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> dict[str, int]:
        self.n = 0
        return {"n": 0, "pid": os.getpid()}

    def step(self, action: str) -> dict[str, int]:
        if action == "exit":
            os._exit(3)
        if action == "segv":
            ctypes.string_at(0)  # SIGSEGV in native code
        self.n += 1
        return {"n": self.n, "pid": os.getpid()}

    @openenv.tool
    def where(self) -> int:
        """The worker's process id."""
        return os.getpid()


class _SameProcess(Rubric):
    """1 when the rubric runs in the environment's own process (it reads the instance)."""

    def score(self, action: Any, observation: Any) -> Score:
        return Score(1.0 if self.env.pid == os.getpid() else 0.0, reason=f"scored in {os.getpid()}")


class RatedRace(openenv.Environment):
    """Steps until ``"win"`` or ``"lose"``; rewarded by a rubric tree that reads the instance
    (``self.env.pid``: where the rubric runs) and a discounted trajectory rubric (per-episode
    state: credits, and snapshots carry it). For ``--isolation process``."""

    action_type = str
    max_sessions = 4
    snapshots = True
    rubric = WeightedSum(
        [
            _SameProcess(name="same_process"),
            ExponentialDiscountingTrajectoryRubric(
                lambda trajectory: 1.0 if trajectory[-1][0] == "win" else -1.0, gamma=0.5, name="episode"
            ),
        ],
        name="reward",
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.pid = os.getpid()
        self.steps = 0

    def reset(self, *, seed: Any = None, episode_id: Any = None, options: Any = None) -> dict[str, int]:
        self.steps = 0
        return {"pid": self.pid}

    def step(self, action: str) -> openenv.StepResult:
        self.steps += 1
        return openenv.StepResult({"pid": self.pid, "steps": self.steps}, terminated=action in ("win", "lose"))

    def snapshot(self) -> bytes:
        return str(self.steps).encode()

    def restore(self, data: bytes) -> None:
        self.steps = int(data)
