#!/bin/bash
# The reference solution.
set -euo pipefail
cd /srv/site
python3 -c "import sys; hs = open('hosts.txt').read().split(); print('\n'.join(sorted(hs, key=lambda h: (h.split('.', 1)[1], h))))" > sorted.txt
