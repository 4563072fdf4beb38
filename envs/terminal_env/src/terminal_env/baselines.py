"""Baselines of terminal_env: three agents played over a real gRPC server on a sample of
instances, with the reward and the wall time of each (the README's baseline table).

* ``null``: submits the untouched workspace (what a policy that does nothing earns);
* ``reference``: runs the instance's reference solution, then submits (the ceiling: what the
  checks pay a correct workspace, and what a solution costs in time);
* ``scripted``: a search-and-edit agent without a model: it reads the instruction, searches
  the workspace (``find``, the head of every file), then, for every file name the instruction
  mentions that the workspace does not hold, writes the sorted, deduplicated lines of the
  first input the instruction names (a shallow guess at "summarise X into Y"), and submits.

``python -m terminal_env.baselines --seeds 2`` plays every family on seeds 0 and 1 and prints
the table as Markdown (``--json`` for every episode). Nothing here reads a check: the agents
see what any agent sees, through the tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import time
from collections.abc import Sequence
from typing import Any

import openenv
from terminal_env.families import TASKS
from terminal_env.server import TerminalEnvironment
from terminal_env.tasks import TIERS

__all__ = ["AGENTS", "main", "play", "table"]

AGENTS = ("null", "reference", "scripted")
_NAMED = re.compile(r"(?<![\w/.-])([\w-]+(?:/[\w.-]+)*\.(?:txt|csv|json|jsonl|env|tsv|log|conf|md|sh|py))\b")


async def _call(env: Any, tool: str, args: dict[str, Any]) -> Any:
    r = await env.step(openenv.CallToolAction(tool, args))
    return r


async def _scripted(env: Any, instruction: str) -> None:
    """Search, then edit: the file names of the instruction the workspace lacks get the sorted
    unique lines of the first one it holds."""
    listing = await _call(env, "run", {"command": "find . -type f ! -path './.shellstate' | sort"})
    present = {p[2:] for p in str(listing.observation.result.data["stdout"]).split() if p.startswith("./")}
    search = "for f in $(find . -type f ! -name .shellstate | head -20); do head -5 $f; done"
    await _call(env, "run", {"command": search})
    named = list(dict.fromkeys(_NAMED.findall(instruction)))
    inputs = [n for n in named if n in present]
    outputs = [n for n in named if n not in present]
    if not outputs:
        return
    source = shlex.quote(inputs[0]) if inputs else "/dev/null"
    writes = " && ".join(
        f'mkdir -p "$(dirname {shlex.quote(o)})" && sort -u {source} > {shlex.quote(o)}' for o in outputs
    )
    await _call(env, "run", {"command": writes})


async def play(agent: str, task_id: str, seed: int, address: str) -> dict[str, Any]:
    """One episode of ``agent`` on the instance of ``seed``: its reward and wall time (from
    the reset to the submit's answer, over the wire)."""
    async with openenv.ToolEnvClient(address) as env:
        t0 = time.perf_counter()
        first = await env.reset(seed=seed, options={"task_id": task_id})
        instruction = str(first.observation.result.content[0]["text"])
        if agent == "reference":
            await _call(env, "run", {"command": TASKS.by_id(task_id).instance(seed).solution})
        elif agent == "scripted":
            await _scripted(env, instruction)
        elif agent != "null":
            raise ValueError(f"unknown agent {agent!r}; agents: {', '.join(AGENTS)}")
        r = await _call(env, "submit", {})
        return {
            "agent": agent,
            "task_id": task_id,
            "tier": TASKS.by_id(task_id).tier,
            "seed": seed,
            "reward": float(r.reward or 0.0),
            "wall_s": time.perf_counter() - t0,
        }


async def _run(agents: Sequence[str], task_ids: Sequence[str], seeds: Sequence[int]) -> list[dict[str, Any]]:
    out = []
    async with openenv.Server(TerminalEnvironment, "127.0.0.1", 0) as srv:
        for agent in agents:
            for task_id in task_ids:
                for seed in seeds:
                    out.append(await play(agent, task_id, seed, srv.address))
    return out


def table(episodes: Sequence[dict[str, Any]]) -> str:
    """The baseline table as Markdown: per agent, the mean reward and wall time per instance,
    overall and per tier."""
    lines = [
        "| Agent | Instances | Mean reward | Solved | Wall time per instance (mean, max) | "
        + " | ".join(f"Reward ({t})" for t in TIERS)
        + " |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in TIERS) + " |",
    ]
    for agent in dict.fromkeys(e["agent"] for e in episodes):
        rows = [e for e in episodes if e["agent"] == agent]
        rewards = [e["reward"] for e in rows]
        walls = [e["wall_s"] for e in rows]
        per_tier = []
        for t in TIERS:
            r = [e["reward"] for e in rows if e["tier"] == t]
            per_tier.append(f"{sum(r) / len(r):.2f} ({len(r)})" if r else "-")
        lines.append(
            f"| {agent} | {len(rows)} | {sum(rewards) / len(rows):.3f} | {sum(x == 1.0 for x in rewards)} | "
            f"{sum(walls) / len(walls):.2f} s, {max(walls):.2f} s | " + " | ".join(per_tier) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="terminal_env's baselines: null, reference and scripted agents.")
    ap.add_argument("--seeds", type=int, default=2, help="seeds 0..N-1 of every family (default 2)")
    ap.add_argument("--task", action="append", default=None, help="only this family (repeatable)")
    ap.add_argument("--agent", action="append", choices=AGENTS, default=None, help="only this agent (repeatable)")
    ap.add_argument("--json", action="store_true", help="print every episode as JSON instead of the table")
    ns = ap.parse_args(argv)
    task_ids = ns.task or [t.id for t in TASKS]
    for t in task_ids:
        try:
            TASKS.by_id(t)  # an unknown id: a clear error before any episode
        except KeyError as e:
            ap.error(str(e))
    episodes = asyncio.run(_run(ns.agent or AGENTS, task_ids, range(ns.seeds)))
    print(json.dumps(episodes, indent=1) if ns.json else table(episodes), end="")


if __name__ == "__main__":
    main()
