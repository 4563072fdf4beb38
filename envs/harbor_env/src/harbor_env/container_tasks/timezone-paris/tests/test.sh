#!/bin/bash
if [ "$(readlink -f /etc/localtime)" = /usr/share/zoneinfo/Europe/Paris ] && [ "$(cat /etc/timezone)" = Europe/Paris ] && [ "$(env -u TZ date -d @0 +%H)" = 01 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
