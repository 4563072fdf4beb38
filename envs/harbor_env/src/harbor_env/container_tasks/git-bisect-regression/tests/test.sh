#!/bin/bash
if [ "$(cat /app/bad.txt 2>/dev/null)" = "$(cd /app/repo && git log --format=%H --grep='^step 7$')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
