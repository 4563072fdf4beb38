"""A control, not a mutant: the dataclass-action environment of ``control_dataclass_actions``
opting out of strict validation (``lenient_actions = True``, advertised in Capabilities). Lax
parsing is a documented choice: the suite sends it no coercible values nor unknown fields as
invalid actions, so it certifies."""

from mutants.control_dataclass_actions import GuessNumber

CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()


class Env(GuessNumber):
    lenient_actions = True
