#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
git add README.md
git commit -qm 'Fix typo in README'
