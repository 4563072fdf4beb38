"""Repository-wide test configuration: which tests must share one pytest-xdist worker, and how
long each area of the suite took.

``make test`` runs the suite on several workers (``-n auto --dist loadgroup``). Tests that
share something only one process may drive at a time carry an ``xdist_group``: the Docker
tests (one engine, shared image tags and build caches), the TypeScript binding (one
``typescript/node_modules`` and ``dist/`` built in place) and browser_env's Chromium-heavy
modules (their own ``pytestmark``). Everything else talks to servers on port 0 and may run
anywhere.

pytest-xdist keeps a group on one worker by renaming each grouped test (``<id>@<group>``) as it
is collected; a pytest that keeps node ids elsewhere (pytest 9.2 with pytest-xdist 3.8) makes
that rename a no-op and the groups silently spread over the workers. So each worker checks, once
collected, that every grouped test was renamed, and stops the run, saying so, when one was not.

At the end, the time the tests took (setup, call and teardown, summed per test) is printed per
area (python, envs, catalog, conformance, tools, and the docker, typescript and browser groups
across them), so that a slow CI run can be broken down from its log (.ci/run repeats the table
in its summary).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

#: path prefix (relative to the repository root) -> xdist group
_GROUPS = {
    "python/tests/docker/": "docker",
    "conformance/tests/test_docker.py": "docker",
    "python/tests/test_typescript.py": "typescript",
}

#: The areas of the suite's time table, in print order: a test's group (a shared resource) wins
#: over its path; browser tests are browser_env's and the /web playground's (Chromium).
AREAS = ("python", "envs", "catalog", "conformance", "tools", "docker", "typescript", "browser")
_BROWSER_PATHS = ("envs/browser_env/", "python/tests/bridge/test_playground.py")
#: The line that starts the table (.ci/run prints the table again in its summary, from this line).
TABLE_TITLE = "test time per area"


def area_of(nodeid: str) -> str:
    """The area a test's time is counted in (its node id, as the controller reports it)."""
    path, _, rest = nodeid.partition("::")
    group = rest.rpartition("@")[2] if "@" in rest else ""
    group = group or next((g for prefix, g in _GROUPS.items() if path.startswith(prefix)), "")
    if group in ("docker", "typescript"):
        return group
    if path.startswith(_BROWSER_PATHS):
        return "browser"
    top = path.split("/", 1)[0]
    return top if top in AREAS else "python"


# tryfirst: pytest-xdist's worker tags each grouped test in this same hook; the marks must exist by then.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, group in _GROUPS.items():
            if path.startswith(prefix) or (item.get_closest_marker("docker") is not None and group == "docker"):
                item.add_marker(pytest.mark.xdist_group(group))
                break


class _GroupGuard:
    """On the xdist controller under ``--dist loadgroup``: each worker's collection names every test
    of a grouped path (``_GROUPS``) with its group (``<id>@<group>``), else the scheduler treats
    it as ungrouped; if one does not, the run stops before any test runs, saying why."""

    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        lost = [i for i in ids if "@" not in i.partition("::")[2] and i.startswith(tuple(_GROUPS))]
        if lost:
            import xdist

            pytest.exit(
                f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} did not tag {len(lost)} grouped "
                f"test(s) (e.g. {lost[0]}): their xdist_group would be spread over the workers. Use the locked "
                "versions (requirements/dev.txt, make venv), or make conftest.py group them for this pair",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )


class _AreaTimes:
    """Summed test durations per area, gathered on the controller (or the only process)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, set[str]] = defaultdict(set)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        area = area_of(report.nodeid)
        self.seconds[area] += report.duration
        self.tests[area].add(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tests:
            return
        total = sum(self.seconds.values()) or 1.0
        tr = terminalreporter
        tr.section(TABLE_TITLE, sep="-")
        tr.write_line(
            f"{'area':<12} {'tests':>6} {'seconds':>9} {'share':>6}   (setup+call+teardown, summed over workers)"
        )
        for area in (*AREAS, *sorted(set(self.tests) - set(AREAS))):
            if area in self.tests:
                s = self.seconds[area]
                tr.write_line(f"{area:<12} {len(self.tests[area]):>6} {s:>9.1f} {100 * s / total:>5.0f}%")
        tr.write_line(f"{'all':<12} {sum(len(t) for t in self.tests.values()):>6} {total:>9.1f}")


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    config.pluginmanager.register(_AreaTimes(), "openenv-area-times")
    if config.pluginmanager.hasplugin("xdist") and config.getoption("dist", default="no") == "loadgroup":
        config.pluginmanager.register(_GroupGuard(), "openenv-group-guard")
