#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app/tree && find . -type f -size +1000c | sed 's|^\./||' | LC_ALL=C sort > /app/large.txt
