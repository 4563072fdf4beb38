"""Deployment inputs an attacker (or a typo) controls (RFC 0003): environment names given
to ``openenv init`` and symlinks in an environment directory headed for an image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from openenv.cli import main
from openenv.errors import FailedPrecondition

pytest.importorskip("docker")  # openenv.deploy is the docker extra

from openenv.deploy.wheelhouse import copy_project

HOSTILE_NAMES = ["a" * 300, "ü_env", "../../etc", "", "class", "-rf", "x\x01y", "a/b", "a" * 65, " ", "é" * 200]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_init_names_get_a_clean_error_and_create_nothing(name: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["init", "--dir", str(tmp_path), "--", name])
    assert r.exit_code == 1, r.output
    assert "is not a usable environment name" in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # no traceback
    assert len(r.output) < 400  # the name is not echoed in full
    assert list(tmp_path.iterdir()) == []


def test_init_in_a_directory_that_cannot_be_written_is_a_clean_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = CliRunner().invoke(main, ["init", "--dir", str(blocker / "sub"), "my_env"])
    assert r.exit_code == 1 and "cannot create the environment" in r.output and "Traceback" not in r.output


def test_the_build_context_keeps_symlinks_and_refuses_ones_pointing_outside(tmp_path: Path) -> None:
    env, outside, ctx = tmp_path / "env", tmp_path / "secret.txt", tmp_path / "ctx"
    (env / "data").mkdir(parents=True)
    (env / "data" / "real.txt").write_text("inside")
    outside.write_text("host secret")
    os.symlink("real.txt", env / "data" / "alias.txt")
    os.symlink("data", env / "data_link")
    copy_project(env, ctx)
    assert os.readlink(ctx / "data" / "alias.txt") == "real.txt"  # still a link, not a copy
    assert os.readlink(ctx / "data_link") == "data"
    assert (ctx / "data" / "alias.txt").read_text() == "inside"

    os.symlink(str(outside), env / "data" / "leak.txt")
    with pytest.raises(FailedPrecondition, match="outside"):
        copy_project(env, tmp_path / "ctx2")
    assert not any("host secret" in p.read_text() for p in (tmp_path / "ctx2").rglob("*") if p.is_file())
