"""The echo reference environment: server (:class:`EchoEnvironment`) and client (:class:`EchoEnv`)."""

from echo_env.client import EchoEnv
from echo_env.server import EchoEnvironment
from openenv import CallToolAction, CallToolObservation

__all__ = ["CallToolAction", "CallToolObservation", "EchoEnv", "EchoEnvironment"]
