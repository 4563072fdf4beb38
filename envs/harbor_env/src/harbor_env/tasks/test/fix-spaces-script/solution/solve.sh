#!/bin/bash
# The reference solution.
set -euo pipefail
cat > /app/archive.sh <<'EOF'
#!/bin/bash
dir=$1
mkdir -p "$dir/archive"
n=0
for f in "$dir"/*.log; do
  [ -e "$f" ] || continue
  mv -- "$f" "$dir/archive/"
  n=$((n + 1))
done
echo "$n"
EOF
chmod +x /app/archive.sh
