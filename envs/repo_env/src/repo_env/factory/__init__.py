"""The repository-task factory: real packages, procedurally planted bugs, each validated by the
package's own tests; instances served by :class:`repo_env.factory.env.FactoryEnvironment`.

See ``docs/tasks-factory.md``. The pieces: :mod:`.sources` (the pinned inputs), :mod:`.mutate`
(bug synthesis), :mod:`.runner` and :mod:`.pytest_plugin` (running the tests), :mod:`.build`
(the pipeline), :mod:`.issue` (issue texts), :mod:`.instances` (reading a built set),
:mod:`.cli` (``openenv factory``).
"""
