#!/bin/bash
# The reference solution.
set -euo pipefail
python3 - <<'EOF'
import csv
from collections import defaultdict
from decimal import Decimal
t = defaultdict(Decimal)
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        t[row["region"]] += Decimal(row["amount"])
with open("/app/totals.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["region", "total"])
    for r in sorted(t):
        w.writerow([r, f"{t[r]:.2f}"])
EOF
