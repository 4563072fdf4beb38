"""Rule broken: a verdict counts only when its verifier ran to completion (RFC 0015,
docs/protocol.md §7.1). The verifier is a test script in the agent's workspace, as Harbor's
are: it runs the ``solution.py`` the task names, then writes its verdict to
``logs/verifier/reward.json``, and the grader takes that file however the script ended. A
``solution.py`` that writes the file and kills the script earns 1.0 (issue 46's harbor_env
finding: code the tests execute writes the reward and kills the tests' interpreter).
Deterministic: the script is killed before it writes, every time."""

from mutants.gradinglib import LEVELS, Scripts, read_reward_file

CAUGHT_BY = "grading.verdict_forgery"
COLLATERAL: frozenset[str] = frozenset()
__all__ = ["CAUGHT_BY", "COLLATERAL", "LEVELS", "Env"]


class Env(Scripts):
    def grade_workspace(self) -> float:
        script = (
            "mkdir -p logs/verifier\n"
            "out=$(python3 -I solution.py 2>/dev/null)\n"
            f'if [ "$out" = "{self.expected}" ]; then r=1.0; else r=0.0; fi\n'
            'echo "{\\"reward\\": $r}" > logs/verifier/reward.json\n'
        )
        self.sandbox.exec(["sh", "-c", script])  # the defect: how it ended is not looked at
        return 1.0 if read_reward_file(self.sandbox) >= 1.0 else 0.0
