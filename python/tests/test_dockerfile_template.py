"""The one Dockerfile template that ``openenv build`` renders for every environment (issue 55):
the protocol version in images comes from the contract, an environment adds its own lines
through ``image.Dockerfile`` (two hooks: build stages, and root lines in the runtime stage),
``[tool.openenv] sandbox`` adds bubblewrap, and no environment of the repository repeats the
template. The builds themselves (every image, offline) run in .ci/run and python/tests/docker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openenv._contract import PROTOCOL_VERSION
from openenv.deploy.build import HOOK_FILE, dockerfile_template, render_dockerfile
from openenv.deploy.engine import GRPC_PORT
from openenv.deploy.project import EnvProject
from openenv.errors import FailedPrecondition

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path, *, sandbox: bool = False, hook: str | None = None) -> Path:
    d = tmp_path / "my_env"
    d.mkdir(parents=True)
    (d / "pyproject.toml").write_text(
        '[project]\nname = "my-env"\nversion = "0.1.0"\n\n'
        f'[tool.openenv]\nfactory = "my_env.server:MyEnv"\nsandbox = {str(sandbox).lower()}\n'
    )
    if hook is not None:
        (d / HOOK_FILE).write_text(hook)
    return d


def _contract_points(text: str) -> None:
    assert not re.search(r"\{\{\w+\}\}", text.replace("{{.Id}}", ""))  # every field rendered
    assert f"ARG OPENENV_PROTOCOL_VERSION={PROTOCOL_VERSION}\n" in text
    assert f"EXPOSE {GRPC_PORT} 8000" in text and f"OPENENV_GRPC_PORT={GRPC_PORT}" in text
    assert "USER 10001:10001" in text and "HEALTHCHECK" in text and "FROM ${BASE_IMAGE} AS install" in text


def test_no_environment_repeats_the_template_and_each_renders_the_contract() -> None:
    """Every environment of the repository builds from the rendered template (no Dockerfile of
    its own, so none can keep a stale protocol version), with the contract's version in it."""
    envs = sorted(d for d in (REPO / "envs").iterdir() if (d / "pyproject.toml").is_file())
    assert len(envs) >= 12
    for d in envs:
        env = EnvProject.load(d)
        assert not (d / "Dockerfile").exists(), f"{d}: put the environment's own lines in {HOOK_FILE}"
        text = render_dockerfile(d)
        _contract_points(text)
        assert ("command -v bwrap" in text) == env.sandbox, d
    _contract_points(dockerfile_template())


def test_an_environments_lines_land_at_their_hooks_and_nothing_of_them_is_read_as_a_field(tmp_path: Path) -> None:
    """Stages go before the runtime stage, and one named runtime-base becomes its base; runtime
    lines run as root before the virtualenv is copied in (cached while only the code changes).
    A ``{{...}}`` in the environment's own lines (a docker format string) stays as written."""
    d = _env(
        tmp_path,
        hook=(
            "RUN echo before-any-marker\n"
            "# openenv-hook: stages\n"
            "FROM ${BASE_IMAGE} AS tools\nRUN echo in-a-stage\n"
            "FROM scratch AS runtime-base\nCOPY --from=tools / /\n"
            "# openenv-hook: runtime\n"
            "RUN docker-ish --format '{{.Id}}'\n"
        ),
    )
    text = render_dockerfile(d)
    _contract_points(text)
    runtime = text.index("\nFROM runtime-base\n")
    assert text.index("AS install") < text.index("RUN echo in-a-stage") < text.index("AS runtime-base") < runtime
    copy = text.index("COPY --from=install /opt/openenv /opt/openenv")
    assert runtime < text.index("RUN echo before-any-marker") < copy
    assert runtime < text.index("RUN docker-ish --format '{{.Id}}'") < copy
    assert text.index("USER 10001:10001") > copy
    # Without a runtime-base stage the runtime stage stays on the base image; no hook, no blank line.
    plain = render_dockerfile(_env(tmp_path / "p", hook="RUN echo x\n"))
    assert "\nFROM ${BASE_IMAGE}\n" in plain and "runtime-base" not in plain
    assert "\n\n\n" not in render_dockerfile(_env(tmp_path / "q"))


def test_sandbox_true_gives_bubblewrap_and_false_does_not(tmp_path: Path) -> None:
    """The sandboxed-task base: ``[tool.openenv] sandbox = true`` is all an environment that runs
    code in openenv.sandbox writes to get bubblewrap in its image."""
    assert "command -v bwrap" in render_dockerfile(_env(tmp_path / "a", sandbox=True))
    assert "bwrap" not in render_dockerfile(_env(tmp_path / "b", sandbox=False))


def test_an_unknown_hook_section_is_refused_naming_it_and_an_own_dockerfile_is_used_as_it_is(tmp_path: Path) -> None:
    """A misspelt section would silently drop lines: refused, naming the section and the file.
    An environment with a whole Dockerfile of its own (custom ones, docs/images.md) keeps it."""
    d = _env(tmp_path, hook="# openenv-hook: stagse\nRUN true\n")
    with pytest.raises(FailedPrecondition, match=r"unknown section '# openenv-hook: stagse'.*image.Dockerfile|stagse"):
        render_dockerfile(d)
    own = 'ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCMD ["true"]\n'
    (d / "Dockerfile").write_text(own)
    assert render_dockerfile(d) == own
