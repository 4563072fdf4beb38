#!/bin/bash
if dpkg -s tree >/dev/null 2>&1 && [ "$(cat /app/tree.txt)" = "$(tree --noreport /app/site)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
