#!/bin/bash
# The verifier (Harbor's contract): the checks in test_outputs.py write /logs/verifier/reward.json,
# {"reward": 1 when every check passes else 0, "<check>": 1 or 0, ...}.
mkdir -p /logs/verifier
python3 -I /tests/test_outputs.py
