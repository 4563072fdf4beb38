"""Text-to-SQL over shipped SQLite databases (:class:`SqlEnvironment`)."""

from sql_env.server import SqlEnvironment, questions, score

__all__ = ["SqlEnvironment", "questions", "score"]
