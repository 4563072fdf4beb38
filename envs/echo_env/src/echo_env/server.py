"""The echo environment: a tool environment with ``echo_message`` and ``echo_with_length``.

Every step is a tool call (:class:`openenv.CallToolAction`); the reward of a step is
``0.1 * len(message)``. Run it with ``echo-env-server --port 50051`` or
``openenv serve echo_env.server:EchoEnvironment``.
"""

from __future__ import annotations

import argparse
from typing import Any, ClassVar

import openenv


class EchoEnvironment(openenv.Environment):
    """Echoes messages back. A minimal tool environment and the quick start's target."""

    name = "echo_env"
    version = "0.1.0"
    description = "Echoes messages back through two tools; reward is 0.1 per character."
    deterministic = True
    snapshots = True  # RFC 0006: the default hooks (its state pickles)
    reward_range = (0.0, 1e6)
    max_sessions = 1024
    run_in_thread = False  # every method is trivial: no need to leave the event loop
    example_actions = (
        openenv.CallToolAction("echo_message", {"message": "hello"}),
        openenv.CallToolAction("echo_with_length", {"message": "hey"}),
    )
    metadata: ClassVar[dict[str, Any]] = {"author": "openenv", "documentation_url": "envs/echo_env/README.md"}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.echoed = 0

    def reset(
        self, *, seed: int | None = None, episode_id: str | None = None, options: dict[str, Any] | None = None
    ) -> openenv.StepResult:
        self.echoed = 0
        return openenv.StepResult(openenv.CallToolObservation(), metadata={"message": "Echo environment ready!"})

    @openenv.tool
    def echo_message(self, message: str) -> str:
        """Echo a message back unchanged.

        Args:
            message: the text to echo.
        """
        self.echoed += 1
        return message

    @openenv.tool
    def echo_with_length(self, message: str) -> dict[str, Any]:
        """Echo a message back together with its length.

        Args:
            message: the text to echo.
        """
        self.echoed += 1
        return {"message": message, "length": len(message)}

    def reward(self, action: openenv.CallToolAction, observation: openenv.CallToolObservation) -> float:
        return 0.1 * len(str(action.arguments.get("message", "")))

    def state(self) -> dict[str, Any]:
        return {"echoed": self.echoed}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve the echo environment over gRPC.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=50051)
    ns = ap.parse_args(argv)
    openenv.serve(
        EchoEnvironment, ns.host, ns.port, ready=lambda s: print(f"echo_env serving on {s.address}", flush=True)
    )


if __name__ == "__main__":
    main()
