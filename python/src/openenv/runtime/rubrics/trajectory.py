"""Episode-level rubrics whose final score is credited back to the steps."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from openenv.runtime.rubrics.base import (
    Rubric,
    Score,
    _as_score,
    _summary,
)

# What ``fn`` computes from the trajectory: the final score, or an awaitable of it.
_TrajectoryFn: TypeAlias = Callable[[list[tuple[Any, Any]]], float | Score | Awaitable[float | Score]]


class TrajectoryRubric(Rubric):
    """An episode-level score credited to steps.

    Every step it is evaluated on is recorded in ``trajectory`` as ``(action,
    observation)``. Until the episode ends the node scores ``intermediate_reward``; on
    the step that ends it (terminated, truncated, or the runtime's ``max_episode_steps``)
    it scores :meth:`score_trajectory` (the *final* score) and assigns per-step credits
    with :meth:`compute_step_rewards`, carried in ``Score.credits`` and, on the wire, in
    ``TimeStep.metadata[CREDITS_METADATA_KEY]``. :meth:`reset` clears the trajectory.

    Pass ``fn(trajectory) -> float`` (sync or async) or override :meth:`score_trajectory`.
    Put trajectory nodes where they are evaluated on every step (the root, or under a
    :class:`WeightedSum`): under a closed gate a step is not recorded.
    """

    description = "Episode-level score, credited to the episode's steps."

    kind = "trajectory"

    def __init__(
        self,
        fn: _TrajectoryFn | None = None,
        *,
        intermediate_reward: float = 0.0,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        self.fn = fn
        if description is None and fn is not None and fn.__doc__:
            description = _summary(fn.__doc__)
        super().__init__(name=name, description=description, weight=weight, minimum=minimum, maximum=maximum)
        self.intermediate_reward = float(intermediate_reward)
        self.trajectory: list[tuple[Any, Any]] = []
        self.final_score: float | None = None

    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float | Score | Awaitable[float | Score]:
        """The episode's final score, from every recorded ``(action, observation)``."""
        if self.fn is None:
            raise NotImplementedError(f"{type(self).__name__}: pass fn= or override score_trajectory")
        return self.fn(trajectory)

    def compute_step_rewards(self) -> list[float]:
        """Credit of each recorded step once the episode ended (default: the final score
        on the last step, ``intermediate_reward`` on the others)."""
        n = len(self.trajectory)
        if self.final_score is None or n == 0:
            return [self.intermediate_reward] * n
        return [self.intermediate_reward] * (n - 1) + [self.final_score]

    def params(self) -> dict[str, Any]:
        return {"intermediate_reward": self.intermediate_reward}

    def reset(self) -> None:
        super().reset()
        self.trajectory = []
        self.final_score = None

    def _own_async(self) -> bool:
        if self.fn is not None and type(self).score_trajectory is TrajectoryRubric.score_trajectory:
            return inspect.iscoroutinefunction(self.fn)
        return inspect.iscoroutinefunction(type(self).score_trajectory)

    def _leaf(self, action: Any, observation: Any, done: bool) -> Any:
        self.trajectory.append((action, observation))
        if not done:
            return Score(self.intermediate_reward, reason=f"step {len(self.trajectory)}: episode running")
        value = self.score_trajectory(list(self.trajectory))
        if inspect.isawaitable(value):
            return self._final_async(value)
        return self._final(value)

    async def _final_async(self, pending: Awaitable[Any]) -> Score:
        return self._final(await pending)

    def _final(self, value: Any) -> Score:
        s = _as_score(value, self)
        self.final_score = s.score
        s.credits = [float(c) for c in self.compute_step_rewards()]
        if not s.reason:
            s.reason = f"episode of {len(self.trajectory)} steps scored {s.score:g}"
        return s


class ExponentialDiscountingTrajectoryRubric(TrajectoryRubric):
    """A trajectory rubric whose credits decay backwards: with T recorded steps and final
    score F, step t (1-based) gets ``gamma ** (T - t) * F`` (the last step gets F)."""

    description = "Episode-level score, credited to steps with exponential discounting."

    def __init__(
        self,
        fn: _TrajectoryFn | None = None,
        *,
        gamma: float = 0.99,
        intermediate_reward: float = 0.0,
        name: str | None = None,
        description: str | None = None,
        weight: float = 1.0,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        super().__init__(
            fn,
            intermediate_reward=intermediate_reward,
            name=name,
            description=description,
            weight=weight,
            minimum=minimum,
            maximum=maximum,
        )
        self.gamma = float(gamma)

    def compute_step_rewards(self) -> list[float]:
        n = len(self.trajectory)
        if self.final_score is None:
            return [self.intermediate_reward] * n
        return [self.gamma ** (n - 1 - t) * self.final_score for t in range(n)]

    def params(self) -> dict[str, Any]:
        return {"gamma": self.gamma, "intermediate_reward": self.intermediate_reward}
