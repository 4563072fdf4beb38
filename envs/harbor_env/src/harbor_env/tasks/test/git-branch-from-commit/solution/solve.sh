#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
git branch feature/login main~1
