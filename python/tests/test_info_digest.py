"""The environment's description by digest (RFC 0013): a handshake that names the digest of the
description the client holds gets no description back; any other gets it, with its digest."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from openenv_testenvs import Counter
from openenv_testkit import RawSession, running, target

import openenv
from openenv.client import infocache
from openenv.engine._engine import info_digest
from openenv.json_protocol.payloads import parse_info
from openenv.v1 import environment_pb2, environment_pb2_grpc

pytestmark = pytest.mark.anyio


async def _get_info(tgt: str) -> environment_pb2.GetInfoResponse:
    async with grpc.aio.insecure_channel(tgt) as ch:
        resp: environment_pb2.GetInfoResponse = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
            environment_pb2.GetInfoRequest(), timeout=10
        )
        return resp


async def test_a_handshake_naming_the_digest_it_holds_gets_no_description() -> None:
    async with running(Counter) as srv:
        got = await _get_info(target(srv))
        expected = "sha256:" + hashlib.sha256(got.info.SerializeToString(deterministic=True)).hexdigest()
        assert got.info_digest == expected
        async with RawSession(target(srv)) as s:
            first = await s.open()
            assert first.HasField("info") and first.info == got.info and first.info_digest == expected
        async with RawSession(target(srv)) as s:
            again = await s.open(known_info_digest=expected)
            assert not again.HasField("info") and again.info_digest == expected and again.session_id
        async with RawSession(target(srv)) as s:
            other = await s.open(known_info_digest="sha256:" + "0" * 64)  # not this server's: sent as always
            assert other.HasField("info") and other.info == got.info and other.info_digest == expected


async def test_clients_of_one_server_receive_its_description_once_and_all_use_it() -> None:
    async with running(Counter) as srv:
        async with openenv.EnvClient(srv.address) as first:
            digest = infocache.known_digest(srv.address)
            assert digest == (await _get_info(target(srv))).info_digest
            async with RawSession(target(srv)) as raw:  # what the second client is answered
                assert not (await raw.open(known_info_digest=digest)).HasField("info")
            async with openenv.EnvClient(srv.address) as second:
                assert second.info is first.info  # the kept one, not a second decode
                assert (await second.reset(seed=3)).observation["total"] == 3
                assert (await second.step({"delta": 2})).observation["total"] == 5


def test_an_answer_without_a_description_the_client_does_not_hold_is_a_clear_error() -> None:
    answer = environment_pb2.HandshakeResponse(session_id="s", info_digest="sha256:" + "1" * 64)
    with pytest.raises(openenv.EnvError, match="does not hold it"):
        infocache.info_of("grpc://nowhere:1", answer)


# What a new process (a server replica, a restart, a client of the JSON side) makes of one
# environment's description: its digest, and its proto3 JSON (GET /openenv/info's body).
_DESCRIBE = """
import json
from openenv.engine._engine import info_digest
from openenv.json_protocol.payloads import info_to_json
from openenv.runtime.session import EnvironmentRuntime
from openenv_testenvs import FormTools
info = EnvironmentRuntime(FormTools).info
print(json.dumps({"digest": info_digest(info), "json": info_to_json(info)}))
"""


def test_a_description_whose_examples_hold_maps_has_one_digest_in_every_process() -> None:
    """An example tool call of six arguments packs a Struct into an Any, and upb orders a map's
    entries differently in each process: the examples are packed canonically, so replicas and
    restarts of one environment share a digest (RFC 0013's cache holds across them), and the
    description parsed from the JSON side comes out the same, byte for byte."""
    here = str(Path(__file__).resolve().parent)
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _DESCRIBE], cwd=here, capture_output=True, text=True, check=True, timeout=120
            ).stdout
        )
        for _ in range(3)
    ]
    assert len({r["digest"] for r in runs}) == 1, [r["digest"] for r in runs]
    for r in runs:
        assert info_digest(parse_info(r["json"])) == r["digest"]
