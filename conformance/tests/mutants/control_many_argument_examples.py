"""A control, not a mutant: a tool environment (every step a tool call, packed as a protobuf
message) whose example actions carry six arguments, one of them an object. A ``Struct``'s
members serialize in no fixed order, and the order differs from one process to the next:
before examples were packed canonically (openenv.runtime.anys), the description read over
HTTP differed from the gRPC one byte for byte, and ``parity.grpc_vs_http`` failed a correct
environment. It must certify."""

from __future__ import annotations

from typing import Any

import openenv

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()

_FORM = {"name": "Ada", "city": "London", "age": 36, "email": "ada@example.org", "phone": "0", "tags": {"b": 1, "a": 2}}


class Env(openenv.Environment):
    """Fill in a form: one tool of six arguments; the reward is the number of filled fields."""

    name = "form"
    deterministic = True
    reward_range = (0.0, 6.0)
    max_episode_steps = 8
    max_sessions = 4
    run_in_thread = False
    example_actions = (
        openenv.CallToolAction("register", _FORM),
        openenv.CallToolAction("register", {**_FORM, "tags": {}, "city": ""}),
    )

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> openenv.StepResult:
        return openenv.StepResult(openenv.CallToolObservation())

    @openenv.tool
    def register(self, name: str, city: str, age: int, email: str, phone: str, tags: dict[str, int]) -> dict[str, Any]:
        """Register a person.

        Args:
            name: their name.
            city: where they live.
            age: in years.
            email: an address.
            phone: a number.
            tags: labels and weights.
        """
        return {"name": name, "city": city, "age": age, "email": email, "phone": phone, "tags": tags}

    def reward(self, action: openenv.CallToolAction, observation: openenv.CallToolObservation) -> float:
        return float(sum(1 for v in action.arguments.values() if v not in ("", {}, None)))

    def state(self) -> dict[str, Any]:
        return {}
