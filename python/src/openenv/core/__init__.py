"""The harness surface of OpenEnv 0.10's ``openenv.core``, served by this project.

TRL's asynchronous GRPO worker for agent harnesses (``trl.experimental.async_grpo.openenv_harness``,
TRL 1.16) imports its session types from ``openenv.core.harness`` and ``openenv.core.llm_client``.
This package provides those names with the same meaning, backed by this project's harness runner
(:mod:`openenv.harness`: the capture proxy, the agent's jail, the environment session that scores
the episode) and its clients, so TRL's worker trains against our environments unchanged:

* :mod:`openenv.core.llm_client`: ``LLMResponse`` and ``ToolCall``, one model turn;
* :mod:`openenv.core.harness`: the session contract (``ResourceSessionFactory``,
  ``ResourceSession``, ``TrainableSession``, ``HarnessAdapter``, ``VerifyResult``,
  ``TrainingTrace``, ...) and its implementations here: :class:`~openenv.core.harness.HarnessSessionFactory`
  (an agent that owns its loop, captured) and :class:`~openenv.core.harness.EnvSessionFactory`
  with :class:`~openenv.core.harness.MCPHarnessAdapter` (the trainer samples each turn);
* :mod:`openenv.core.harness.capture.upstream`: ``training_sampling``.

Nothing else of OpenEnv 0.10's ``openenv.core`` is here (its clients and servers are this
project's :mod:`openenv.client` and :mod:`openenv.server`). Needs the ``harness`` extra.
"""
