"""Running a certification: open the target, run the selected checks, build the report."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib.metadata
import os
import random
import shlex
import time
import traceback
from collections.abc import Iterable
from typing import Any

import grpc
from google.protobuf import json_format

from openenv_conformance.context import Context, RunOptions, _example_of
from openenv_conformance.errors import (
    CheckFailed,
    CheckNotExercised,
    CheckSkipped,
    CheckWarning,
    TargetUnusable,
    Violation,
)
from openenv_conformance.registry import LEVELS, Check, select
from openenv_conformance.report import CheckResult, Report
from openenv_conformance.targets import Target, TargetOptions, open_target
from openenv_conformance.transport import (
    FEATURE_REASONS,
    FRAMES,
    PROTOCOL_VERSION,
    NoAnswer,
    Transport,
    open_transport,
    transport_kind,
)

__all__ = ["SUITE_PROTOCOL_VERSION", "SUITE_VERSION", "Progress", "certify", "open_context", "run_check"]

try:
    SUITE_VERSION = importlib.metadata.version("protoenv-conformance")
except importlib.metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    SUITE_VERSION = "0.0.0"
#: The protocol version the suite certifies against.
SUITE_PROTOCOL_VERSION = PROTOCOL_VERSION


class Progress:
    """Receives a run's events (the terminal UI implements it; the default ignores them)."""

    def run_started(self, report: Report, checks: list[Check]) -> None:
        """The target answers; ``checks`` are about to run."""

    def check_started(self, check: Check) -> None:
        """``check`` starts."""

    def check_finished(self, result: CheckResult) -> None:
        """A check ended with ``result``."""

    def run_finished(self, report: Report) -> None:
        """The run is over (also after an unusable target)."""

    def waiting(self, target: str, seconds: float) -> None:
        """The run waits (up to ``seconds``) for ``target`` to start and answer."""


