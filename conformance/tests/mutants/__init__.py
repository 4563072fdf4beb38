"""Deliberately broken environments: each module breaks exactly one rule of the contract.

A mutant module defines ``Env`` (the environment class served) and may define ``Wire``, a
wrapper of the runtime's servicer that corrupts one thing on the wire (for rules the
Python runtime enforces itself), ``HttpBackend`` (the HTTP side's backend, an
``openenv.http.LocalBackend``), ``Vector`` (the runtime's ``VectorSession``), and
``SERVER_KWARGS`` for :class:`openenv.Server`, and ``setup()``, called in the mutant's server
process before it serves (for changes to the runtime's internals; importing a mutant has no
side effect). ``LEVELS`` names the levels it is certified at (all by default; the sandbox
mutants, ``sandbox_*``, only ``sandbox``), ``RUN_OPTIONS`` overrides of the run's options,
``REQUIRES_ROOT`` that it can only be built as root. Its
docstring names the rule it breaks; ``CAUGHT_BY`` is the check id that must catch it and
``COLLATERAL`` the other checks allowed to fail with it. ``python -m mutants MODULE
READY_FILE`` serves one (see ``__main__``).
"""
