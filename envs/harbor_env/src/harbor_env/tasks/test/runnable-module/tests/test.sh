#!/bin/bash
# The verifier (Harbor's contract): the checks in test_outputs.py write /logs/verifier/reward.json,
# {"reward": 1 when every check passes else 0, "<check>": 1 or 0, ...}.
mkdir -p /logs/verifier
# `python3 -m wordcount` is run in /app: the grader runs Python with PYTHONSAFEPATH=1 (the working directory is not on
# sys.path unless a task says so), so this task says so. The tests' own interpreter (-I) ignores it.
export PYTHONPATH=/app
python3 -I /tests/test_outputs.py
