#!/bin/bash
if [ "$(getent passwd deploy | cut -d: -f6,7)" = "/home/deploy:/bin/bash" ] && id -nG deploy | grep -qw www-data && [ "$(stat -c %U /home/deploy)" = deploy ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
