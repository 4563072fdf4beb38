#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/clean.sh <<'EOF'
#!/bin/bash
set -euo pipefail
n=$(find "$1" -type f -name '*.tmp' -print | wc -l)
find "$1" -type f -name '*.tmp' -delete
echo "$n"
EOF
chmod +x /app/clean.sh
