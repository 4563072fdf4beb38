#!/bin/bash
set -e
echo 'x = 1000 * 1.05^10; scale=2; x/1' | bc -l > /app/balance.txt
