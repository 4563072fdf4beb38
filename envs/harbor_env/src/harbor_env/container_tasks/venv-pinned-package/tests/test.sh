#!/bin/bash
if [ "$(/app/venv/bin/python -c 'import six; print(six.__version__)' 2>/dev/null)" = "1.16.0" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
