"""Rule broken: a verdict counts only when its verifier ran to completion, on a channel the
graded code cannot write (RFC 0015, docs/protocol.md §7.1). ``submit`` runs a test runner in the
sandbox that imports the submission and writes ``logs/verifier/reward.json``, then takes
whatever reward file the workspace holds, however the runner ended (issue 46's harbor_env
finding): code that writes the file and exits at import earns 1.0. Deterministic: the forged
file is read whenever it is there."""

from mutants.gradinglib import LEVELS, Quiz, put_solution, read_reward_file, verifier_program

CAUGHT_BY = "grading.verdict_forgery"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Quiz):
    def grade(self, code: str) -> tuple[float, int]:
        cases = [[x, self.expected(x)] for x in self.order()]
        try:
            put_solution(self.sandbox, code)
            self.sandbox.run(verifier_program(cases))  # the defect: how it ended is not looked at
            reward = read_reward_file(self.sandbox)
        finally:
            self.sandbox.clear()
        return (1.0 if reward >= 1.0 else 0.0), 0