def _wait_ready(wire: Transport, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            return wire.get_info(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        except grpc.aio.AioRpcError as e:
            last = f"{e.code().name}: {e.details()}"
            if e.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                # The server is up and has decided: waiting will not change its answer.
                raise TargetUnusable(
                    f"GetInfo was refused ({last}): give the target's bearer token "
                    "(openenv certify --token TOKEN, or $OPENENV_TOKEN)"
                ) from None
        except NoAnswer as e:
            last = str(e)
        except Violation as e:
            raise TargetUnusable(f"the target does not describe itself: {e}") from None
        if time.monotonic() >= deadline:
            what = "GetInfo" if wire.kind == "grpc" else "GET /openenv/info (or /metadata)"
            raise TargetUnusable(f"{what} did not succeed within {timeout:g} s ({last})")
        time.sleep(0.2)


def _wait_serving(wire: Transport, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = wire.health("", timeout=2.0)
        if status == "SERVING" or status.startswith("<UNIMPLEMENTED"):
            return
        time.sleep(0.1)


def _peer_url(tgt: Target, kind: str, t_opts: TargetOptions) -> str | None:
    """The target's transport other than ``kind``, for the parity check."""
    if t_opts.parity_with:
        try:
            other = transport_kind(t_opts.parity_with)
        except ValueError as e:
            raise TargetUnusable(f"--parity-with: {e}") from None
        if other == kind:
            raise TargetUnusable(
                f"--parity-with {t_opts.parity_with}: the target is already certified over {kind}; "
                "give the URL of its other transport"
            )
        return t_opts.parity_with
    return next((u for k, u in sorted(tgt.transports().items()) if k != kind), None)


def target_token(tgt: Target, options: RunOptions) -> str | None:
    """The bearer token sent to ``tgt``: the run's, else the target's own (a docker: target's
    generated one), else ``$OPENENV_TOKEN``."""
    return options.token or getattr(tgt, "token", None) or os.environ.get("OPENENV_TOKEN") or None


def open_context(
    tgt: Target, options: RunOptions, target_options: TargetOptions | None = None, *, ready_timeout: float = 60.0
) -> Context:
    """The context of a run against an open target: its transport (``tgt.url``) once the
    target describes itself and is healthy, and its peer for the parity check. Raises
    :class:`TargetUnusable`; the context owns the transports (``ctx.close()``)."""
    t_opts = target_options or TargetOptions()
    try:
        wire = open_transport(tgt.url, timeout=options.timeout, token=target_token(tgt, options))
    except ValueError as e:
        raise TargetUnusable(str(e)) from None
    try:
        info = _wait_ready(wire, ready_timeout)
        _wait_serving(wire, 10.0)
        peer = _peer_url(tgt, wire.kind, t_opts)
    except BaseException:
        wire.close()
        raise
    return Context(wire, info, options, tgt, peer_url=peer)


def _unavailable(ctx: Context, check: Check) -> str | None:
    """Why ``check`` cannot run over the context's transport (None when it can)."""
    missing = sorted(check.requires - ctx.features)
    if not missing:
        return None
    return check.why or FEATURE_REASONS.get(missing[0], f"needs the transport feature {missing[0]!r}")


def run_check(ctx: Context, check: Check, *, target_spec: str = "", extra_args: str = "") -> CheckResult:
    """Run one check against an open context."""
    result = CheckResult(check.id, check.level, check.title, check.rule, "pass", seed=ctx.options.seed)
    why_not = _unavailable(ctx, check)
    if why_not is not None:
        result.status, result.reason = "skip", why_not
        return result
    ctx.check = check
    ctx.examples_run = 0
    t0 = time.monotonic()
    try:
        note = check.fn(ctx)
        result.note = note or ""
    except CheckSkipped as e:
        result.status, result.reason = "skip", str(e)
    except CheckNotExercised as e:
        result.status, result.reason = "not_exercised", str(e)
    except CheckWarning as e:
        result.status, result.reason = "warn", str(e)
    except CheckFailed as e:
        result.status, result.reason, result.example = "fail", e.reason, e.example
        result.cause = e.cause or ""
    except Violation as e:
        result.status, result.reason, result.example = "fail", str(e), _example_of(e)
        result.cause = e.cause or ""
    except Exception as e:  # noqa: BLE001 - a crash of the check is reported, never fatal to the run
        result.status = "error"
        result.reason = f"{type(e).__name__}: {e}"
        result.example = "".join(traceback.format_exception(e)[-6:])
    finally:
        try:
            ctx.cleanup()
        except Exception:  # noqa: BLE001 - cleanup is best effort
            pass
        ctx.check = None
    result.duration_s = round(time.monotonic() - t0, 3)
    result.examples = ctx.examples_run or None
    if result.status in ("fail", "error"):
        result.reproduce = (
            f"openenv certify {shlex.quote(target_spec)} --seed {ctx.options.seed} --check {check.id}{extra_args}"
        )
    return result


def certify(
    target: str | Target,
    *,
    levels: Iterable[str] | None = None,
    checks: Iterable[str] | None = None,
    seed: int | None = None,
    max_examples: int | None = None,
    timeout: float = 10.0,
    target_options: TargetOptions | None = None,
    run_options: RunOptions | None = None,
    progress: Progress | None = None,
    require_transport: str | None = None,
    require_exercised: bool = False,
) -> Report:
    """Certify ``target`` (a spec such as ``python:echo_env.server:EchoEnvironment``,
    ``grpc://127.0.0.1:50051``, ``http://127.0.0.1:8000`` or ``docker:IMAGE``, or an open
    :class:`Target`). ``target_options.transport`` picks the transport of a target that
    serves both (``grpc`` or ``http``); the other one, when there is one, is compared by
    the parity check.

    ``require_transport`` (``grpc`` or ``http``): a run over another transport, or one where
    some checks could not be expressed over it (a subset), is not certified (the verdict,
    :attr:`Report.verdict`, names the transport and the coverage either way).
    ``require_exercised``: a check that applied but saw nothing of its rule (``not_exercised``)
    fails the run (by default it certifies, and the verdict counts it).

    ``levels`` and ``checks`` (shell patterns over check ids) select what runs; ``seed``
    makes the run reproducible (a random one is chosen and recorded otherwise). Returns the
    :class:`Report`; ``report.exit_code`` is 0 (certified), 1 (a check failed) or 2 (the
    target was unusable). Raises ValueError for an unknown level or check pattern.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:  # called from async code: the suite drives its own loop, so run it in a thread
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(
                certify,
                target,
                levels=levels,
                checks=checks,
                seed=seed,
                max_examples=max_examples,
                timeout=timeout,
                target_options=target_options,
                run_options=run_options,
                progress=progress,
                require_transport=require_transport,
                require_exercised=require_exercised,
            ).result()
    selected = select(levels, checks)
    opts = dataclasses.replace(run_options or RunOptions(), timeout=timeout)
    if timeout > opts.slot_free_bound:
        # A run that lets an answer take longer than the slot bound lets a dropped session's slot
        # take as long: freeing it runs the environment's close, an answer's worth of work (a
        # browser closing its page behind a queue of other sessions' calls).
        opts = dataclasses.replace(opts, slot_free_bound=timeout)
    if seed is not None:
        opts.seed = seed
    elif opts.seed is None:
        opts.seed = random.SystemRandom().randrange(2**32)
    if max_examples is not None:
        opts.max_examples = max_examples
    progress = progress or Progress()
    spec = target if isinstance(target, str) else (target.spec or target.url)
    report = Report(
        target=spec,
        suite_version=SUITE_VERSION,
        suite_protocol_version=SUITE_PROTOCOL_VERSION,
        seed=opts.seed,
        max_examples=opts.max_examples,
        levels=sorted({c.level for c in selected}, key=LEVELS.index),
        required_transport=require_transport or "",
        require_exercised=require_exercised,
    )
    if any(c.level == "sandbox" for c in selected):
        report.options = {
            "sandbox_memory_bound": opts.sandbox_memory_bound,
            "sandbox_disk_bound": opts.sandbox_disk_bound,
            "sandbox_files_bound": opts.sandbox_files_bound,
            "sandbox_timeout": opts.sandbox_timeout,
            "sandbox_secrets": list(opts.sandbox_secrets),
        }
    if any(c.level == "grading" for c in selected):
        report.options = {
            **(report.options or {}),
            "grading_probes": opts.grading_probes,
            "grading_timeout": opts.grading_timeout,
        }
    t_start = time.monotonic()
    t_opts = target_options or TargetOptions()
    owned = isinstance(target, str)
    tgt: Target | None = None
    ctx: Context | None = None
    try:
        ready_timeout = t_opts.ready_timeout if owned else min(t_opts.ready_timeout, 15.0)
        progress.waiting(spec, ready_timeout)
        tgt = open_target(target, t_opts) if isinstance(target, str) else target
        if not owned and t_opts.transport:
            tgt.use(t_opts.transport)
        report.target_url = tgt.url
        report.image_digest = str(getattr(tgt, "image_digest", "") or "")
        report.image_id = str(getattr(tgt, "image_id", "") or "")
        ctx = open_context(tgt, opts, t_opts, ready_timeout=ready_timeout)
        info = ctx.info
        report.transport = ctx.transport
        report.parity_url = ctx.peer_url or ""
        report.protocol_version = info.protocol_version
        report.environment = {"name": info.name, "version": info.version, "description": info.description}
        report.capabilities = json_format.MessageToDict(
            info.capabilities, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        report.declared_nondeterministic = not info.capabilities.deterministic
        progress.run_started(report, selected)
        extra = f" --max-examples {opts.max_examples}" if max_examples is not None else ""
        if t_opts.transport:
            extra += f" --transport {t_opts.transport}"
        if t_opts.parity_with:
            extra += f" --parity-with {shlex.quote(t_opts.parity_with)}"
        for check in selected:
            progress.check_started(check)
            if not tgt.alive():
                result = CheckResult(
                    check.id,
                    check.level,
                    check.title,
                    check.rule,
                    "error",
                    reason="the target is no longer running",
                    seed=opts.seed,
                    cause="target_exited",
                )
            else:
                if check.requires - ctx.features - {FRAMES}:
                    # A rule of the contract this transport cannot express: a subset. (Checks of
                    # OpenEnv's HTTP protocol itself are not part of a gRPC certification.)
                    report.transport_skipped.append(check.id)
                result = run_check(ctx, check, target_spec=spec, extra_args=extra)
                if not tgt.alive():
                    result.status = "fail" if result.status in ("pass", "skip", "not_exercised") else result.status
                    result.reason = ("the target exited during this check; " + result.reason).strip("; ")
                    result.cause = "target_exited"
            report.results.append(result)
            progress.check_finished(result)
    except TargetUnusable as e:
        report.unusable = str(e)
        report.logs = e.logs or None
    finally:
        if ctx is not None:
            ctx.close()
        if tgt is not None and owned:
            tgt.stop()
        if tgt is not None and report.logs is None and (report.unusable is not None or not report.certified):
            report.logs = tgt.logs() or None
        report.duration_s = round(time.monotonic() - t_start, 2)
    progress.run_finished(report)
    return report
