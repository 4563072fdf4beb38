"""openenv.sandbox.put_files / get_files: files into and out of a sandbox's workspace, as data.

Regular files (with their permission bits) and directories round-trip; links, FIFOs and the
like are reported, never followed, read or recreated; modules planted in the workspace are
not imported by the copying programs; paths out of the workspace are refused.
"""

from __future__ import annotations

import os
import shutil

import pytest

from openenv.sandbox import Limits, Sandbox, get_files, put_files, safe_relpath


@pytest.fixture(autouse=True)
def _needs_bubblewrap() -> None:
    """Required when CI is set (.ci/run installs it), skipped with the reason elsewhere."""
    if shutil.which("bwrap"):
        return
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail("bubblewrap is not installed; CI requires the sandbox tests", pytrace=False)
    pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")


def test_files_round_trip_as_data_and_links_are_never_followed() -> None:
    with Sandbox(Limits(wall_s=20)) as box:
        put_files(
            box,
            {"a/b.txt": "hi", "run.sh": "#!/bin/sh\necho ok\n", "bin.dat": bytes(range(256))},
            modes={"run.sh": 0o755},
            dirs=["empty/inner"],
        )
        r = box.exec(["/bin/sh", "-c", "./run.sh && cat a/b.txt && stat -c %a run.sh a/b.txt"])
        assert r.stdout == "ok\nhi755\n644\n", r
        # what code may leave: links (out of the workspace, into /proc), a FIFO, and modules
        # named like the ones the copying programs import
        plant = (
            "ln -s /proc/self/environ env_link && ln -s /etc/passwd a/pw && mkfifo fifo && "
            "for m in tarfile base64 io stat; do echo 'raise SystemExit(9)' > $m.py; done"
        )
        assert box.exec(["/bin/sh", "-c", plant]).exit_code == 0
        got = get_files(box, exclude=["stat.py"])
        assert got.files["a/b.txt"] == b"hi" and got.files["bin.dat"] == bytes(range(256))
        assert got.modes["run.sh"] == 0o755 and got.modes["a/b.txt"] == 0o644
        assert {"a", "empty", "empty/inner"} <= set(got.dirs)
        assert got.skipped == {
            "env_link": "symlink -> /proc/self/environ",
            "a/pw": "symlink -> /etc/passwd",
            "fifo": "special",
        }
        assert "stat.py" not in got.files and got.files["tarfile.py"] == b"raise SystemExit(9)\n"
        # back into an emptied workspace: plain files only
        box.clear()
        put_files(box, got.files, modes=got.modes, dirs=got.dirs)
        r = box.exec(["/bin/sh", "-c", "find . | sort; test -L env_link || echo no-link"])
        assert "./env_link" not in r.stdout and "./fifo" not in r.stdout and r.stdout.endswith("no-link\n")
        # a file written over a link replaces the link; it never writes through it
        assert box.exec(["/bin/sh", "-c", "ln -s /tmp/target a/b.txt.new && mv a/b.txt.new a/b.txt"]).exit_code == 0
        put_files(box, {"a/b.txt": "replaced"})
        r = box.exec(["/bin/sh", "-c", "test -L a/b.txt && echo link; cat a/b.txt"])
        assert r.stdout == "replaced"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "", ".", "/workspace/../x", "a\x00b"])
def test_paths_out_of_the_workspace_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        safe_relpath(path)


def test_relative_paths_are_normalised() -> None:
    assert safe_relpath("/workspace/a/./b//c.txt") == "a/b/c.txt"
    assert safe_relpath("a/../b") == "b"
