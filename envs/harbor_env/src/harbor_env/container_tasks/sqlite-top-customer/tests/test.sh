#!/bin/bash
if [ "$(cat /app/top.txt 2>/dev/null)" = "carol" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
