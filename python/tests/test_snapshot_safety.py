"""A snapshot's restore cannot run code, even for a client holding the snapshot key (RFC 0006,
docs/security.md "Snapshots").

A fleet shares one ``OPENENV_SNAPSHOT_KEY``, and a key may leak; the HMAC only says who sealed
a snapshot. These tests are that client: they set the key the way a fleet does, seal their own
snapshots (HMAC-SHA256 over the message without its digest, computed here, not by the
runtime) whose pickled parts would run code on load (``os.system``, ``exec``,
``subprocess``, ``getattr`` chains, a name reached through the environment's own module), and
send them over real gRPC: each is refused with ``INVALID_ARGUMENT`` naming what it wanted, no
marker file appears, and the session and the server go on. The legitimate uses (state of the
environment's own types, forks, process isolation, rubric state) keep working.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
import hashlib
import hmac
import os
import pickle
import random
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openenv_snapshot_envs import AdmittedHosts, Entry, Hosts, Judged, Ledger, Side
from openenv_testkit import running, wait_until

import openenv
from openenv.runtime import snapshots
from openenv.v1 import environment_pb2

pytestmark = pytest.mark.anyio

KEY = "a-fleet-shares-this-key"
SPAWN_S = 60.0
"""Bound on anything that starts a worker process (never a timing assertion)."""


@pytest.fixture(autouse=True)
def _fleet_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers of these tests seal with a known key, as every replica of a fleet does."""
    monkeypatch.setenv("OPENENV_SNAPSHOT_KEY", KEY)


def _forge(snap: environment_pb2.Snapshot, **fields: Any) -> environment_pb2.Snapshot:
    """``snap`` with ``fields`` replaced, sealed with the fleet's key as the protocol defines
    the seal (HMAC-SHA256 of the deterministic serialisation without ``digest``)."""
    out = environment_pb2.Snapshot()
    out.CopyFrom(snap)
    for name, value in fields.items():
        setattr(out, name, value)
    out.ClearField("digest")
    out.digest = hmac.new(KEY.encode(), out.SerializeToString(deterministic=True), hashlib.sha256).digest()
    return out


