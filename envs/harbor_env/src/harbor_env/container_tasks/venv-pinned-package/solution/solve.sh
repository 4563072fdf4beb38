#!/bin/bash
set -e
python3 -m venv /app/venv && /app/venv/bin/pip install -q six==1.16.0
