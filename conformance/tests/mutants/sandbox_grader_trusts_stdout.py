"""Rule broken: grading cannot be forged (RFC 0010, grading). ``submit`` counts a hidden case
as passed for every line ``PASS`` the graded run printed (up to the number of cases), as a
grader that trusts the test runner's output would. Deterministic: it depends on the output
only."""

import openenv
from coding_env.server import CodingEnvironment, Submission
from mutants.sandboxlib import LEVELS

CAUGHT_BY = "sandbox.grader_forgery"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(CodingEnvironment):
    @openenv.tool(
        timeout_s=60.0, annotations={"openenv/sandbox": {"language": "python", "argument": "code", "grades": True}}
    )
    def submit(self, code: str) -> dict:
        """Grade a solution on the hidden tests; this ends the episode.

        Args:
            code: Python source defining the function the problem names.
        """
        self._check(code)
        task = self.problem
        with self.new_sandbox() as grader:
            r = self._exec(grader.call_function, code, task.entry_point, [c.args for c in task.hidden])
        claimed = sum(1 for line in r.stdout.splitlines() if line.strip() == "PASS")
        passed = min(len(task.hidden), max(sum(task.grade(task.hidden, r.cases)), claimed))
        self.submission = Submission(code, passed, len(task.hidden), r.time_s, r.load_error, False)
        return {"passed": passed, "total": len(task.hidden), "load_error": r.load_error, "timed_out": r.timed_out}
