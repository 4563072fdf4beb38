#!/bin/bash
if [ "$(cat /app/report.txt 2>/dev/null)" = "$(printf 'east 30\nnorth 12\nwest 7')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
