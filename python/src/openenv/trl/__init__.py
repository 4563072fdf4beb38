"""TRL integration (the ``trl`` extra: ``pip install torch==2.13.0 'protoenv[trl]'``).

* :func:`environment_factory`: any tool environment as ``GRPOTrainer(environment_factory=...)``
  (one session per rollout, tools as methods with their schemas and docstrings, the reward
  from the environment's reward or rubric);
* :func:`rollout_func`: a multi-turn text environment that is not tool-shaped as
  ``GRPOTrainer(rollout_func=...)``.

docs/training.md has the recipe, with a hub model, and the CPU test's tiny one.
"""

from openenv.trl.environment import EnvironmentFactory, ToolRollout, environment_factory
from openenv.trl.rollout import env_reward, rollout_func

__all__ = ["EnvironmentFactory", "ToolRollout", "env_reward", "environment_factory", "rollout_func"]
