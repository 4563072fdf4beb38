#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/config.py <<'EOF'
import json

DEFAULTS = {"host": "localhost", "port": 8000, "debug": False}


def load(path):
    with open(path) as f:
        data = json.load(f)
    out = {**DEFAULTS, **{k: data[k] for k in DEFAULTS if k in data}}
    if not isinstance(out["port"], int) or isinstance(out["port"], bool):
        raise ValueError("port must be an integer")
    return out
EOF
