#!/usr/bin/env python3
"""Build the local base image for offline environment images (``openenv-base:bookworm``).

Debootstraps a minimal Debian with python3 (and venv, ca-certificates) from the Debian mirror
named in this host's apt sources, and imports it with ``docker import``. Skips everything when
the image already exists (use --force to rebuild). Needs root, debootstrap and a Docker engine.
See docs/images.md.

    python tools/make_base_image.py [--tag openenv-base:bookworm] [--suite bookworm] [--mirror URL]
"""

from __future__ import annotations

import argparse
import sys

from openenv.deploy.baseimage import DEFAULT_BASE_TAG, DEFAULT_SUITE, apt_mirror, ensure_base_image
from openenv.errors import EnvError


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tag", default=DEFAULT_BASE_TAG, help="image to create (default %(default)s)")
    ap.add_argument("--suite", default=DEFAULT_SUITE, help="Debian release (default %(default)s)")
    ap.add_argument(
        "--mirror",
        default=None,
        help="Debian mirror URL (default: $OPENENV_DEBIAN_MIRROR, else the host's apt sources)",
    )
    ap.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ap.add_argument("--print-mirror", action="store_true", help="print the mirror that would be used and exit")
    ns = ap.parse_args()
    try:
        if ns.print_mirror:
            print(ns.mirror or apt_mirror(ns.suite))
            return 0
        ensure_base_image(ns.tag, suite=ns.suite, mirror=ns.mirror, force=ns.force, echo=lambda m: print(m, flush=True))
    except EnvError as e:
        print(f"make_base_image: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
