"""math_env as a SkyRL environment (docs/training.md, "SkyRL"): an evaluation over its test split
through ``skyrl_gym.make``, the way skyrl-train's generator makes and drives environments.

    pip install './python[skyrl]' -e ./envs/math_env   # from a clone's root
    openenv serve math_env.server:MathEnvironment --port 50051 &
    python examples/skyrl_math.py --url grpc://127.0.0.1:50051 --episodes 20

Without ``--url`` it serves math_env in-process on a free port. The policy is a rule, not a
model (CPU, offline): it reads the problem, computes ``Compute ...`` questions with the
calculator tool and submits the result, and submits 0 for word problems; the rubric on the
server scores each submission, so arithmetic tasks earn the reward and word problems do not.

In skyrl-train (GPUs: vLLM and FSDP workers), the same environment is named by the dataset rows
and configured in the trainer's config::

    import openenv.skyrl; openenv.skyrl.register("openenv")     # in the entry point, before training
    # each row: {"prompt": [...], "env_class": "openenv", "task_id": "17"}
    # config:   environment.env_class=openenv  +environment.skyrl_gym.openenv.url=grpc://HOST:50051
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Iterator

import skyrl_gym

import openenv
import openenv.skyrl


def _call(name: str, **arguments: str) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def policy(chat: list[dict[str, str]]) -> str:
    """The next turn from the conversation so far (a stand-in for the model)."""
    turn = sum(m["role"] == "assistant" for m in chat)
    last = chat[-1]["content"]
    if turn == 0:
        return _call("get_problem")
    if turn == 1:
        m = re.search(r"Compute (.+?)\.\s*$", last, re.M)
        return _call("calculator", expression=m.group(1)) if m else _call("submit_answer", answer="0")
    m = re.search(r"<tool_response>\n(.*?)\n</tool_response>", last, re.S)
    value = m.group(1).strip() if m else "0"
    return _call("submit_answer", answer=value.removesuffix(".0"))


@contextlib.contextmanager
def served_math_env() -> Iterator[str]:
    """math_env on 127.0.0.1, a free port, in a thread of its own."""
    from math_env.server import MathEnvironment

    loop = asyncio.new_event_loop()
    server = openenv.Server(MathEnvironment, "127.0.0.1", 0)
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield server.address
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def evaluate(url: str, episodes: int, split: str = "test") -> list[dict[str, object]]:
    """One episode per task of ``split`` (its first ``episodes``); each row: task, return, turns."""
    env_id = openenv.skyrl.register("openenv")
    with openenv.EnvClient(url).sync() as probe:
        tasks = [t.id for t in probe.list_tasks(split)][:episodes]
    rows = []
    for task_id in tasks:
        env = skyrl_gym.make(env_id, env_config={"url": url, "max_turns": 4}, extras={"task_id": task_id})
        chat, _ = env.init([{"role": "user", "content": "Solve the problem with the tools."}])
        done = False
        while not done:
            text = policy(chat)
            out = env.step(text)
            chat = [*chat, {"role": "assistant", "content": text}, *out["observations"]]
            done = out["done"]
        env.close()
        rows.append({"task_id": task_id, "return": sum(env.rewards), "turns": env.turns})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a math_env server (default: one served in-process)")
    ap.add_argument("--episodes", type=int, default=10)
    ns = ap.parse_args()
    with contextlib.ExitStack() as stack:
        url = ns.url or stack.enter_context(served_math_env())
        rows = evaluate(url, ns.episodes)
    for r in rows:
        print(json.dumps(r))
    mean = sum(float(r["return"]) for r in rows) / max(1, len(rows))  # type: ignore[arg-type]
    print(json.dumps({"episodes": len(rows), "mean_return": round(mean, 4)}))


if __name__ == "__main__":
    main()
