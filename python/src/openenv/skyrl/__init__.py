"""SkyRL integration (the ``skyrl`` extra: ``pip install 'protoenv[skyrl]'``).

:class:`OpenEnvTextEnv` is a ``skyrl_gym`` ``BaseTextEnv`` (text in, text out, reward, done)
backed by a session of any openenv environment server, tool environments included;
:func:`register` makes it available to ``skyrl_gym.make`` (and so to skyrl-train's generator,
whose dataset rows name it in ``env_class``). docs/training.md has the recipe.
"""

from openenv.skyrl.env import OpenEnvTextEnv, parse_tool_calls, register

__all__ = ["OpenEnvTextEnv", "parse_tool_calls", "register"]
