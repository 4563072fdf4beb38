"""docker-compose sidecars in container mode (issue 47): the part of the Compose spec Harbor's
tasks use, each episode's services on a network of its own, torn down with it.

What these show:

* Harbor's published ``multi-container`` recipe (an API server built from its own Dockerfile,
  ``depends_on: condition: service_healthy``), copied unchanged, scores 1 with its reference
  solution and 0 with a null agent; the recipes that need what this machine cannot give are
  refused naming the resource (a model API's key, a Windows VM's service key, a Python 3.12
  interpreter, ``[[steps]]``). On the code before, every recipe with a compose file was refused.
* Two episodes of the same task each reach their own ``api-server`` by name and never the
  other's (not even by its address); closing an episode leaves none of its containers or its
  network behind.
* What the compose subset does not support is refused naming the key, never silently dropped;
  a variable the file takes from the host that the host lacks is refused naming it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from harbor_env.check import main as check_main
from harbor_env.container import ContainerBox, docker_available
from harbor_env.task import TaskError, load_task

COOKBOOK = Path(__file__).resolve().parent / "fixtures" / "harbor-cookbook" / "recipes"
needs_docker = pytest.mark.skipif(docker_available() is not None, reason="container mode needs a Docker engine")


def _task(root: Path, compose: str) -> Path:
    d = root / "t"
    for sub in ("environment", "tests"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text("[agent]\ntimeout_sec = 60.0\n")
    (d / "instruction.md").write_text("x\n")
    (d / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (d / "environment" / "docker-compose.yaml").write_text(compose)
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return d


@pytest.mark.parametrize(
    ("compose", "named"),
    [
        ("services:\n  db:\n    image: x\n    ports: ['5432:5432']\n", "ports"),
        ("services:\n  db:\n    image: x\n    volumes: ['/:/host']\n", "volumes"),
        ("services:\n  main:\n    privileged: true\n", "privileged"),
        ("services:\n  db:\n    image: x\n    environment:\n      KEY: ${HARBOR2_SURELY_UNSET_VAR}\n",
         "HARBOR2_SURELY_UNSET_VAR"),
        ("services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", "cycle"),
        ("services:\n  main:\n    depends_on:\n      db: {condition: service_healthy}\n  db:\n    image: x\n",
         "no healthcheck"),
        ("networks:\n  outside: {}\nservices: {}\n", "networks"),
    ],
)  # fmt: skip
def test_compose_keys_this_machine_cannot_honour_are_refused_by_name(tmp_path: Path, compose: str, named: str) -> None:
    """A task is never run with part of its environment silently dropped: the refusal names the key
    (or the variable, or the cycle)."""
    with pytest.raises(TaskError, match=re.escape(named)):
        load_task(_task(tmp_path, compose), mode="container")


def test_compose_variables_take_the_hosts_value_or_their_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``${VAR}`` and ``${VAR:-default}`` resolve as compose resolves them, from this host."""
    monkeypatch.setenv("HARBOR2_SET", "from-host")
    task = load_task(
        _task(tmp_path, "services:\n  db:\n    image: x\n    environment:\n"
              "      - A=${HARBOR2_SET}\n      - B=${HARBOR2_UNSET:-fallback}\n      - C=$$literal\n"),
        mode="container",
    )  # fmt: skip
    assert dict(task.compose.by_name("db").environment) == {"A": "from-host", "B": "fallback", "C": "$literal"}


