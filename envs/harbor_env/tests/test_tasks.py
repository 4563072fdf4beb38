"""The shipped Harbor tasks, all in one process (one sandbox): each reference solution
(``solution/solve.sh``) passes its task's tests, and a null solution (nothing done) fails them.
Also: what a task's Dockerfile or task.toml asks that cannot be had here is refused when the task
loads, with the line and what is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor_env.check import check_tasks, main
from harbor_env.server import SHIPPED, HarborEnvironment
from harbor_env.task import TaskError, load_task, load_tasks


def test_every_shipped_reference_solution_passes_and_every_null_solution_fails() -> None:
    tasks = list(HarborEnvironment.tasks)
    assert len(tasks) >= 20
    results = check_tasks(tasks)
    failed = [r.line() for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    assert [r.task_id for r in results] == [t.id for t in tasks]


def _task(root: Path, dockerfile: str, toml: str = "") -> Path:
    d = root / "t"
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text("Do it.\n")
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "environment" / "data.txt").write_text("data\n")
    return d


@pytest.mark.parametrize(
    ("dockerfile", "toml", "message"),
    [
        ("FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y no-such-package-xyz\n", "",
         "line 2 (RUN): the Debian packages no-such-package-xyz are not installed"),
        ("FROM python:3.12\nRUN pip install numpy==2.0\n", "", "line 2 (RUN): `pip install numpy==2.0` cannot"),
        ("FROM ubuntu:24.04\nRUN curl -LsSf https://example.invalid/x.sh | sh\n", "", "needs the network"),
        ("FROM ubuntu:24.04 AS build\nRUN true\nFROM ubuntu:24.04\n", "", "line 3 (FROM): a second FROM"),
        ("FROM ubuntu:24.04\nWORKDIR /app\nCOPY data.txt /etc/data.txt\n", "", "COPY to /etc/data.txt: only"),
        ("FROM ubuntu:24.04\nCOPY --from=builder /x /app/x\n", "", "COPY --from"),
        ("FROM ubuntu:24.04\nCOPY missing.txt /app/\n", "", "missing.txt is not in the task's environment/"),
        ("FROM ubuntu:24.04\nADD https://example.invalid/a.tgz /app/\n", "", "ADD of a URL"),
        ("FROM ubuntu:24.04\nWORKDIR /usr/src/app\n", "", "WORKDIR /usr/src/app is a system path"),
        ("FROM ubuntu:24.04\nCOPY data.txt /app/\nWORKDIR /srv\n", "", "outside the first WORKDIR /app"),
        ("FROM ubuntu:24.04\nARG X\nFROBNICATE now\n", "", "the instruction FROBNICATE is not supported"),
        ("FROM ubuntu:24.04\n", '[environment]\ndocker_image = "ghcr.io/x/y:1"\n', "prebuilt images cannot be pulled"),
        ("FROM ubuntu:24.04\n", '[[steps]]\nname = "one"\n', "multi-step tasks"),
        ("FROM ubuntu:24.04\n", "[agent]\ntimeout_sec = -1\n", "[agent] timeout_sec must be a positive number"),
    ],
)  # fmt: skip
def test_what_cannot_be_had_here_is_refused_naming_the_line(
    tmp_path: Path, dockerfile: str, toml: str, message: str
) -> None:
    d = _task(tmp_path, dockerfile, toml)
    with pytest.raises(TaskError) as e:
        load_task(d)
    assert message in str(e.value) and "task t" in str(e.value)


def test_what_is_had_here_is_interpreted(tmp_path: Path) -> None:
    d = _task(
        tmp_path,
        "FROM ubuntu:24.04\nARG NAME=world\nENV GREETING=hello \\\n    WHO=$NAME\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends python3 bash \\\n"
        " && rm -rf /var/lib/apt/lists/*\n"
        "WORKDIR /srv/site\nCOPY data.txt ./in/\nRUN for i in 1 2; do echo $i >> n.txt; done\n"
        'USER nobody\nCMD ["sleep", "infinity"]\n',
        "[agent]\ntimeout_sec = 42\n[verifier]\ntimeout_sec = 7\nenv = { MODE = \"strict\" }\n",
    )  # fmt: skip
    t = load_task(d)
    assert t.build.workdir == "/srv/site" and t.build.base == "ubuntu:24.04"
    assert t.build.env == {"GREETING": "hello", "WHO": "world"}
    assert [s[0] for s in t.build.steps] == ["copy", "run"]
    assert t.build.steps[1][1] == "for i in 1 2; do echo $i >> n.txt; done"
    assert (t.agent_timeout_s, t.verifier_timeout_s, t.verifier_env) == (42.0, 7.0, {"MODE": "strict"})
    assert any("USER" in n for n in t.build.notes)


def test_a_directory_of_splits_and_the_check_command(capsys: pytest.CaptureFixture[str]) -> None:
    tasks = load_tasks(SHIPPED)
    assert tasks.splits == ("test", "train")  # sorted: the first is the default split
    one = SHIPPED / "train" / "count-errors"
    assert [t.id for t in load_tasks(one)] == ["count-errors"]
    assert [t.split for t in load_tasks(SHIPPED / "test")] == ["train"] * len(load_tasks(SHIPPED / "test"))
    assert main(["check", str(one)]) == 0
    assert "ok   count-errors: reference 1, null 0" in capsys.readouterr().out