class _Call:
    """Pickles as a call of ``fn(*args)``: what ``pickle.loads`` runs when it reads it."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.fn, self.args


def _u(text: str) -> bytes:
    data = text.encode()
    return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE


def _global_call(module: str, name: str, arg: str) -> bytes:
    """A protocol 4 pickle of ``module.name(arg)``, written opcode by opcode."""
    return b"\x80\x04" + _u(module) + _u(name) + b"\x93" + _u(arg) + b"\x85R."  # STACK_GLOBAL TUPLE1 REDUCE STOP


def _payloads(marker: Path) -> dict[str, bytes]:
    """Pickles that create ``marker`` when unpickled by ``pickle.loads``, as environment state."""
    cmd = f"touch {marker}"
    return {
        "os.system": pickle.dumps({"entries": _Call(os.system, cmd)}),
        "builtins.exec": pickle.dumps({"entries": _Call(exec, f"open({str(marker)!r}, 'w').close()")}),
        "builtins.eval": pickle.dumps({"entries": _Call(eval, f"open({str(marker)!r}, 'w').close()")}),
        "subprocess.Popen": pickle.dumps({"entries": _Call(subprocess.Popen, ["touch", str(marker)])}),
        "subprocess.getoutput": _global_call("subprocess", "getoutput", cmd),
        # getattr(__import__("os"), "system")(cmd), protocol 0
        "builtins.getattr": b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V"
        + cmd.encode()
        + b"\ntR.",
        # os.system reached through the environment's own module, which imports os
        "openenv_snapshot_envs.os.system": _global_call("openenv_snapshot_envs", "os.system", cmd),
    }


PAYLOADS = list(_payloads(Path("unused")))


async def _server_serves(address: str) -> None:
    """A new client gets a working session."""
    async with openenv.EnvClient(address, timeout=SPAWN_S, connect_timeout=SPAWN_S) as other:
        await other.reset(seed=1)
        assert (await other.step(4)).observation["balance"] == 1.0


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_a_sealed_snapshot_that_would_run_code_is_refused_and_runs_nothing(payload: str, tmp_path: Path) -> None:
    """The issue's acceptance test: with the fleet's key, a client seals environment bytes that
    ``pickle.loads`` would turn into a command. The restore is INVALID_ARGUMENT (not fatal, not
    INTERNAL) naming the global, the command never ran, the session is as it was and the
    server serves on."""
    marker = tmp_path / "pwned"
    async with running(Ledger) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=3)
        await env.step(8)
        snap = await env.snapshot()
        await env.step(4)
        later = await env.snapshot()
        # The forgery is accepted when its content is sound: the key is really known.
        accepted = await env.restore(_forge(snap, environment=later.environment))
        assert accepted.step_count == 1 and (await env.state()).state["balance"] == 3.0
        with pytest.raises(openenv.InvalidArgument) as refused:
            await env.restore(_forge(snap, environment=_payloads(marker)[payload]))
        assert not marker.exists(), "restoring the snapshot ran its code"
        assert not refused.value.fatal and "refused" in refused.value.message
        assert payload.rpartition(".")[2] in refused.value.message  # names what it wanted
        st = await env.state()
        assert st.step_count == 1 and st.state["balance"] == 3.0  # changed nothing
        assert (await env.step(4)).observation["balance"] == 4.0
        await _server_serves(srv.address)
    assert not marker.exists()


async def test_a_fork_from_a_snapshot_that_would_run_code_opens_nothing_and_runs_nothing(tmp_path: Path) -> None:
    """``fork(snapshot=...)`` restores into new sessions: the same loader refuses the forged
    bytes, no fork is left open, and the forking session goes on."""
    marker = tmp_path / "pwned"
    async with running(Ledger) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=5)
        snap = await env.snapshot()
        for payload in _payloads(marker).values():
            with pytest.raises(openenv.InvalidArgument) as refused:
                await env.fork(2, snapshot=_forge(snap, environment=payload))
            assert not refused.value.fatal
        assert not marker.exists(), "a fork ran the snapshot's code"
        assert srv.manager.active == 1  # no fork was opened (or every one was closed)
        forks = await env.fork(1, snapshot=snap)  # a sound snapshot still forks
        try:
            assert (await forks[0].step(4)).step_count == 1
        finally:
            for f in forks:
                await f.close()
        assert (await env.step(4)).step_count == 1
        await wait_until(lambda: srv.manager.active == 1, SPAWN_S, "the fork to close")


async def test_a_forged_rubric_state_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """The rubric's part of a snapshot is a pickle too, read by the same loader, and before the
    environment's part is put back: sound environment bytes with a forged rubric part leave the
    session exactly as it was."""
    marker = tmp_path / "pwned"
    async with running(Ledger) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=2)
        snap = await env.snapshot()
        await env.step(4)
        later = await env.snapshot()
        forged = _forge(snap, environment=later.environment, rubric=_payloads(marker)["builtins.exec"])
        with pytest.raises(openenv.InvalidArgument, match="rubric state"):
            await env.restore(forged)
        with pytest.raises(openenv.InvalidArgument, match="rubric state"):
            await env.fork(1, snapshot=forged)
        assert not marker.exists()
        st = await env.state()
        assert st.step_count == 1 and st.state["balance"] == 1.0
        r = await env.step(0)  # the trajectory rubric still has its one step: discounted credits
        assert r.terminated and r.metadata[openenv.rubrics.CREDITS_METADATA_KEY] == {"episode": [0.5, 1.0]}
        assert srv.manager.active == 1


async def test_a_judges_key_never_travels_in_a_snapshot_and_a_restore_cannot_redirect_it() -> None:
    """A snapshot goes to clients: the judge's API key, headers and URL (configuration,
    ``Rubric.snapshot_config``) are not in it; a forged rubric state that sets the URL (which
    would send the server's key elsewhere) is refused and changes nothing."""
    async with running(Judged) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=1)
        snap = await env.snapshot()
        for secret in (b"sk-the-servers-secret", b"the-servers-org", b"judge.invalid"):
            assert secret not in snap.SerializeToString(), secret
        nodes = snapshots.load_rubric_state(snap.rubric, Judged)
        evil = [{**nodes[0], "url": "http://attacker.invalid/steal"}]
        forged = _forge(snap, rubric=pickle.dumps(evil))
        with pytest.raises(openenv.InvalidArgument, match="configuration"):
            await env.restore(forged)
        await env.restore(snap)  # its own snapshot still restores


