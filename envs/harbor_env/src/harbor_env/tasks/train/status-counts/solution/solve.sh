#!/bin/bash
# The reference solution.
set -euo pipefail
python3 - <<'EOF'
import json, re
from collections import Counter
c = Counter(re.search(r'" (\d{3}) \S+$', x.rstrip()).group(1) for x in open("/app/access.log") if x.strip())
json.dump(dict(c), open("/app/status_counts.json", "w"))
EOF
