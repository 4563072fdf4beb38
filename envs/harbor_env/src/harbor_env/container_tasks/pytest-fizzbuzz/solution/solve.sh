#!/bin/bash
set -e
cat > /app/fizzbuzz.py <<'EOF'
def fizzbuzz(n):
    return 'Fizz' * (n % 3 == 0) + 'Buzz' * (n % 5 == 0) or str(n)
EOF
