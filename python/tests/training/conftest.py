"""The training integrations' tests (docs/training.md): Gymnasium, SB3, TRL, collect,
Inspect AI. This directory holds their helpers (``tiny_lm``: a tiny model and tokenizer
built on the spot)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
