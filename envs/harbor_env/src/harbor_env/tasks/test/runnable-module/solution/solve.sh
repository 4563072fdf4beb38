#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/wordcount/__main__.py <<'EOF'
import sys

from wordcount import count_words

if len(sys.argv) != 2:
    print("usage: python3 -m wordcount FILE", file=sys.stderr)
    sys.exit(2)
with open(sys.argv[1], encoding="utf-8") as f:
    print(count_words(f.read()))
EOF
