#!/usr/bin/env python3
"""Writes ``prices.csv`` beside this file: the synthetic market the finance environment trades.

Run it to regenerate the data (``python catalog/src/openenv_catalog/finance/make_prices.py``);
``catalog/tests/test_finance.py`` checks the committed file is exactly this script's output.

Five made-up assets, daily closes on business days from 2017-12-01 to 2023-12-29, driven by a
two-regime market (calm and rising, or turbulent and falling; a Markov chain switches between
them) plus each asset's own noise: a broad index (INDX), a high-beta growth stock (TECH), a
low-beta defensive stock (UTIL), a bond-like asset that hedges the market a little (BOND) and
a volatile commodity (CMDT). Everything comes from one seeded generator, so the file is the
same on every machine; no real market's data is used (nothing to license).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

SEED = 20261202
START, END = "2017-12-01", "2024-01-01"  # END is exclusive
ASSETS = ("INDX", "TECH", "UTIL", "BOND", "CMDT")
START_PRICES = (100.0, 50.0, 40.0, 100.0, 20.0)
BETAS = np.array([1.0, 1.5, 0.5, -0.1, 0.6])
IDIO_VOL = np.array([0.002, 0.012, 0.006, 0.002, 0.018])  # daily, on top of the market's
ALPHA = np.array([0.0, 0.0002, 0.0001, 0.0001, -0.0001])  # daily drift of each asset's own
# Regimes: (daily mean, daily volatility) of the market, and the chance of leaving each per day.
REGIMES = ((0.0006, 0.008), (-0.0009, 0.019))
LEAVE = (0.01, 0.04)
OUT = Path(__file__).with_name("prices.csv")


def generate() -> str:
    """The CSV text: ``date,INDX,TECH,UTIL,BOND,CMDT``, closes rounded to 4 decimals."""
    rng = np.random.default_rng(SEED)
    days = np.arange(np.datetime64(START), np.datetime64(END))
    days = days[np.is_busday(days)]
    regime = 0
    log_prices = np.log(np.array(START_PRICES))
    out = io.StringIO()
    out.write("date," + ",".join(ASSETS) + "\n")
    for i, day in enumerate(days):
        if i:
            if rng.random() < LEAVE[regime]:
                regime = 1 - regime
            mean, vol = REGIMES[regime]
            market = mean + vol * rng.standard_normal()
            own = ALPHA + IDIO_VOL * rng.standard_normal(len(ASSETS))
            log_prices = log_prices + BETAS * market + own
        out.write(str(day) + "," + ",".join(f"{p:.4f}" for p in np.exp(log_prices)) + "\n")
    return out.getvalue()


if __name__ == "__main__":
    OUT.write_text(generate())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
