#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
ln -sfn releases/v2 current
echo 2.0.0 > releases/v2/VERSION
