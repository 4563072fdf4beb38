#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/pyproject.toml <<'EOF'
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "greet"
version = "1.2.0"
requires-python = ">=3.9"

[project.scripts]
greet = "greet:main"
EOF
