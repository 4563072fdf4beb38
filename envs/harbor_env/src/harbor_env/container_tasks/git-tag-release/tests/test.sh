#!/bin/bash
if cd /app/repo && [ "$(git cat-file -t v1.2.0 2>/dev/null)" = tag ] && [ "$(git rev-parse v1.2.0^{commit})" = "$(git log --format=%H --grep='^release:')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
