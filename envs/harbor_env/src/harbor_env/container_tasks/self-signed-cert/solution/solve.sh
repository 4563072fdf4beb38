#!/bin/bash
set -e
mkdir -p /app/tls && openssl req -x509 -newkey rsa:2048 -nodes -keyout /app/tls/key.pem -out /app/tls/cert.pem -days 30 -subj /CN=shop.internal 2>/dev/null
