"""The task repositories under src/repo_env/tasks/ are data (their tests are the agent's
visible tests, run in the sandbox), not this project's tests."""

collect_ignore_glob = ["src/*"]
