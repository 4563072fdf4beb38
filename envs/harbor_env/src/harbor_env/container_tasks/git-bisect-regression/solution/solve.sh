#!/bin/bash
set -e
cd /app/repo && git bisect start HEAD $(git rev-list --max-parents=0 HEAD) >/dev/null && git bisect run ./check.sh >/tmp/bisect.log 2>&1; grep -o '^[0-9a-f]\{40\} is the first bad commit' /tmp/bisect.log | cut -c1-40 > /app/bad.txt; git bisect reset >/dev/null
