"""What a batch reset/step of a vectorised session returns: :class:`BatchResult` (its own module:
the client and its blocking view both name it, and neither imports the other for it)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from openenv.protocol import StepResult

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BatchResult"]


@dataclasses.dataclass
class BatchResult:
    """Results of a batch reset/step: one :class:`StepResult` per stepped instance."""

    env_ids: list[int]
    results: list[StepResult[Any]]
    final: dict[int, StepResult[Any]]

    @property
    def observations(self) -> list[Any]:
        return [r.observation for r in self.results]

    @property
    def rewards(self) -> np.ndarray:
        """Rewards as float64 (NaN where a step had no reward)."""
        import numpy as np

        return np.array([np.nan if r.reward is None else r.reward for r in self.results], dtype=np.float64)

    @property
    def terminated(self) -> np.ndarray:
        import numpy as np

        return np.array([r.terminated for r in self.results], dtype=bool)

    @property
    def truncated(self) -> np.ndarray:
        import numpy as np

        return np.array([r.truncated for r in self.results], dtype=bool)
