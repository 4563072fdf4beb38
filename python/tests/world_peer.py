"""A client of a multi-agent world in its own process, driven line by line (the tests of
test_worlds_behave.py): ``python world_peer.py URL JSON_KWARGS``.

It opens ``openenv.EnvClient(URL, **kwargs)`` and prints one JSON line: the handshake's outcome
(``{"world": {...}}`` or ``{"error": ...}``). Then each line it reads is a call, ``{"call": NAME,
"kwargs": {...}}`` (``reset``, ``step``, ``step_agents``, ``observe``), answered with one JSON line:
``{"ok": <the time step>}`` or ``{"error": <class name>, "message": ..., "client_timeout": bool}``.
``{"call": "exit"}`` leaves without closing (the process ends, its connection drops);
``{"call": "close"}`` closes the client then exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import openenv


def _time_step(r: openenv.StepResult[Any]) -> dict[str, Any]:
    return {
        "to_act": list(r.to_act),
        "done": r.done,
        "terminated": r.terminated,
        "truncated": r.truncated,
        "episode_id": r.episode_id,
        "step_count": r.step_count,
        "agents": {
            a: {"observation": s.observation, "reward": s.reward, "terminated": s.terminated, "truncated": s.truncated}
            for a, s in r.agents.items()
        },
        "seat_events": [
            {"kind": e.kind, "agent_ids": list(e.agent_ids), "rejoin_within": e.rejoin_within}
            for e in getattr(r, "seat_events", [])  # (a client older than RFC 0016 has none)
        ],
        "metadata": r.metadata,
    }


def _error(e: BaseException) -> dict[str, Any]:
    return {
        "error": type(e).__name__,
        "message": str(e),
        "client_timeout": isinstance(e, getattr(openenv, "ClientTimeout", ())),
        "deadline": isinstance(e, openenv.DeadlineExceeded),
    }


def _say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=repr) + "\n")
    sys.stdout.flush()


async def main(url: str, kwargs: dict[str, Any]) -> None:
    env = openenv.EnvClient(url, **kwargs)
    try:
        await env.connect()
    except Exception as e:  # noqa: BLE001 - reported to the test, which judges it
        _say(_error(e))
        return
    _say(
        {
            "world": {
                "agent_ids": list(env.world.agent_ids),
                "join_token": env.world.join_token,
                "owner": env.world.owner,
            }
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            os._exit(0)
        cmd = json.loads(line)
        name = cmd["call"]
        if name == "exit":
            os._exit(0)  # no close request, no clean shutdown: the server sees the connection drop
        if name == "close":
            await env.close()
            _say({"closed": True})
            return
        try:
            r = await getattr(env, name)(**cmd.get("kwargs", {}))
        except Exception as e:  # noqa: BLE001 - reported to the test, which judges it
            _say(_error(e))
        else:
            _say({"ok": _time_step(r)})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
