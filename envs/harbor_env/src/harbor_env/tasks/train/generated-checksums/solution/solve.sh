#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app/data && sha256sum * > ../SHA256SUMS
