"""Baselines on factory instances, played through the environment's tools over gRPC: the null
agent (submits at once), the reference (writes the reference fix, submits) and a scripted
**search-and-edit** agent.

The scripted agent does what a simple program can with the tools: it reads the issue for the
failing test, runs it (``run_tests``), takes the package files and lines in the traceback, and
tries small edits near them, nearest first (each site the factory's own operators find in that
neighbourhood, i.e. an operator, a comparison, a constant, a branch: ``write_file``), keeping
the first that makes the failing test pass, then ``submit``. It knows nothing of the patch.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import Any

import openenv
from openenv import CallToolAction
from repo_env.factory import mutate

__all__ = ["run_baselines"]

MAX_TRIES = 12
NEAR_LINES = 12


async def _tool(env: Any, name: str, **args: Any) -> Any:
    r = await env.step(CallToolAction(name, args))
    return r


def _text(r: Any) -> str:
    res = r.observation.result
    if res.data is not None and not isinstance(res.data, (str, list)):
        return str(res.data)
    return "".join(c.get("text", "") for c in res.content or [] if isinstance(c, dict))


async def null_agent(env: Any, task_id: str) -> float:
    await env.reset(options={"task_id": task_id})
    return float((await _tool(env, "submit")).reward or 0.0)


async def reference_agent(env: Any, task_id: str, fix: dict[str, str]) -> float:
    await env.reset(options={"task_id": task_id})
    for path, content in sorted(fix.items()):
        await _tool(env, "write_file", path=path, content=content)
    return float((await _tool(env, "submit")).reward or 0.0)


async def search_and_edit_agent(env: Any, task_id: str) -> tuple[float, int]:
    """(reward, edits tried)."""
    obs = await env.reset(options={"task_id": task_id})
    issue = "".join(c.get("text", "") for c in obs.observation.result.content or [] if isinstance(c, dict))
    m = re.search(r"`([^`\s]+::[^`]+)`", issue)
    if not m:
        return float((await _tool(env, "submit")).reward or 0.0), 0
    test = m.group(1)
    files = set((await _tool(env, "list_files")).observation.result.data or [])
    r = await _tool(env, "run_tests", tests=test)
    out = str((r.observation.result.data or {}).get("stdout", ""))
    spots: list[tuple[str, int]] = []
    for path, line in re.findall(r"^([\w./-]+\.py):(\d+):", out, re.M):
        path = next((f for f in files if f == path or f.endswith("/" + path)), path)
        if path in files and "test" not in path.split("/")[-1] and (path, int(line)) not in spots:
            spots.append((path, int(line)))
    spots.reverse()  # the innermost frame first
    tried = 0
    for path, line in spots:
        original = await _read_whole(env, path)
        sites = [s for s in mutate.sites(path, original) if abs(s.line - line) <= NEAR_LINES]
        sites.sort(key=lambda s: (abs(s.line - line), s.line, s.col))
        for s in sites:
            if tried >= MAX_TRIES:
                break
            try:
                edited = mutate.apply(original, [s])
            except (ValueError, SyntaxError):
                continue
            tried += 1
            await _tool(env, "write_file", path=path, content=edited)
            r = await _tool(env, "run_tests", tests=test)
            if (r.observation.result.data or {}).get("passed"):
                return float((await _tool(env, "submit")).reward or 0.0), tried
            await _tool(env, "write_file", path=path, content=original)
    return float((await _tool(env, "submit")).reward or 0.0), tried


async def _read_whole(env: Any, path: str) -> str:
    """A file's text through read_file, 400 numbered lines at a time."""
    lines: list[str] = []
    start = 1
    while True:
        text = _text(await _tool(env, "read_file", path=path, start_line=start, end_line=start + 399))
        got = [ln.split("\t", 1)[1] if "\t" in ln else "" for ln in text.splitlines() if re.match(r"^\s*\d+\t", ln)]
        lines += got
        if "not shown]" not in text or not got:
            return "".join(f"{ln}\n" for ln in lines)
        start += len(got)


def run_baselines(env_cls: type[Any], task_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Each agent on each task, over a real gRPC server: reward and wall seconds per instance."""

    async def main() -> list[dict[str, Any]]:
        rows = []
        async with openenv.Server(env_cls, "127.0.0.1", 0) as srv:
            async with openenv.ToolEnvClient(srv.address) as env:
                for tid in task_ids:
                    fix = dict(env_cls.tasks.by_id(tid).fix)
                    t = time.monotonic()
                    null = await null_agent(env, tid)
                    t_null = time.monotonic() - t
                    t = time.monotonic()
                    ref = await reference_agent(env, tid, fix)
                    t_ref = time.monotonic() - t
                    t = time.monotonic()
                    scripted, tries = await search_and_edit_agent(env, tid)
                    t_scr = time.monotonic() - t
                    rows.append({"id": tid, "null": null, "null_s": t_null, "reference": ref, "reference_s": t_ref,
                                 "scripted": scripted, "scripted_s": t_scr, "scripted_edits": tries})  # fmt: skip
        return rows

    return asyncio.run(main())
