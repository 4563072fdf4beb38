"""``openenv certify --declaration FILE`` (the check ``protocol.declaration``): a binding's
declaration against what a server of that binding advertises and does.

One healthy server (the ``base`` mutant: the Python runtime, every feature on) is certified with
the Python binding's own declaration (passes, each advertised feature probed), and with
declarations that lie one way each: another protocol version, a feature missing, a transport
missing (each fails, naming it). A server as an older binding's might be (``mutants/old_binding``:
protocol 1.1, later features advertised, a GetLoad that fails) fails the probe of what it
advertises but does not do. The judgement itself (:func:`compare`) is shown on descriptions:
features ahead of the declared version, declared ones not advertised. The declaration file's
format errors are usage errors naming the field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conformance_testlib import ROOT, mutant_target

from openenv.protocol import PROTOCOL_VERSION
from openenv.v1 import environment_pb2 as pb
from openenv_conformance.cli import certify as certify_cli
from openenv_conformance.context import RunOptions
from openenv_conformance.declaration import DeclarationError, compare, load_declaration, parse_declaration
from openenv_conformance.runner import certify

PYTHON = ROOT / "python" / "openenv-binding.json"
#: A binding at 1.1, as the TypeScript one was (gRPC only, no TLS): the judgement is shown on it
#: whatever the bindings' own declarations say today.
AT_1_1 = {
    "binding": "typescript",
    "language": "TypeScript",
    "package": "@openenv/sdk",
    "path": "typescript/",
    "protocol_version": "1.1",
    "features": ["core", "vectorised_sessions", "hardened_listeners", "snapshots", "strict_contract"],
    "transports": {"client": ["grpc"], "server": ["grpc"]},
    "tls": {"client": False, "server": False, "mutual": False},
}


def _python() -> dict[str, Any]:
    return json.loads(PYTHON.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    with mutant_target("base") as target:
        yield target


def _run(target: Any, decl: dict[str, Any]) -> Any:
    report = certify(
        target,
        checks=["protocol.declaration"],
        seed=1,
        run_options=RunOptions(declaration=parse_declaration(decl, "test declaration")),
    )
    assert report.unusable is None, report.unusable
    return report.result("protocol.declaration")


def test_the_python_declaration_holds_and_lies_are_caught(server: Any) -> None:
    ok = _run(server, _python())
    assert ok.status == "pass", ok.reason
    for probed in ("server_load: GetLoad answered", "pipelined_messages: a pipelined message answered"):
        assert probed in ok.note, ok.note
    assert "TLS is not verified" in ok.note

    older = _run(server, dict(_python(), protocol_version="1.2"))
    assert older.status == "fail" and f"speaks protocol {PROTOCOL_VERSION}" in older.reason, older.reason
    assert "says 1.2" in older.reason

    fewer = _run(server, dict(_python(), features=[f for f in _python()["features"] if f != "server_load"]))
    assert fewer.status == "fail", fewer.reason
    assert "advertises server_load (Capabilities.load_reporting)" in fewer.reason, fewer.reason

    no_grpc = _run(server, dict(_python(), transports={"client": ["grpc"], "server": ["openenv_json"]}))
    assert no_grpc.status == "fail" and "certified over grpc" in no_grpc.reason, no_grpc.reason


def test_a_feature_advertised_but_not_done_fails_its_probe() -> None:
    """The old binding's server says 1.1, advertises load_reporting and fails GetLoad."""
    with mutant_target("old_binding") as old:
        r = _run(old, dict(_python(), protocol_version="1.1"))
    assert r.status == "fail", (r.status, r.reason)
    assert "load_reporting is set but GetLoad failed" in r.reason, r.reason


def test_the_judgement_of_a_declaration_by_a_description() -> None:
    info = pb.EnvironmentInfo(protocol_version="1.1")
    caps = info.capabilities
    caps.max_num_envs, caps.snapshots, caps.max_sessions = 8, True, 8
    caps.handshake_timeout.seconds = 10
    ts = parse_declaration(AT_1_1, "ts.json")
    judged = compare(info, _replaced(ts, features=[*ts.features, "tasks"]), "grpc")
    assert judged.problems == []
    assert judged.advertised == ["hardened_listeners", "snapshots", "vectorised_sessions"]
    assert judged.ahead == ["hardened_listeners", "snapshots"], "1.2 features at 1.1: a warning"
    assert judged.silent == ["tasks"], "declared, not advertised: not verified, not failed"
    caps.resume_grace.nanos = 1  # any non-zero grace advertises resume
    assert compare(info, ts, "binary").problems == [
        "certified over binary, a transport the declaration of typescript (ts.json) does not list for its server",
        "the server advertises resume (Capabilities.resume_grace) but the declaration of typescript (ts.json) "
        "does not list it",
    ]


def _replaced(decl: Any, **change: Any) -> Any:
    return dataclasses.replace(decl, **{k: frozenset(v) for k, v in change.items()})


def test_without_a_declaration_the_check_skips_saying_how_to_give_one(server: Any) -> None:
    report = certify(server, checks=["protocol.declaration"], seed=1)
    r = report.result("protocol.declaration")
    assert r.status == "skip" and "--declaration FILE" in r.reason


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"protocol_version": "2.0"}, "protocol_version '2.0' is not"),
        ({"features": ["core", "teleport"]}, "unknown features ['teleport']"),
        ({"features": ["tasks"]}, "implements the feature 'core'"),
        ({"transports": {"server": ["carrier_pigeon"]}}, "transports.server: unknown ['carrier_pigeon']"),
        ({"tls": {"client": "yes"}}, "tls must be"),
        ({"binding": None, "protocol_version": None}, "protocol_version None"),
    ],
)
def test_a_malformed_declaration_names_what_is_wrong(change: dict[str, Any], message: str) -> None:
    with pytest.raises(DeclarationError) as e:
        parse_declaration(dict(_python(), **change), "x.json")
    assert message in str(e.value) and str(e.value).startswith("x.json: ")


def test_the_cli_refuses_an_unreadable_declaration_as_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "binding.json"
    bad.write_text("{not json")
    r = CliRunner().invoke(certify_cli, ["grpc://127.0.0.1:1", "--declaration", str(bad)])
    assert r.exit_code == 2 and "--declaration" in r.output and "not JSON" in r.output, r.output
    r = CliRunner().invoke(certify_cli, ["grpc://127.0.0.1:1", "--declaration", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "cannot be read" in r.output, r.output


def test_every_binding_declaration_parses() -> None:
    decls = {p.parent.name: load_declaration(p) for p in sorted(ROOT.glob("*/openenv-binding.json"))}
    assert {"python", "typescript"} <= set(decls)
    with pytest.raises(DeclarationError, match="expected a JSON object"):
        parse_declaration([], "x.json")
