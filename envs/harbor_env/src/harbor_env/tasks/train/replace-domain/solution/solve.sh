#!/bin/bash
# The reference solution.
set -euo pipefail
find /app/etc -name '*.conf' -type f -exec sed -i 's/oldcorp\.example/newcorp.example/g' {} +
