"""The capture side of the harness surface: :mod:`openenv.core.harness.capture.upstream`."""
