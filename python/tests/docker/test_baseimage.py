"""The offline base image: the mirror comes from apt sources (both formats), the build is
skipped when the image exists, and the image has what environment images need."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openenv.deploy.baseimage import DEFAULT_BASE_TAG, apt_mirror, apt_sources
from openenv.deploy.build import probe_base
from openenv.errors import NotFound

REPO = Path(__file__).resolve().parents[3]


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (etc / name).write_text(text)
    return etc


def test_mirror_from_deb822_sources(tmp_path: Path) -> None:
    etc = _apt(
        tmp_path,
        {
            "sources.list.d/debian.sources": (
                "Types: deb\n# a comment\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
                "Components: main\n\n"
                "Types: deb deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
                "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            ),
            "sources.list.d/other.sources": "Types: deb\nURIs: http://other.example/x\nSuites: nodistro\n",
            "sources.list.d/off.sources": (
                "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n"
            ),
            "sources.list.d/ignored.list.disabled": "deb http://never.example/debian bookworm main\n",
        },
    )
    assert apt_mirror("bookworm", etc) == "http://mirror.example/debian"
    assert {s.uri for s in apt_sources(etc)} == {
        "http://mirror.example/debian-security",
        "http://mirror.example/debian",
        "http://other.example/x",
    }
    # No source lists trixie, but a Debian archive serves every release.
    assert apt_mirror("trixie", etc) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources(tmp_path: Path) -> None:
    etc = _apt(
        tmp_path,
        {
            "sources.list": (
                "# deb http://commented.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian-security bookworm-security main\n"
                "deb-src http://src.example/debian bookworm main\n"
                "deb [arch=amd64] http://one.example/debian bookworm main contrib\n"
            )
        },
    )
    assert apt_mirror("bookworm", etc) == "http://one.example/debian"


def test_no_debian_mirror_is_a_clear_error(tmp_path: Path) -> None:
    etc = _apt(tmp_path, {"sources.list.d/x.list": "deb http://ppa.example/ubuntu jammy main\n"})
    with pytest.raises(NotFound, match="--mirror"):
        apt_mirror("bookworm", etc)


def test_the_host_has_a_mirror() -> None:
    """This machine's own apt sources name a Debian archive (what CI debootstraps from)."""
    if not Path("/etc/apt").is_dir():
        pytest.skip("no /etc/apt on this host")
    assert apt_mirror().startswith(("http://", "https://", "file:/"))


@pytest.mark.docker
def test_base_image_is_reused_and_fit_for_images(engine: Any, base_image: str) -> None:
    if base_image != DEFAULT_BASE_TAG:
        pytest.skip(f"the tests use {base_image}, not the debootstrapped base")
    r = subprocess.run(
        [sys.executable, str(REPO / "tools" / "make_base_image.py")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0 and "exists" in r.stdout and "nothing to do" in r.stdout, r.stdout + r.stderr
    labels = engine.images.get(DEFAULT_BASE_TAG).labels
    assert labels["openenv.base.suite"] == "bookworm" and labels["openenv.base.python"] == "3.11"
    target = probe_base(engine, DEFAULT_BASE_TAG)
    assert (target.python, target.libc) == ("3.11", "glibc") and target.libc_version.startswith("2.")
    assert "cp311" in " ".join(target.pip_args()) and any(a.startswith("manylinux_2_17_") for a in target.pip_args())


def test_health_command_reports_a_server_that_is_not_there() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on (bound, never listening)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "openenv.cli", "health", f"grpc://127.0.0.1:{port}", "--timeout", "2"],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert r.returncode == 1 and r.stdout.strip() in ("UNAVAILABLE", "DEADLINE_EXCEEDED"), r.stdout + r.stderr
