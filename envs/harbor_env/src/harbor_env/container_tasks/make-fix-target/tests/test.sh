#!/bin/bash
cd /app && rm -rf out && make >/dev/null 2>&1
if [ "$(cat /app/out/report.txt 2>/dev/null)" = "$(printf 'apple\nbanana\ncherry')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
