"""The tasks under src/harbor_env/tasks/ and src/harbor_env/container_tasks/, and the published
tasks copied under tests/fixtures/, are data (their tests/ are each task's verifier, run in the
sandbox or the task's container by the environment; their environment/ files are the agent's
starting workspace), not this project's tests."""

collect_ignore_glob = ["src/*", "tests/fixtures/*"]
