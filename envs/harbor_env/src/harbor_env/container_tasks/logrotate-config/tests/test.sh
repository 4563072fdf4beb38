#!/bin/bash
if f=/etc/logrotate.d/shop; logrotate -d $f >/dev/null 2>&1 && grep -qw daily $f && grep -Eq "rotate +7" $f && grep -qw compress $f && grep -qw missingok $f && grep -q "/var/log/shop/\*.log" $f; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
