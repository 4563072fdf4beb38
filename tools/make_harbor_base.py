#!/usr/bin/env python3
"""Build the harbor base image (``openenv-harbor-base:bookworm``) and start harbor-packages.

What a Harbor task's ``FROM`` resolves to in harbor_env's container mode when the engine does
not hold the image it names: ``openenv-base:bookworm`` (tools/make_base_image.py) plus curl, git,
procps, pytest, uv and uvx, and the local CA harbor-packages' uv installer is served with. Skips
the build when the image exists, built from the same inputs (use --force to rebuild). See
docs/harbor.md, "Container mode".

    python tools/make_harbor_base.py [--force] [--no-packages]
"""

from __future__ import annotations

import argparse
import sys

from harbor_env.container import BASE_TAG, ensure_base_image, ensure_packages


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ap.add_argument("--no-packages", action="store_true", help="do not start harbor-packages")
    ns = ap.parse_args()
    try:
        ensure_base_image(BASE_TAG, force=ns.force, echo=lambda m: print(m, flush=True))
        if not ns.no_packages:
            ensure_packages()
    except RuntimeError as e:
        print(f"make_harbor_base: {e}", file=sys.stderr)
        return 1
    print(BASE_TAG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
