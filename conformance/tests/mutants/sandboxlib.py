"""Helpers of the sandbox mutants (RFC 0010): coding_env with one layer of its sandbox removed.

Each sandbox mutant serves a subclass of ``coding_env.server.CodingEnvironment`` in a server
subprocess of its own, so it may change ``openenv.sandbox``'s internals for that process. The
code that runs inside the sandbox (its supervisor and the confinement of each call) is copied
in from ``openenv.sandbox._box._HERE``: :func:`patch_sandbox_files` points that at modified
copies. A mutation names the functions and constants it replaces, and fails loudly (at import,
so the mutant server does not start) when one of them no longer exists.

Sandbox mutants certify the ``sandbox`` level only (``LEVELS``): a full certification per
mutant would take minutes each."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from openenv.sandbox import _box

#: The levels a sandbox mutant is certified at (honoured by test_mutants.py).
LEVELS = ("sandbox",)


def _require(source: str, names: tuple[str, ...], where: str) -> None:
    missing = [n for n in names if n not in source]
    if missing:
        raise RuntimeError(f"the sandbox mutation no longer applies: {where} has no {missing}")


def patch_sandbox_files(*, supervisor: str = "", confine: str = "", uses: tuple[str, ...] = ()) -> None:
    """Run the sandbox with modified copies of its in-sandbox code.

    ``supervisor``: code run in the supervisor's namespace after it is defined and before its
    ``main()`` (replace a function or a class's method there). ``confine``: code appended to
    ``_confine.py`` (replace a constant or a function). ``uses``: the names the code relies on,
    checked to exist in the originals."""
    here = Path(_box._HERE)
    sup = (here / "_supervisor.py").read_text()
    conf = (here / "_confine.py").read_text()
    _require(sup + conf, uses, "the sandbox's supervisor and _confine.py")
    if supervisor:
        sup = (
            "import sys as _sys\n"
            f"_ORIGINAL = {sup!r}\n"
            "_ns = {'__name__': 'openenv_sandbox_supervisor', '__file__': __file__}\n"
            "exec(compile(_ORIGINAL, __file__, 'exec'), _ns)\n"
            f"exec(compile({supervisor!r}, 'mutation', 'exec'), _ns)\n"
            "_sys.exit(_ns['main']())\n"
        )
    if confine:
        conf += "\n\n# -- the mutation\n" + confine + "\n"
    tmp = Path(tempfile.mkdtemp(prefix="openenv-sandbox-mutant-"))
    atexit.register(shutil.rmtree, tmp, True)
    (tmp / "_supervisor.py").write_text(sup)
    (tmp / "_confine.py").write_text(conf)
    _box._HERE = tmp
