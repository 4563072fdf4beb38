#!/bin/bash
set -e
for i in $(seq 50); do curl -sf http://127.0.0.1:8080/items > /tmp/items.json && break; sleep 0.2; done; python3 -c "import json; print(sum(i['qty'] for i in json.load(open('/tmp/items.json'))))" > /app/total.txt