@needs_docker
def test_published_compose_recipes_score_as_harbor_scores_them_or_are_refused_naming_the_resource(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """multi-container, unchanged: its api-server (FROM python:3.12-slim, pip install flask through
    harbor-packages) is healthy before the agent starts; the reference's curl to
    http://api-server:5000 pays 1, a null agent 0. The others are refused in the table."""
    names = ["multi-container", "mcp-tools", "simulated-user", "computer-use-windows"]
    code = check_main(["check", str(COOKBOOK), "--mode", "container", *(a for n in names for a in ("--task", n))])
    out = capsys.readouterr().out
    assert "ok   multi-container: reference 1, null 0" in out, out
    assert "PASSED ../tests/test_outputs.py::test_harbor_item_present" in out
    assert re.search(r"^mcp-tools +.*requires Python >=3\.12", out, re.M), out
    assert re.search(r"^simulated-user +.*ANTHROPIC_API_KEY", out, re.M), out
    assert re.search(r"^computer-use-windows +.*DAYTONA_API_KEY", out, re.M), out
    assert code == 1 and "Traceback" not in out


def _engine_names(kind: str, needle: str) -> list[str]:
    args = ["network", "ls"] if kind == "network" else ["ps", "-a"]
    r = subprocess.run(["docker", *args, "--format", "{{.Name}}" if kind == "network" else "{{.Names}}"],
                       capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return [n for n in r.stdout.split() if needle in n]


@needs_docker
def test_each_episode_reaches_its_own_sidecar_by_name_and_never_another_episodes() -> None:
    """Two episodes of multi-container: each one's shell gets its own api-server's answer by name;
    the other episode's api-server is unreachable even by its address; closing an episode removes
    its sidecar and its network."""
    task = load_task(COOKBOOK / "multi-container", mode="container")
    a, b = ContainerBox(), ContainerBox()
    try:
        assert a.start(task) == [] and b.start(task) == []
        # a's state in its own api-server, visible from a, not from b
        post = ("python3 -c \"import urllib.request as u; r=u.Request('http://api-server:5000/items', "
                "data=b'{\\\"name\\\": \\\"only-in-a\\\"}', headers={'Content-Type': 'application/json'}); "
                "print(u.urlopen(r, timeout=10).status)\"")  # fmt: skip
        assert a.shell(post, 60).stdout.strip() in ("200", "201"), a.shell(post, 60)
        get = ("python3 -c \"import urllib.request as u; "
               "print(u.urlopen('http://api-server:5000/items', timeout=10).read())\"")  # fmt: skip
        assert "only-in-a" in a.shell(get, 60).stdout
        assert "only-in-a" not in b.shell(get, 60).stdout
        assert b.network and a.network and a.network != b.network
        ip_b = subprocess.run(
            ["docker", "inspect", "--format", f'{{{{(index .NetworkSettings.Networks "{b.network}").IPAddress}}}}',
             b.sidecars[0]], capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()  # fmt: skip
        probe = f"python3 -c \"import socket; socket.create_connection(('{ip_b}', 5000), timeout=5); print('reached')\""
        r = a.shell(probe, 60)
        assert ip_b and "reached" not in r.stdout and r.exit_code != 0, r
        net_a, side_a = a.network, list(a.sidecars)
    finally:
        a.close()
        b.close()
    assert _engine_names("network", net_a) == [] and all(_engine_names("container", s) == [] for s in side_a)


def _tb2_shaped(root: Path, *, dockerfile: str | None, test_sh: str) -> Path:
    """A task in Terminal-Bench 2's shape (our own text): a prebuilt ``docker_image`` this engine
    does not hold, its source Dockerfile beside it."""
    d = root / "tb2-shaped"
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(
        '[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 120.0\n\n[environment]\n'
        'docker_image = "harbor2-not-on-this-engine/tb2-shaped:20251031"\ncpus = 1\nmemory_mb = 1024\n'
    )  # fmt: skip
    (d / "instruction.md").write_text("Write 42 to /app/answer.txt.\n")
    if dockerfile is not None:
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text(test_sh)
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho 42 > /app/answer.txt\n")
    return d


@needs_docker
def test_an_absent_docker_image_is_built_from_the_tasks_dockerfile_as_harbor_force_builds(tmp_path: Path) -> None:
    """``docker_image`` names an image no registry can give here: the task's own Dockerfile is
    built instead (the reset's notes say so) and the task grades as published: reference 1, null
    0. Without a Dockerfile the reset fails naming the image. On the code before, every such task
    was refused."""
    test_sh = '#!/bin/bash\n[ "$(cat /app/answer.txt)" = 42 ] && r=1 || r=0; echo $r > /logs/verifier/reward.txt\n'
    task = load_task(_tb2_shaped(tmp_path, dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n", test_sh=test_sh),
                     mode="container")  # fmt: skip
    box = ContainerBox()
    try:
        assert box.start(task) == []
        assert any("force-build" in n and "harbor2-not-on-this-engine" in n for n in box.notes), box.notes
        box.oracle()
        assert box.verify().reward == 1.0
        assert box.start(task) == []
        assert box.verify().reward == 0.0
    finally:
        box.close()
    bare = load_task(_tb2_shaped(tmp_path / "bare", dockerfile=None, test_sh=test_sh), mode="container")
    (problem,) = ContainerBox().start(bare)
    assert "harbor2-not-on-this-engine/tb2-shaped:20251031" in problem and "no environment/Dockerfile" in problem


@needs_docker
def test_a_verifier_asking_uv_for_a_python_this_machine_lacks_is_refused_naming_it(tmp_path: Path) -> None:
    """Terminal-Bench 2's preamble runs ``uvx -p 3.13 ... pytest``: uv would download Python 3.13,
    which this machine cannot; the task is refused naming the interpreter, not scored 0."""
    test_sh = "#!/bin/bash\nuvx \\\n  -p 3.13 \\\n  -w pytest==8.4.1 \\\n  pytest /tests/test_outputs.py -rA\n"
    with pytest.raises(TaskError, match=r"Python 3\.13 \(`-p 3\.13`\)"):
        load_task(_tb2_shaped(tmp_path, dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n", test_sh=test_sh),
                  mode="container")  # fmt: skip
