"""Gymnasium spaces from the protocol's TypeSpecs, with the conversions both ways.

The converter is :mod:`openenv.spaces` (one for both directions: environments that hold
Gymnasium spaces declare them with it, and this adapter reads them back with it); this module
is its name in the gym extra. :func:`converter` maps one advertised ``TypeSpec``
(``EnvironmentInfo.action`` / ``.observation``) to a :class:`Converter`: its ``space`` and the
two translations between what :class:`openenv.EnvClient` decodes/encodes and what Gymnasium
code holds; a type that fits no space raises :class:`SpaceError`, naming the part.
"""

from __future__ import annotations

from openenv.spaces import CHARSET, DEFAULT_MAX_TEXT, Converter, SpaceError, converter, declaration, space_converter

__all__ = ["CHARSET", "DEFAULT_MAX_TEXT", "Converter", "SpaceError", "converter", "declaration", "space_converter"]
