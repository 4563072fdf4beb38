"""Evaluation harness integrations: :mod:`openenv.evals.inspect` (Inspect AI, the ``inspect`` extra)."""
