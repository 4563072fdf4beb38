"""Importers: ``SOURCE:ID`` -> an :class:`openenv.Environment` class, with no hand-written glue.

Each module has ``load(ident)`` (the ``openenv.importers`` entry point, used by
``openenv serve import:SOURCE:ID``) and ``CURATED``: the ids the catalog lists and certifies.
"""

from __future__ import annotations


class ImporterUnavailable(ImportError):
    """The importer's package is not installed, or cannot be installed next to openenv."""
