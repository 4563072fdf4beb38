#!/bin/bash
if openssl x509 -in /app/tls/cert.pem -noout -subject 2>/dev/null | grep -q "CN *= *shop.internal" && [ "$(openssl x509 -in /app/tls/cert.pem -noout -modulus)" = "$(openssl rsa -in /app/tls/key.pem -noout -modulus 2>/dev/null)" ] && openssl rsa -in /app/tls/key.pem -noout -text 2>/dev/null | grep -q "2048 bit"; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
