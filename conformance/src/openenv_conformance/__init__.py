"""protoenv-conformance (import ``openenv_conformance``): certify that an environment keeps
the openenv.v1 contract.

The Python API::

    from openenv_conformance import certify

    report = certify("python:echo_env.server:EchoEnvironment", levels=["protocol"], seed=7)
    assert report.exit_code == 0, report.failed_ids()

:func:`certify` returns a :class:`Report` (``to_json``, ``to_junit``, ``to_markdown``);
:func:`all_checks` lists the checks; targets are opened by scheme
(:func:`register_target_kind` adds kinds). The command line is ``openenv certify`` and the
pytest plugin is enabled by ``pytest --openenv-certify TARGET``.
"""

from openenv_conformance.context import RunOptions
from openenv_conformance.errors import CheckFailed, CheckSkipped, TargetUnusable, Violation
from openenv_conformance.registry import LEVELS, Check, all_checks, select
from openenv_conformance.report import CheckResult, Report
from openenv_conformance.runner import SUITE_PROTOCOL_VERSION, SUITE_VERSION, Progress, certify
from openenv_conformance.targets import Target, TargetOptions, open_target, register_target_kind

__all__ = [
    "LEVELS",
    "SUITE_PROTOCOL_VERSION",
    "SUITE_VERSION",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "Progress",
    "Report",
    "RunOptions",
    "Target",
    "TargetOptions",
    "TargetUnusable",
    "Violation",
    "all_checks",
    "certify",
    "open_target",
    "register_target_kind",
    "select",
]
