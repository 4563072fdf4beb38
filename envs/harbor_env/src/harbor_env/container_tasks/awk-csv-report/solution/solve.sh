#!/bin/bash
set -e
awk -F, 'NR>1 {t[$1]+=$2} END {for (r in t) print r, t[r]}' /app/sales.csv | sort > /app/report.txt