async def test_process_isolation_workers_refuse_a_snapshot_that_would_run_code(tmp_path: Path) -> None:
    """``--isolation process``: the environment and its rubric restore in the session's worker,
    with the same loader. Forged environment or rubric bytes are refused there, the worker
    lives on (same process id), forks open nothing, and sound snapshots still restore and fork
    into new workers."""
    marker = tmp_path / "pwned"
    payloads = _payloads(marker)
    async with running(Ledger, isolation="process") as srv:
        async with openenv.EnvClient(srv.address, timeout=SPAWN_S, connect_timeout=SPAWN_S) as env:
            worker = (await env.reset(seed=9)).observation["pid"]
            assert worker != os.getpid()
            await env.step(8)
            snap = await env.snapshot()
            for name in ("os.system", "builtins.exec", "builtins.getattr", "openenv_snapshot_envs.os.system"):
                with pytest.raises(openenv.InvalidArgument) as refused:
                    await env.restore(_forge(snap, environment=payloads[name]))
                assert not refused.value.fatal
                with pytest.raises(openenv.InvalidArgument, match="rubric state"):
                    await env.restore(_forge(snap, rubric=payloads[name]))
            with pytest.raises(openenv.InvalidArgument):
                await env.fork(1, snapshot=_forge(snap, environment=payloads["subprocess.Popen"]))
            assert not marker.exists(), "a worker ran the snapshot's code"
            r = await env.step(4)
            assert r.observation["pid"] == worker and r.step_count == 2 and r.observation["balance"] == 3.0
            again = await env.restore(snap)
            assert again.step_count == 1
            [fork] = await env.fork(1)
            try:
                f = await fork.step(4)
                assert f.observation["pid"] not in (worker, os.getpid())
                assert f.observation["balance"] == 3.0 and f.step_count == 2
            finally:
                await fork.close()
            await wait_until(lambda: srv.manager.active == 1, SPAWN_S, "the fork's slot")
        await _server_serves(srv.address)
    assert not marker.exists()


async def test_an_environment_with_its_own_dataclass_state_snapshots_restores_and_forks() -> None:
    """The default hooks take what an environment's own module defines: dataclasses (a frozen
    one too), enums, beside a Random, a Counter and Decimals. Restore replays the same
    observations, noise included; forks start alike and stay independent."""
    async with running(Ledger) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset(seed=11)
        await env.step(6)
        await env.step(-2)
        snap = await env.snapshot()
        original = [await env.step(d) for d in (3, -1, 0)]
        assert original[-1].terminated
        restored = await env.restore(snap)
        assert restored.step_count == 2 and restored.status is openenv.EpisodeStatus.RUNNING
        st = await env.state()
        assert st.state == {
            "owner": "ada",
            "opened": "2024-01-01",
            "entries": [[1, "1.5", "credit"], [2, "0.5", "debit"]],
            "balance": 1.0,
        }
        again = [await env.step(d) for d in (3, -1, 0)]
        assert [(r.observation, r.reward, r.terminated, r.metadata) for r in again] == [
            (r.observation, r.reward, r.terminated, r.metadata) for r in original
        ]
        forks = await env.fork(2, snapshot=snap)
        try:
            firsts = [await f.step(1) for f in forks]
            assert firsts[0].observation == firsts[1].observation
            await forks[0].step(40)
            assert [(await f.state()).state["balance"] for f in forks] == [11.25, 1.25]
        finally:
            for f in forks:
                await f.close()
        await wait_until(lambda: srv.manager.active == 1, SPAWN_S, "the forks to close")


async def test_state_of_a_class_the_rules_do_not_admit_needs_snapshot_globals() -> None:
    """A class from elsewhere (``ipaddress.IPv4Address``) is not loaded by default: the default
    ``snapshot`` says so at once (UNIMPLEMENTED, naming it and ``snapshot_globals``) rather than
    making a snapshot no restore would accept; naming it in ``snapshot_globals`` admits it."""
    async with running(Hosts) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await env.step("10.0.0.1")
        with pytest.raises(openenv.Unimplemented, match=r"ipaddress\.IPv4Address.*snapshot_globals"):
            await env.snapshot()
        assert (await env.step("10.0.0.2")).observation == {"seen": ["10.0.0.1", "10.0.0.2"]}
    async with running(AdmittedHosts) as srv, openenv.EnvClient(srv.address) as env:
        await env.reset()
        await env.step("10.0.0.1")
        snap = await env.snapshot()
        await env.step("10.0.0.2")
        await env.restore(snap)
        assert (await env.state()).state == {"seen": ["10.0.0.1"]}


