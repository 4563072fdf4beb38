#!/bin/bash
# The reference solution.
set -euo pipefail
cd /app/photos
for f in *; do
  case "$f" in
    *.JPG|*.jpeg|*.JPEG) mv -- "$f" "${f%.*}.jpg" ;;
  esac
done
