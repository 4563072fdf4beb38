#!/bin/bash
if [ "$(unzip -Z1 /app/docs.zip 2>/dev/null | sort | tr '\n' ' ')" = "docs/a.txt docs/b.txt " ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
