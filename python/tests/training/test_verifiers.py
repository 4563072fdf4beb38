"""verifiers (Prime Intellect) evaluates a catalog environment through openenv.verifiers_env: its
own CLI (`vf-eval`, verifiers 0.4.0 from its locked interpreter, tools/verifiers_venv.py) loads the
taskset by its module name, plays math_env tasks from a live server with a scripted model (the
`null` harness: plain chat, a subprocess runtime), and writes its traces.

What cannot be faked: each trace's reward is the one the server pays for the same actions,
replayed through the plain client on a fresh session; a right and a wrong answer are told apart;
every model call verifiers made reached the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openenv_testkit import server_thread

import openenv
from math_env.server import MathEnvironment
from math_env.tasks import TASKS
from openenv.harness import Script, ScriptedModel
from openenv.harness._asgi import serve_in_thread
from openenv.runtime.tools import CallToolAction

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools import verifiers_venv  # noqa: E402

pytestmark = pytest.mark.slow

ANSWER = str(TASKS[5].answer)  # right for task 5, wrong for task 6
ACTIONS = [("get_problem", {}), ("submit_answer", {"answer": ANSWER})]


def test_vf_eval_scores_math_env_tasks_with_the_servers_rewards(tmp_path: Path) -> None:
    assert TASKS[6].answer != TASKS[5].answer
    python = verifiers_venv.ensure()
    script = Script(tuple({"text": json.dumps({"name": n, "arguments": a})} for n, a in ACTIONS))
    model = ScriptedModel(script)
    served = serve_in_thread(model)
    try:
        with server_thread(MathEnvironment) as srv:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            # uv (the dev lock's) first on PATH: verifiers' harness prepares its chat program with it.
            env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", OPENAI_API_KEY="unused")
            # ...and its resolution pinned to a date, not to the day the suite runs.
            env.update(verifiers_venv.script_env())
            argv = [str(python.parent / "vf-eval"), "openenv.verifiers_env"]
            argv += ["--env.taskset.url", srv.address, "--env.taskset.task-ids", '["5", "6"]']
            argv += ["--model", "scripted", "--client.base-url", f"{served.url}/v1"]
            argv += ["--client.api-key-var", "OPENAI_API_KEY", "--env.player.runtime.type", "subprocess"]
            argv += ["--env.player.harness.id", "null", "--no-push", "--no-rich", "-o", str(tmp_path / "out")]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            [traces_file] = (tmp_path / "out").glob("*/traces.jsonl")
            episodes = [json.loads(line) for line in traces_file.read_text().splitlines() if line.strip()]
            # The same actions on fresh sessions through the plain client: the server's rewards.
            expected = {}
            for task_id in ("5", "6"):
                with openenv.ToolEnvClient(srv.address).sync() as plain:
                    plain.reset(None, None, None, task_id=task_id)
                    expected[task_id] = sum(float(plain.step(CallToolAction(n, a)).reward or 0.0) for n, a in ACTIONS)
    finally:
        served.stop()
    got = {}
    for ep in episodes:
        assert ep["ok"] and not ep["errors"], ep["errors"]
        [trace] = ep["traces"]
        got[ep["task"]["data"]["task_id"]] = trace["rewards"]["openenv_reward"]["score"]
        replies = [n["message"]["content"] for n in trace["nodes"] if n["message"]["role"] == "assistant"]
        assert [json.loads(r)["name"] for r in replies] == ["get_problem", "submit_answer"]
    assert got == expected and expected["5"] > expected["6"]
    assert model.requests == 4  # two turns per task, every one served
