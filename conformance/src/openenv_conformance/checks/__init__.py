"""The checks, one module per level. Each module registers its checks on import
(:func:`openenv_conformance.registry.check`); README.md documents every id."""
