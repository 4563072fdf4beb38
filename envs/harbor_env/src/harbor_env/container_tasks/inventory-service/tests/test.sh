#!/bin/bash
if [ "$(cat /app/total.txt 2>/dev/null)" = 117 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
