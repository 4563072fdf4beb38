"""The healthy workspace-grading environment (mutants/gradinglib.py's ``Scripts``): its grading
tool takes no work but grades the session's workspace, by running what the agent left there
with nothing the agent controls configuring the run. Not a mutant: it passes the ``grading``
level (test_grading_level.py), and ``grading_workspace_runs_git`` breaks one of its defences."""

from mutants.gradinglib import LEVELS, Scripts

Env = Scripts
CAUGHT_BY = None
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]
