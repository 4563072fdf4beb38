#!/bin/bash
# The reference solution.
set -euo pipefail
awk '$2 == "ERROR"' /app/app.log | wc -l | tr -d ' ' > /app/error_count.txt
