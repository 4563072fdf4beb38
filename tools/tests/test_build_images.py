"""tools/build_images.py (`make images`, .ci/run's image phase): which images it builds, in which
order, and how it refuses a name that is not an environment image. The builds themselves run in
.ci/run and in the Docker tests (python/tests/docker)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module():  # tools/ is not a package: load the script as a module
    spec = importlib.util.spec_from_file_location("build_images", ROOT / "tools" / "build_images.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_every_environment_with_an_openenv_table_is_an_image_heaviest_first() -> None:
    mod = _module()
    images = mod.images()
    expected = {
        p.parent.name
        for p in (ROOT / "envs").glob("*/pyproject.toml")
        if "openenv" in tomllib.loads(p.read_text()).get("tool", {})
    }
    assert {i.env_dir.name for i in images} == expected
    weights = [i.weight for i in images]
    assert weights == sorted(weights, reverse=True)
    # Equal weights keep the alphabetical order (a repeatable schedule).
    light = [i.env_dir.name for i in images if i.weight == 1]
    assert light == sorted(light)
    browser = next(i for i in images if i.env_dir.name == "browser_env")
    assert images[0] is browser and browser.weight > 1
    assert browser.certify_args[:2] == ["--max-examples", "2"]


def test_an_unknown_image_name_is_refused_before_anything_is_built() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "build_images.py"), "echo_env", "no_such_env"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "no environment image named no_such_env" in out.stderr
    assert "built" not in out.stdout
