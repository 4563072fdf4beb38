#!/bin/bash
if [ "$(cat /app/expensive.txt 2>/dev/null)" = "$(printf 'Dune\nSICP')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
