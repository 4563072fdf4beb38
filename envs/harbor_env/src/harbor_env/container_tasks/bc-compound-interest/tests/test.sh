#!/bin/bash
if [ "$(cat /app/balance.txt 2>/dev/null)" = "1628.89" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
