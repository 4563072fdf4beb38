"""The tasks under src/harbor_env/tasks/ are data (their tests/ are each task's verifier, run in
the sandbox by the environment; their environment/ files are the agent's starting workspace), not
this project's tests."""

collect_ignore_glob = ["src/*"]
