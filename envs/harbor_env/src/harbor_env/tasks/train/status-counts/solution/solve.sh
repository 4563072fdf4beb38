#!/bin/bash
# The reference solution.
set -euo pipefail
python3 - <<'EOF'
import json, re
from collections import Counter
c = Counter(re.search(r'" (\d{3}) \S+$', l.rstrip()).group(1) for l in open("/app/access.log") if l.strip())
json.dump(dict(c), open("/app/status_counts.json", "w"))
EOF
