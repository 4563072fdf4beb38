#!/bin/bash
# The reference solution.
set -euo pipefail
chmod 755 /app/bin/*.sh
chmod 600 /app/secrets/key.pem
