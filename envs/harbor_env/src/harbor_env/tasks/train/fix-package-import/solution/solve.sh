#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
sed -i 's/^from stats import/from .stats import/' mathkit/__init__.py
sed -i 's/^from helpers import/from .helpers import/' mathkit/stats.py
