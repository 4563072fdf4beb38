#!/bin/bash
# The reference solution.
set -euo pipefail
python3 - <<'EOF'
import configparser
c = configparser.ConfigParser()
c.read(["/app/defaults.ini", "/app/override.ini"])
with open("/app/merged.ini", "w") as f:
    c.write(f)
EOF
