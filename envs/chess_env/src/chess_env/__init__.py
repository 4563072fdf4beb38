"""Chess against Stockfish (:class:`ChessEnvironment`) or agent against agent (:class:`ChessDuelEnvironment`)."""

from chess_env.server import ChessDuelEnvironment, ChessEnvironment, engine_path

__all__ = ["ChessDuelEnvironment", "ChessEnvironment", "engine_path"]
