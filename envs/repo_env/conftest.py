"""The task repositories under src/repo_env/tasks/ are data (their tests are the agent's
visible tests, run in the sandbox), not this project's tests; so is the factory tests'
package under tests/factory_fixture/ (its tests are the ones the factory runs)."""

collect_ignore_glob = ["src/*", "tests/factory_fixture/*"]
