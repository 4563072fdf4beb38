#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/inventory.py <<'EOF'
class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, item, n):
        self.stock[item] = self.stock.get(item, 0) + n

    def remove(self, item, n):
        have = self.stock.get(item, 0)
        if n > have:
            raise ValueError(f"only {have} of {item} in stock")
        self.stock[item] = have - n
EOF
