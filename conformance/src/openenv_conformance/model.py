"""The session state machine of docs/protocol.md §3, as a model the checks compare the
target against: what ``episode_id``, ``step_count`` and the episode status must be after
each answer, and which answers the error table allows."""

from __future__ import annotations

import re

from openenv.v1 import environment_pb2 as pb
from openenv_conformance.errors import Violation
from openenv_conformance.spec import EnvSpec
from openenv_conformance.strategies import CALL_TOOL
from openenv_conformance.transport import StreamEnd, code_name, describe, expect_ok

__all__ = ["HEX_ID", "EpisodeModel"]

#: A server-generated episode id: a uuid4 in hex.
HEX_ID = re.compile(r"[0-9a-f]{32}")
_ENDED = ("TERMINATED", "TRUNCATED", "ABORTED")


def status_name(status: int) -> str:
    return (
        pb.EpisodeStatus.Name(status).removeprefix("EPISODE_STATUS_")
        if status in pb.EpisodeStatus.values()
        else f"status {status}"
    )


class EpisodeModel:
    """Expected episode state of one session; ``on_*`` check an answer and advance."""

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.episode_id = ""
        self.step_count = 0
        self.status = "NOT_STARTED"
        self.past_ids: set[str] = set()
        # Step errors allowed while an episode runs: the environment may reject an action
        # (INVALID_ARGUMENT), a tool-call action may name no tool (NOT_FOUND) and an
        # environment may raise (INTERNAL); none is counted and none changes anything.
        self.running_errors = {"INVALID_ARGUMENT", "INTERNAL"}
        if spec.action.message_type == CALL_TOOL:
            self.running_errors.add("NOT_FOUND")

    @property
    def ended(self) -> bool:
        return self.status in _ENDED

    def _enter(self, ts: pb.TimeStep) -> None:
        self.status = "TERMINATED" if ts.terminated else "TRUNCATED" if ts.truncated else "RUNNING"

    def on_reset(self, resp: pb.SessionResponse | StreamEnd, requested_id: str = "") -> pb.TimeStep:
        ts = expect_ok(resp, "reset", "reset").time_step
        if ts.step_count != 0:
            raise Violation(f"reset answered step_count {ts.step_count}, expected 0", cause="step_count")
        if requested_id:
            if ts.episode_id != requested_id:
                raise Violation(
                    f"reset(episode_id={requested_id!r}) answered episode_id {ts.episode_id!r}", cause="episode_id"
                )
        else:
            if not HEX_ID.fullmatch(ts.episode_id):
                raise Violation(
                    f"reset without an episode_id answered {ts.episode_id!r}, expected a fresh uuid4 "
                    "in hex (32 lowercase hex digits)",
                    cause="episode_id",
                )
            if ts.episode_id == self.episode_id or ts.episode_id in self.past_ids:
                raise Violation(
                    f"reset reused episode_id {ts.episode_id!r}: a new episode needs a new id", cause="episode_id"
                )
        if self.episode_id:
            self.past_ids.add(self.episode_id)
        self.episode_id = ts.episode_id
        self.step_count = 0
        self._enter(ts)
        return ts

    def on_step(self, resp: pb.SessionResponse | StreamEnd, what: str = "step") -> pb.TimeStep | None:
        """Check a step's answer; the time step when accepted, None when refused."""
        if isinstance(resp, StreamEnd) or resp.WhichOneof("kind") not in ("step", "error"):
            raise Violation(f"{what}: expected a step or error answer, got {describe(resp)}")
        kind = resp.WhichOneof("kind")
        if kind == "error" and resp.error.fatal:
            raise Violation(f"{what}: {describe(resp)}; a refused step must not end the session", cause="fatal_refusal")
        if self.status == "RUNNING":
            if kind == "error":
                name = code_name(resp.error.code)
                if name not in self.running_errors:
                    raise Violation(
                        f"{what} in a running episode: {describe(resp)}; the error table allows "
                        f"{', '.join(sorted(self.running_errors))} here",
                        cause="state_fails" if name == "INTERNAL" else "refusal_code",
                    )
                return None
            ts = resp.step.time_step
            if ts.step_count != self.step_count + 1:
                raise Violation(
                    f"{what}: accepted step answered step_count {ts.step_count}, expected "
                    f"{self.step_count + 1} (it was {self.step_count})",
                    cause="step_count",
                )
            if ts.episode_id != self.episode_id:
                raise Violation(
                    f"{what}: time step carries episode_id {ts.episode_id!r}, the episode is {self.episode_id!r}",
                    cause="episode_id",
                )
            limit = self.spec.max_episode_steps
            if limit is not None and ts.step_count >= limit and not (ts.terminated or ts.truncated):
                raise Violation(
                    f"{what}: step {ts.step_count} reached max_episode_steps {limit} without "
                    "truncated (or terminated) set",
                    cause="episode_status",
                )
            self.step_count = ts.step_count
            self._enter(ts)
            return ts
        # NOT_STARTED or ended
        auto = self.spec.caps.auto_reset
        if kind == "step":
            if not auto:
                where = (
                    "before any reset" if self.status == "NOT_STARTED" else f"after the episode ended ({self.status})"
                )
                raise Violation(
                    f"{what} {where} was accepted (step_count {resp.step.time_step.step_count}); "
                    "expected FAILED_PRECONDITION",
                    cause="step_after_end" if self.status != "NOT_STARTED" else "episode_status",
                )
            ts = resp.step.time_step
            if ts.step_count != 0 or not ts.episode_id or ts.episode_id == self.episode_id:
                raise Violation(
                    f"{what}: an auto-reset step must answer the reset's time step (step_count 0, a new "
                    f"episode_id), got step_count {ts.step_count}, episode_id {ts.episode_id!r}"
                )
            if self.episode_id:
                self.past_ids.add(self.episode_id)
            self.episode_id, self.step_count = ts.episode_id, 0
            self._enter(ts)
            return ts
        name = code_name(resp.error.code)
        allowed = {"FAILED_PRECONDITION", "INVALID_ARGUMENT"}
        if self.spec.action.message_type == CALL_TOOL:
            allowed.add("NOT_FOUND")
        if auto and self.status != "NOT_STARTED":
            allowed.discard("FAILED_PRECONDITION")
        if name not in allowed:
            where = "before any reset" if self.status == "NOT_STARTED" else f"after the episode ended ({self.status})"
            raise Violation(
                f"{what} {where}: {describe(resp)}; expected "
                + ("an auto-reset" if auto and self.status != "NOT_STARTED" else "FAILED_PRECONDITION"),
                cause="refusal_code",
            )
        return None

    def on_state(self, resp: pb.SessionResponse | StreamEnd, what: str = "state") -> pb.StateResponse:
        try:
            st = expect_ok(resp, "state", what)
        except Violation as e:
            raise Violation(str(e), cause="state_fails") from None
        got = (st.episode_id, st.step_count, status_name(st.status))
        want = (self.episode_id, self.step_count, self.status)
        if got != want:
            cause = "step_count" if got[1] != want[1] else "episode_id" if got[0] != want[0] else "episode_status"
            raise Violation(
                f"{what} reports episode_id={got[0]!r}, step_count={got[1]}, status={got[2]}; "
                f"expected episode_id={want[0]!r}, step_count={want[1]}, status={want[2]}",
                cause=cause,
            )
        return st
