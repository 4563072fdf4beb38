"""pytest plugin: ``pytest --openenv-certify TARGET`` runs every check as a test item.

Registered through the ``pytest11`` entry point, so it is loaded by every pytest run in an
environment where protoenv-conformance is installed; it is inert unless
``--openenv-certify`` is given (it only adds its options and its marker). With the option,
each check of each target becomes one item named ``openenv-certify(TARGET)::CHECK_ID``,
marked ``openenv_certify``, reported by pytest itself (``-k``, ``-m``, ``--junitxml``,
``-x`` all apply). The target is started before the first of its items and stopped at the
end of the session.

    pytest --openenv-certify python:echo_env.server:EchoEnvironment -m openenv_certify
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from openenv_conformance.errors import TargetUnusable
from openenv_conformance.registry import select

if TYPE_CHECKING:
    from openenv_conformance.context import Context
    from openenv_conformance.registry import Check
    from openenv_conformance.report import CheckResult
    from openenv_conformance.targets import Target

__all__: list[str] = []

_SEEDS = pytest.StashKey[dict[str, int]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("openenv-certify", "openenv conformance suite (openenv certify)")
    g.addoption(
        "--openenv-certify",
        action="append",
        default=[],
        metavar="TARGET",
        help="certify TARGET (grpc://HOST:PORT, http://HOST:PORT, python:MODULE:FACTORY, docker:IMAGE); repeatable",
    )
    g.addoption(
        "--openenv-level", action="append", default=[], metavar="LEVEL", help="only this level of checks (repeatable)"
    )
    g.addoption(
        "--openenv-check",
        action="append",
        default=[],
        metavar="ID",
        help="only checks whose id matches this shell pattern (repeatable)",
    )
    g.addoption("--openenv-seed", type=int, default=None, help="seed of the Hypothesis searches")
    g.addoption("--openenv-max-examples", type=int, default=None, help="examples per Hypothesis search")
    g.addoption(
        "--openenv-serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra `openenv serve` argument for python: targets (repeatable)",
    )
    g.addoption(
        "--openenv-transport",
        choices=["grpc", "http", "binary"],
        default=None,
        help="transport of targets serving both (python:, docker:): grpc (default) or http",
    )
    g.addoption(
        "--openenv-require-exercised",
        action="store_true",
        default=False,
        help="a check that saw nothing of its rule (not exercised) fails instead of being skipped",
    )
    g.addoption(
        "--openenv-parity-with", default=None, metavar="URL", help="the target's other transport, for the parity check"
    )
    g.addoption(
        "--openenv-declaration",
        default=None,
        metavar="FILE",
        help="a binding's declaration (openenv-binding.json) that protocol.declaration checks the targets against",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "openenv_certify: a check of `openenv certify` (from --openenv-certify)")


class CertifyFailure(Exception):
    """A failed check, carrying its result."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__(result.reason)
        self.result = result


class _Live:
    """One target, opened at first use and closed at the end of the session.

    The suite itself is imported here, at first use: this plugin is loaded by every pytest run
    of the environment and must stay inert (and cheap) without ``--openenv-certify``."""

    def __init__(self, config: pytest.Config, spec: str) -> None:
        self.config, self.spec = config, spec
        self.ctx: Context | None = None
        self.error: str | None = None
        self._target: Target | None = None

    def context(self) -> Context | None:
        if self.ctx is None and self.error is None:
            from openenv_conformance.context import RunOptions
            from openenv_conformance.runner import open_context
            from openenv_conformance.targets import TargetOptions, open_target

            given: int | None = self.config.getoption("openenv_seed")
            seed = random.SystemRandom().randrange(2**32) if given is None else given
            opts = RunOptions(seed=seed)
            self.config.stash.setdefault(_SEEDS, {})[self.spec] = seed
            if self.config.getoption("openenv_max_examples"):
                opts.max_examples = self.config.getoption("openenv_max_examples")
            if self.config.getoption("openenv_declaration"):
                from openenv_conformance.declaration import DeclarationError, load_declaration

                try:
                    opts.declaration = load_declaration(self.config.getoption("openenv_declaration"))
                except DeclarationError as e:
                    raise pytest.UsageError(f"--openenv-declaration: {e}") from None
            t_opts = TargetOptions(
                serve_args=tuple(self.config.getoption("openenv_serve_arg")),
                transport=self.config.getoption("openenv_transport"),
                parity_with=self.config.getoption("openenv_parity_with"),
            )
            try:
                self._target = open_target(self.spec, t_opts)
                self.ctx = open_context(self._target, opts, t_opts, ready_timeout=30.0)
            except TargetUnusable as e:
                self.error = f"target unusable: {e}" + (f"\n{e.logs[-3000:]}" if e.logs else "")
                self.close()
                return None
        return self.ctx

    def close(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
            self.ctx = None
        if self._target is not None:
            self._target.stop()
            self._target = None


class CertifyTarget(pytest.Collector):
    """The checks of one target."""

    def __init__(self, *, spec: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.spec = spec
        self.live = _Live(self.config, spec)
        self.config.add_cleanup(self.live.close)

    def collect(self) -> Iterator[pytest.Item]:
        checks = select(self.config.getoption("openenv_level") or None, self.config.getoption("openenv_check") or None)
        for c in checks:
            yield CertifyItem.from_parent(self, name=c.id, check=c)


class CertifyItem(pytest.Item):
    """One check of one target."""

    def __init__(self, *, check: Check, **kw: Any) -> None:
        super().__init__(**kw)
        if not isinstance(self.parent, CertifyTarget):
            raise TypeError(f"{self.name}: a check item belongs to a CertifyTarget, not {self.parent!r}")
        self.live = self.parent.live
        self.check = check
        self.add_marker("openenv_certify")

    def runtest(self) -> None:
        from openenv_conformance.runner import run_check

        live = self.live
        ctx = live.context()
        if ctx is None:
            pytest.fail(live.error or "target unusable", pytrace=False)
        if live._target is not None and not live._target.alive():
            pytest.fail("the target is no longer running", pytrace=False)
        result = run_check(ctx, self.check, target_spec=live.spec)
        if result.status == "skip":
            pytest.skip(result.reason)
        if result.status == "not_exercised":
            if self.config.getoption("openenv_require_exercised"):
                pytest.fail(f"not exercised (--openenv-require-exercised): {result.reason}", pytrace=False)
            pytest.skip(f"not exercised: {result.reason}")
        if result.status in ("fail", "error"):
            raise CertifyFailure(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CertifyFailure):
            r = excinfo.value.result
            parts = [f"{r.id} ({r.rule}): {r.reason}"]
            if r.example:
                parts += ["minimal failing example:", r.example]
            parts += [f"reproduce: {r.reproduce}"]
            return "\n".join(parts)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"openenv certify {self.live.spec} {self.check.id}"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    for spec in config.getoption("openenv_certify"):
        col = CertifyTarget.from_parent(session, name=f"openenv-certify({spec})", spec=spec)
        items.extend(col.collect())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for spec, seed in config.stash.get(_SEEDS, {}).items():
        terminalreporter.write_line(f"openenv certify {spec}: seed {seed} (reproduce with --openenv-seed {seed})")
