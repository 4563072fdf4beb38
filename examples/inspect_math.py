"""math_env as an Inspect AI task, for ``inspect eval`` (docs/training.md, "Inspect AI").

    openenv serve math_env.server:MathEnvironment --port 50051 &
    inspect eval examples/inspect_math.py -T url=grpc://127.0.0.1:50051 --model openai/gpt-4o-mini \\
        --log-dir build/inspect-logs
    inspect eval examples/inspect_math.py -T limit=3 --model openenv/scripted --log-dir build/inspect-logs \\
        -M tool=submit_answer -M 'arguments={"answer": "42"}'          # offline: checks the wiring
"""

from __future__ import annotations

from typing import Any

from inspect_ai import task

from openenv.evals.inspect import env_task


@task
def math(url: str = "grpc://127.0.0.1:50051", split: str = "test", limit: int | None = None) -> Any:
    """One sample per task of math_env's ``split`` (its first ``limit``), played over ``url``."""
    return env_task(url, split=split, limit=None if limit is None else int(limit))
