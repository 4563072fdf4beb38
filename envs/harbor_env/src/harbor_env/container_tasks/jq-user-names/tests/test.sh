#!/bin/bash
if [ "$(cat /app/active.txt 2>/dev/null)" = "$(printf 'ada\nlinus\nmargaret')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
