#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app
printf '*.pyc\nbuild/\n.env\n' > .gitignore
git add .gitignore
git commit -qm 'Ignore build artifacts'
