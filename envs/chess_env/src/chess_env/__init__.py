"""Chess against Stockfish (:class:`ChessEnvironment`)."""

from chess_env.server import ChessEnvironment, engine_path

__all__ = ["ChessEnvironment", "engine_path"]
