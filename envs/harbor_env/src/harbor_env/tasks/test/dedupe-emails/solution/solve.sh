#!/bin/bash
# The reference solution.
set -euo pipefail
python3 - <<'EOF'
seen = []
for line in open("/app/emails.txt"):
    e = line.strip().lower()
    if e and e not in seen:
        seen.append(e)
open("/app/unique.txt", "w").write("".join(e + "\n" for e in seen))
EOF
