"""``python -m openenv.cli``: the ``openenv`` command."""

from openenv.cli import main

main()
