"""Repository-wide test configuration: which tests must share one pytest-xdist worker.

``make test`` runs the suite on several workers (``-n auto --dist loadgroup``). Tests that
share something only one process may drive at a time carry an ``xdist_group``: the Docker
tests (one engine, shared image tags and build caches) and the TypeScript binding (one
``typescript/node_modules`` and ``dist/`` built in place). Everything else talks to servers on
port 0 and may run anywhere.
"""

from __future__ import annotations

import pytest

#: path prefix (relative to the repository root) -> xdist group
_GROUPS = {
    "python/tests/docker/": "docker",
    "conformance/tests/test_docker.py": "docker",
    "python/tests/test_typescript.py": "typescript",
}


# tryfirst: pytest-xdist's worker tags each grouped test in this same hook; the marks must exist by then.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for prefix, group in _GROUPS.items():
            if path.startswith(prefix) or (item.get_closest_marker("docker") is not None and group == "docker"):
                item.add_marker(pytest.mark.xdist_group(group))
                break
