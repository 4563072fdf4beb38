"""Catch: a small arcade game with RGB-frame observations (:class:`CatchEnvironment`)."""

from catch.server import CatchEnvironment

__all__ = ["CatchEnvironment"]
