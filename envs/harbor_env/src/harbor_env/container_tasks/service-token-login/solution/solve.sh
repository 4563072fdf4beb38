#!/bin/bash
set -e
for i in $(seq 50); do curl -sf -d user=admin -d "password=$(cat /etc/app/admin.pw)" http://127.0.0.1:9090/login > /app/token.txt && break; sleep 0.2; done
