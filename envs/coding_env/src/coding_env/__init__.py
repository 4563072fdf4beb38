"""The coding environment: Python problems graded by hidden tests, code run in a sandbox."""

from coding_env.problems import PROBLEMS, Problem
from coding_env.sandbox import Limits, RunResult, Sandbox, SandboxUnavailable, probe
from coding_env.server import CodingEnvironment
from openenv import CallToolAction, CallToolObservation

__all__ = [
    "PROBLEMS",
    "CallToolAction",
    "CallToolObservation",
    "CodingEnvironment",
    "Limits",
    "Problem",
    "RunResult",
    "Sandbox",
    "SandboxUnavailable",
    "probe",
]
