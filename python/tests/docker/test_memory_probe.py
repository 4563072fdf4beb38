"""The certifier's memory probe (``sandbox.memory``) counts what a call's processes really held.

CI once failed an image whose sandbox was bounded: its container's memory cgroup (1 GiB) let
the kernel's OOM killer end the probe's children when the sandbox's sampling watchdog came
late on a loaded machine, but the probe kept counting what the killed children had reported,
and read 2,192 MiB held "at once". Here the probe runs in a container whose memory cgroup is
far below what it asks for, so the kernel kills some of its children; what it reports must
stay under the cgroup's limit, and the kills must have happened (else nothing was tested).
"""

from __future__ import annotations

import subprocess

import pytest

from openenv_conformance.checks import _sandbox_probes as probes

MIB = 1 << 20
LIMIT_MIB = 192


def test_a_child_the_oom_killer_ended_no_longer_counts(engine: object, base_image: str) -> None:
    if not engine.info().get("MemoryLimit", True):  # type: ignore[attr-defined]
        pytest.skip("this Docker engine cannot limit a container's memory")
    code = probes.memory_probe(target=4 * 96 * MIB, chunk=96 * MIB, step=16 * MIB, hold=1.0)
    limit = f"{LIMIT_MIB}m"
    cgroup = ["--memory", limit, "--memory-swap", limit]
    done = subprocess.run(
        ["docker", "run", "--rm", "-i", "--network", "none", *cgroup, base_image, "python3", "-"],
        input=code,
        capture_output=True,
        text=True,
        timeout=300,
    )
    reports = probes.reports(done.stdout)
    assert reports and reports[-1].get("finished"), (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    last = reports[-1]
    assert last["killed"] >= 1, f"the kernel ended none of the probe's children under {limit}: {reports}"
    assert last["peak"] <= LIMIT_MIB * MIB, f"the probe counted {last['peak'] // MIB} MiB held under a {limit} cgroup"
