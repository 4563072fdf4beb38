"""Rule broken: nothing a graded run sees reaches the agent but its score (RFC 0010,
grading). ``submit`` also returns the graded run's stdout and stderr: what the code printed
while it was handed the hidden cases' arguments. Deterministic: every submission's output is
returned."""

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
        passed = sum(task.grade(task.hidden, r.cases))
        self.submission = Submission(code, passed, len(task.hidden), r.time_s, r.load_error, False)
        return {
            "passed": passed,
            "total": len(task.hidden),
            "load_error": r.load_error,
            "timed_out": r.timed_out,
            "stdout": r.stdout,
            "stderr": r.stderr,
        }
