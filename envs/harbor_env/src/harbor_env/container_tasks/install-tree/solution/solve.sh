#!/bin/bash
set -e
apt-get update -qq && apt-get install -y -qq tree >/dev/null && tree --noreport /app/site > /app/tree.txt
