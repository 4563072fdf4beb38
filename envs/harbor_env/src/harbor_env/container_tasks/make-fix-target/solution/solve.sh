#!/bin/bash
set -e
printf 'out/report.txt: data.txt\n\tmkdir -p out\n\tsort data.txt > out/report.txt\n' > /app/Makefile