# ------------------------------------------------------------------ the loader itself


def test_the_loader_refuses_every_global_outside_the_rules_before_importing_it(tmp_path: Path) -> None:
    """``snapshots.loads`` (the one loader of every restore path) refuses each payload with
    INVALID_ARGUMENT and runs none of them, and does not even import a module it does not
    admit."""
    marker = tmp_path / "pwned"
    for name, payload in _payloads(marker).items():
        with pytest.raises(openenv.InvalidArgument, match="refused"):
            snapshots.loads(payload, Ledger)
        assert not marker.exists(), name
    never_imported = "antigravity"  # opens a web browser when imported
    assert never_imported not in sys.modules
    with pytest.raises(openenv.InvalidArgument, match=never_imported):
        snapshots.loads(_global_call(never_imported, "geohash", "x"), Ledger)
    assert never_imported not in sys.modules
    for junk in (b"", b"\x80\x05garbage", pickle.dumps({"a": 1})[:-3], b"\x80\x05\x95" + b"\xff" * 20):
        with pytest.raises(openenv.InvalidArgument, match="cannot be loaded"):
            snapshots.loads(junk, Ledger)


def test_the_loader_takes_the_value_types_an_environment_keeps() -> None:
    """What ``dumps`` writes from standard value types, numpy and the environment's own classes,
    ``loads`` reads back equal."""
    rng = np.random.default_rng(7)
    legacy = np.random.RandomState(3)
    value = {
        "numbers": (1, 2.5, 3j, True, None, decimal.Decimal("1.25"), fractions.Fraction(1, 3)),
        "containers": [collections.OrderedDict(a=1), collections.deque([1, 2], maxlen=3), {1, 2}, frozenset({3})],
        "counts": collections.Counter("hello"),
        "lists": collections.defaultdict(list, {"a": [1]}),
        "when": (datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.UTC), datetime.timedelta(days=2)),
        "ids": uuid.UUID(int=7),
        "random": random.Random(5),
        "array": np.arange(12, dtype=np.float32).reshape(3, 4).T,
        "scalar": np.int64(3),
        "generators": (rng, legacy),
        "own": [Entry(1, decimal.Decimal(2), Side.DEBIT)],
        "path": Path("/tmp/x"),
    }
    back = snapshots.loads(snapshots.dumps(value, Ledger), Ledger)
    assert back["numbers"] == value["numbers"] and back["containers"] == value["containers"]
    assert (
        back["counts"] == value["counts"] and back["lists"] == value["lists"] and back["lists"].default_factory is list
    )
    assert back["when"] == value["when"] and back["ids"] == value["ids"] and back["own"] == value["own"]
    assert back["random"].random() == value["random"].random()
    assert np.array_equal(back["array"], value["array"]) and back["scalar"] == value["scalar"]
    assert back["generators"][0].random() == rng.random() and back["generators"][1].rand() == legacy.rand()
    assert back["path"] == value["path"]


def test_a_snapshot_cannot_change_a_class_or_import_a_module_of_an_admitted_package() -> None:
    """Naming an admitted class is not a licence to change it: with ``pickle.loads``, a BUILD on
    a class sets its attributes for the whole process (here ``Fraction.limit_denominator``
    becomes ``float``, in every session). Such a pickle is refused, for a standard class and for
    the environment's own, and both are unchanged. Nor does a snapshot import a module of an
    admitted package that is not imported yet."""
    before = (dict(vars(fractions.Fraction)), dict(vars(Entry)))
    for cls in ((b"fractions", b"Fraction"), (b"openenv_snapshot_envs", b"Entry")):
        # GLOBAL cls; BUILD (None, {"limit_denominator": float}): setattr(cls, "limit_denominator", float)
        evil = b"c%s\n%s\n(N(Vlimit_denominator\ncbuiltins\nfloat\ndtb." % cls
        with pytest.raises(openenv.InvalidArgument, match="would change it"):
            snapshots.loads(evil, Ledger)
    assert (dict(vars(fractions.Fraction)), dict(vars(Entry))) == before
    assert fractions.Fraction(1, 3).limit_denominator(10) == fractions.Fraction(1, 3)
    rules = snapshots.SnapshotPolicy((), {"antigravity"})
    with pytest.raises(snapshots.RefusedGlobal, match="not imported"):
        rules.find("antigravity", "Anything")
    assert "antigravity" not in sys.modules
