#!/bin/bash
if [ "$(cat /app/token.txt 2>/dev/null)" = "$(printf admin:correct-horse | sha256sum | cut -c1-16)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
