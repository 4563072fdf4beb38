#!/bin/bash
set -e
jq -r '[.[] | select(.active) | .name] | sort | .[]' /app/users.json > /app/active.txt
