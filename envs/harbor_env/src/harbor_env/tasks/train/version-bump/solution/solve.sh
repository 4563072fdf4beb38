#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
sed -i 's/^version = "0.3.1"/version = "0.4.0"/' pyproject.toml
sed -i 's/^__version__ = "0.3.1"/__version__ = "0.4.0"/' src/tally/__init__.py
python3 - <<'EOF'
p = "/app/CHANGELOG.md"
t = open(p).read().replace("## 0.3.1", "## 0.4.0\n\n- Add tally.reset().\n\n## 0.3.1", 1)
open(p, "w").write(t)
EOF
