"""``python -m openenv.runtime.grading_probes MODULE:CLASS``: an environment's grading probes
(RFC 0015, :func:`openenv.runtime.grading.probes_document`) as JSON on stdout, for the
certifier's ``grading`` level where the environment is installed (in a ``docker:`` target's
image). Exit 1 with the reason on stderr when the class cannot be loaded or its probes are
malformed; 2 on a bad command line."""

from __future__ import annotations

import sys

from openenv.runtime.grading import main

if __name__ == "__main__":
    sys.exit(main())
