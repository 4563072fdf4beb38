#!/bin/bash
# The reference solution.
set -euo pipefail
sed -i 's/start = number \* size/start = (number - 1) * size/' /app/paginate.py
