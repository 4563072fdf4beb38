"""The binary WebSocket transport (RFC 0011): ``/v1/session``, one ``SessionRequest`` /
``SessionResponse`` per binary message, subprotocol ``openenv.v1+proto``.

Every test runs against both listeners that serve it, which must behave identically: the HTTP
listener (uvicorn) and the transport's own (picows, ``Host(binary_port=0)``, no HTTP side).
Every test talks to a real ``openenv.Host`` over 127.0.0.1 (port 0), with ``EnvClient`` (the
:class:`~openenv.client.BinaryWsConnection`) or a raw ``websockets`` client writing protobuf
bytes itself; dropped connections go through a loopback TCP proxy the test resets. No timed
assertions: every wait is bounded by ``WAIT`` only so that a hang fails instead of blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openenv_testenvs import Counter, Sleeper
from tcp_proxy import TcpProxy

import openenv
from openenv.client import BinaryWsConnection
from openenv.security import TokenSet
from openenv.v1 import environment_pb2 as pb
from openenv.v1 import error_pb2
from openenv.values import to_value

pytestmark = pytest.mark.anyio

WAIT = 30.0
TOKEN = "binary-transport-token"
SUB = "openenv.v1+proto"


LISTENER = "http"  # which listener serves /v1/session in the running test (set by the fixture)


@pytest.fixture(autouse=True, params=["http", "picows"])
def listener(request: pytest.FixtureRequest) -> str:
    """Every test of this module once per listener of the binary transport."""
    global LISTENER
    LISTENER = request.param
    return LISTENER


@contextlib.asynccontextmanager
async def hosted(factory: Any = Counter, **kwargs: Any) -> AsyncIterator[openenv.Host]:
    if LISTENER == "picows":
        kwargs.setdefault("binary_port", 0)
        kwargs.setdefault("http_port", None)
    else:
        kwargs.setdefault("http_port", 0)
    host = openenv.Host(factory, "127.0.0.1", 0, **kwargs)
    await asyncio.wait_for(host.start(), WAIT)
    try:
        yield host
    finally:
        await asyncio.wait_for(host.stop(1.0), WAIT)


def port_of(host: openenv.Host) -> int:
    """The port of the listener serving /v1/session in this test."""
    return int(host.binary.port if LISTENER == "picows" else host.http.port)


def url_of(host: openenv.Host, port: int | None = None) -> str:
    return f"ws://127.0.0.1:{port or port_of(host)}/v1/session"


async def raw(url: str, **kw: Any) -> Any:
    from websockets.asyncio.client import connect

    kw.setdefault("subprotocols", [SUB])
    return await asyncio.wait_for(connect(url, proxy=None, **kw), WAIT)


async def ask(ws: Any, req: pb.SessionRequest | bytes | str) -> pb.SessionResponse:
    await ws.send(req.SerializeToString() if isinstance(req, pb.SessionRequest) else req)
    return await recv(ws)


async def recv(ws: Any) -> pb.SessionResponse:
    data = await asyncio.wait_for(ws.recv(), WAIT)
    assert isinstance(data, bytes), "the server answers with binary messages only"
    return pb.SessionResponse.FromString(data)


def hello(rid: int = 1, **kw: Any) -> pb.SessionRequest:
    return pb.SessionRequest(request_id=rid, handshake=pb.HandshakeRequest(protocol_version="1.0", **kw))


def step(rid: int, delta: int) -> pb.SessionRequest:
    req = pb.SessionRequest(request_id=rid)
    req.step.action.json.CopyFrom(to_value({"delta": delta}))
    return req


async def closed_code(ws: Any) -> int:
    """The close code the server ended ``ws`` with (reading whatever comes first)."""
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), WAIT)
    assert ws.close_code is not None
    return int(ws.close_code)


async def test_a_session_runs_over_the_binary_transport_chosen_by_its_url() -> None:
    async with hosted() as host, openenv.EnvClient(url_of(host)) as env:
        conn = env.connection
        assert isinstance(conn, BinaryWsConnection)
        assert conn.session_id and env.info.name
        r = await env.reset(seed=5)
        assert r.observation["total"] == 5
        r = await env.step({"delta": 2})
        assert r.observation["total"] == 7 and r.reward == 2.0 and r.step_count == 1
        state = await env.state()
        assert state.step_count == 1 and state.state["total"] == 7
    # http:// with the path names the same transport
    assert isinstance(openenv.client.connect_url("http://h:1/v1/session"), BinaryWsConnection)
    assert not isinstance(openenv.client.connect_url("http://h:1"), BinaryWsConnection)


async def test_the_sync_client_and_a_vectorised_session_work_over_it() -> None:
    async with hosted() as host:
        url = url_of(host)

        def sync_episode() -> float:
            with openenv.EnvClient(url).sync() as env:
                env.reset()
                return sum(env.step({"delta": d}).reward or 0.0 for d in (1, 2, 3))

        assert await asyncio.to_thread(sync_episode) == 6.0
        async with openenv.VectorEnvClient(url, 4) as venv:
            out = await venv.reset_batch(seeds=[1, 2, 3, 4])
            assert [o["total"] for o in out.observations] == [1, 2, 3, 4]
            out = await venv.step_batch([{"delta": 10}] * 4)
            assert [o["total"] for o in out.observations] == [11, 12, 13, 14]


async def test_an_upgrade_without_the_subprotocol_is_refused_naming_it() -> None:
    from websockets.exceptions import InvalidStatus

    async with hosted() as host:
        with pytest.raises(InvalidStatus) as e:
            await raw(url_of(host), subprotocols=["openenv"])
        assert e.value.response.status_code == 400
        assert SUB in bytes(e.value.response.body).decode()
        assert host.manager.opened_total == 0
        ws = await raw(url_of(host))  # offered: selected
        assert ws.subprotocol == SUB
        await ws.close()


async def test_tokens_are_required_at_the_upgrade_header_or_subprotocol() -> None:
    async with hosted(tokens=TokenSet([TOKEN])) as host:
        url = url_of(host)
        with pytest.raises(openenv.Unauthenticated, match="401"):
            async with openenv.EnvClient(url, token="", connect_timeout=WAIT):
                pass
        with pytest.raises(openenv.Unauthenticated, match="not accepted"):
            async with openenv.EnvClient(url, token="wrong", connect_timeout=WAIT):
                pass
        async with openenv.EnvClient(url, token=TOKEN) as env:  # Authorization: Bearer
            assert (await env.reset()).observation["total"] == 0
        # Browsers cannot set headers: the token as an offered subprotocol, beside the transport's.
        ws = await raw(url, subprotocols=[SUB, f"bearer.{TOKEN}"])
        assert ws.subprotocol == SUB
        assert (await ask(ws, hello())).WhichOneof("kind") == "handshake"
        await ws.close()


async def test_a_foreign_origin_is_refused() -> None:
    from websockets.exceptions import InvalidStatus

    async with hosted() as host:
        with pytest.raises(InvalidStatus) as e:
            await raw(url_of(host), origin="http://evil.example")
        assert e.value.response.status_code == 403
        assert host.manager.opened_total == 0


async def test_undecodable_bytes_and_text_are_answered_in_band_and_the_session_goes_on() -> None:
    async with hosted() as host:
        ws = await raw(url_of(host))
        assert (await ask(ws, hello())).WhichOneof("kind") == "handshake"
        bad = await ask(ws, b"\x08\x07\xff\xff\xff")  # request id 7, then garbage
        assert bad.request_id == 7 and bad.error.code == error_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert not bad.error.fatal and "undecodable" in bad.error.message
        text = await ask(ws, "not a protobuf message")
        assert text.request_id == 0 and text.error.code == error_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert not text.error.fatal and "binary message" in text.error.message
        assert (await ask(ws, pb.SessionRequest(request_id=8, reset=pb.ResetRequest()))).HasField("reset")
        ok = await ask(ws, step(9, 3))
        assert ok.request_id == 9 and ok.step.time_step.observation.json.struct_value.fields["total"].number_value == 3
        closed = await ask(ws, pb.SessionRequest(request_id=10, close=pb.CloseRequest()))
        assert closed.HasField("close")
        assert await closed_code(ws) == 1000


async def ended_silently(ws: Any) -> int:
    """The close code of ``ws``, which the server ends without sending any message."""
    from websockets.exceptions import ConnectionClosed

    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(ws.recv(), WAIT)
    assert ws.close_code is not None
    return int(ws.close_code)


async def test_a_message_over_the_limit_closes_1009_and_the_server_serves_on() -> None:
    async with hosted(max_message_bytes=64 * 1024) as host:
        ws = await raw(url_of(host), max_size=None)
        assert (await ask(ws, hello())).WhichOneof("kind") == "handshake"
        big = pb.SessionRequest(request_id=2)
        big.step.action.json.CopyFrom(to_value({"delta": 1, "pad": "x" * 100_000}))
        await ws.send(big.SerializeToString())
        assert await closed_code(ws) == 1009
        async with openenv.EnvClient(url_of(host)) as env:  # the server is still serving
            assert env.connection is not None and env.connection.max_message_bytes == 64 * 1024
            assert (await env.reset()).observation["total"] == 0
            with pytest.raises(openenv.ResourceExhausted):  # the client refuses to send it at all
                await env.step({"delta": 1, "pad": "x" * 100_000})


async def test_a_silent_connection_is_ended_at_the_handshake_deadline_with_a_readable_reason() -> None:
    async with hosted(handshake_timeout_s=0.3) as host:
        ws = await raw(url_of(host))  # sends nothing: the server ends the stream, answering nothing
        assert await ended_silently(ws) == 4000 + error_pb2.ERROR_CODE_DEADLINE_EXCEEDED
        assert ws.close_reason and "handshake" in ws.close_reason


async def test_a_session_ended_by_the_server_reaches_the_client_with_its_reason() -> None:
    async with hosted(idle_timeout_s=0.5) as host, openenv.EnvClient(url_of(host)) as env:
        ended: list[openenv.EnvError] = []
        assert env.connection is not None
        env.connection.on_end(ended.append)
        await env.reset()
        await asyncio.wait_for(_until(lambda: bool(ended)), WAIT)  # the idle reaper ends it
        assert isinstance(ended[0], openenv.DeadlineExceeded) and "idle" in ended[0].message
        with pytest.raises(openenv.DeadlineExceeded, match="idle"):
            await env.step({"delta": 1})


async def test_a_dropped_connection_is_resumed_and_no_step_is_lost_or_repeated() -> None:
    async with hosted() as host, TcpProxy(port_of(host)) as proxy:
        async with openenv.EnvClient(url_of(host, proxy.port)) as env:
            conn = env.connection
            assert isinstance(conn, BinaryWsConnection) and conn.resume_token
            await env.reset()
            assert (await env.step({"delta": 1})).observation["total"] == 1
            assert proxy.drop() >= 1  # the TCP connection is reset under the session
            results = await asyncio.gather(*(env.step({"delta": d}) for d in (2, 3, 4)))
            assert [r.observation["total"] for r in results] == [3, 6, 10]
            assert conn.resumes >= 1
            assert (await env.state()).step_count == 4


async def test_resuming_on_another_connection_ends_the_first_with_aborted() -> None:
    async with hosted() as host:
        first = await raw(url_of(host))
        shake = await ask(first, hello(resumable=True))
        token = shake.handshake.resume_token
        assert token
        second = await raw(url_of(host))
        resumed = await ask(second, hello(resume_token=token))
        assert resumed.handshake.resumed
        assert await ended_silently(first) == 4000 + error_pb2.ERROR_CODE_ABORTED
        assert first.close_reason and "resumed" in first.close_reason
        await ask(second, pb.SessionRequest(request_id=2, reset=pb.ResetRequest()))
        await second.close()


async def test_concurrent_requests_are_pipelined_and_answered_in_order() -> None:
    async with hosted() as host, openenv.EnvClient(url_of(host)) as env:
        conn = env.connection
        assert isinstance(conn, BinaryWsConnection)
        await env.reset()
        results = await asyncio.gather(*(env.step({"delta": 1}) for _ in range(40)))
        assert [r.observation["total"] for r in results] == list(range(1, 41))
        assert conn.pipelined_messages >= 1  # requests issued while one was in flight went together
        # A client-side timeout never shifts later answers: the late answer is dropped by id.
        with pytest.raises(openenv.DeadlineExceeded):
            await env.step({"delta": 1}, timeout=1e-6)
        assert (await env.state()).state["total"] in (40, 41)
        r = await env.step({"delta": 100})
        assert r.observation["total"] in (140, 141) and r.reward == 100.0


async def test_a_raw_pipelined_message_is_answered_per_request() -> None:
    async with hosted() as host:
        ws = await raw(url_of(host))
        assert (await ask(ws, hello())).handshake.info.capabilities.pipelined_requests
        msg = pb.SessionRequest(request_id=100)
        msg.pipelined.requests.append(pb.SessionRequest(request_id=2, reset=pb.ResetRequest()))
        msg.pipelined.requests.extend(step(3 + i, 1) for i in range(5))
        answers: list[pb.SessionResponse] = []
        await ws.send(msg.SerializeToString())
        while sum(len(a.pipelined.responses) or 1 for a in answers) < 6:
            answers.append(await recv(ws))
        flat = [x for a in answers for x in (a.pipelined.responses or [a])]
        assert [x.request_id for x in flat] == [2, 3, 4, 5, 6, 7]
        assert flat[-1].step.time_step.step_count == 5
        await ws.close()


async def test_many_concurrent_sessions() -> None:
    async with hosted() as host:
        url = url_of(host)

        async def episode(i: int) -> int:
            async with openenv.EnvClient(url) as env:
                await env.reset(seed=i)
                for _ in range(5):
                    r = await env.step({"delta": 1})
                return int(r.observation["total"])

        totals = await asyncio.gather(*(episode(i) for i in range(64)))
        assert totals == [i + 5 for i in range(64)]
        await asyncio.wait_for(_until(lambda: host.manager.active == 0), WAIT)


async def _until(pred: Any) -> None:
    while not pred():
        await asyncio.sleep(0.02)


async def test_an_empty_message_half_closes_and_what_was_sent_is_still_answered() -> None:
    async with hosted() as host:
        ws = await raw(url_of(host))
        await ws.send(hello().SerializeToString())
        await ws.send(pb.SessionRequest(request_id=2, reset=pb.ResetRequest()).SerializeToString())
        for i in range(3):
            await ws.send(step(3 + i, 1).SerializeToString())
        await ws.send(b"")  # no more requests
        kinds = [(await recv(ws)).WhichOneof("kind") for _ in range(5)]
        assert kinds == ["handshake", "reset", "step", "step", "step"]
        assert await closed_code(ws) == 1000


async def test_fragmented_messages_are_reassembled_and_their_total_is_bounded() -> None:
    async with hosted(max_message_bytes=64 * 1024) as host:
        ws = await raw(url_of(host), max_size=None)
        data = hello().SerializeToString()
        await ws.send([data[:3], data[3:7], data[7:]])  # one message in three frames
        assert (await recv(ws)).WhichOneof("kind") == "handshake"
        await ws.send(["not ", "protobuf"])  # a fragmented text message: answered in band
        assert (await recv(ws)).error.code == error_pb2.ERROR_CODE_INVALID_ARGUMENT
        big = step(2, 1)
        big.step.action.json.CopyFrom(to_value({"delta": 1, "pad": "x" * 100_000}))
        raw_big = big.SerializeToString()
        chunks = [raw_big[i : i + 16 * 1024] for i in range(0, len(raw_big), 16 * 1024)]  # each under the limit
        await ws.send(chunks)
        assert await closed_code(ws) == 1009
        async with openenv.EnvClient(url_of(host)) as env:  # the server serves on
            assert (await env.reset()).observation["total"] == 0


async def test_an_answer_over_the_clients_limit_is_resource_exhausted() -> None:
    async with hosted() as host:
        with pytest.raises(openenv.ResourceExhausted):  # the handshake's answer (the env's info) is larger
            async with openenv.EnvClient(url_of(host), max_message_bytes=64, connect_timeout=WAIT) as env:
                await env.reset()


async def test_wss_with_the_servers_certificate(tmp_path: Any) -> None:
    from security_kit import make_pki

    from openenv.security import TlsConfig

    pki = make_pki(tmp_path)
    async with hosted(tls=TlsConfig(str(pki.server_cert), str(pki.server_key)), tokens=TokenSet([TOKEN])) as host:
        url = f"wss://localhost:{port_of(host)}/v1/session"
        if LISTENER == "picows":
            assert host.binary_url is not None and host.binary_url.startswith("wss://")
        async with openenv.EnvClient(url, token=TOKEN, ca_file=str(pki.ca)) as env:
            assert (await env.reset(seed=4)).observation["total"] == 4
        with pytest.raises(openenv.Unavailable):  # a CA that did not sign the server's certificate
            async with openenv.EnvClient(url, token=TOKEN, ca_file=str(pki.other_ca), connect_timeout=5):
                pass


async def test_the_client_falls_back_to_websockets_when_picows_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import openenv.client.binary as binary

    assert binary.BACKEND == "picows"  # the http extra installs it
    monkeypatch.setattr(binary, "picows", None)
    async with hosted() as host, TcpProxy(port_of(host)) as proxy:
        async with openenv.EnvClient(url_of(host, proxy.port)) as env:
            conn = env.connection
            assert isinstance(conn, BinaryWsConnection)
            assert type(conn._channel).__name__ == "WebsocketsChannel"  # the websockets library
            await env.reset()
            assert (await env.step({"delta": 2})).observation["total"] == 2
            assert proxy.drop() >= 1
            assert (await env.step({"delta": 3})).observation["total"] == 5  # resumed


async def test_the_own_listener_refuses_other_paths_and_plain_http_and_serves_on() -> None:
    if LISTENER != "picows":
        pytest.skip("the HTTP listener serves other routes")
    from websockets.exceptions import InvalidStatus

    async with hosted() as host:
        assert host.http is None and host.binary_url == url_of(host)
        assert any("/v1/session" in line for line in host.describe())
        with pytest.raises(InvalidStatus) as e:
            await raw(f"ws://127.0.0.1:{port_of(host)}/ws")
        assert e.value.response.status_code == 404
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(host))
        writer.write(b"GET /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # no upgrade
        head = await asyncio.wait_for(reader.read(1024), WAIT)
        assert head.startswith(b"HTTP/1.1 4")
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(host))
        writer.write(b"\x16\x03\x01garbage\r\n\r\n")  # not HTTP at all
        await asyncio.wait_for(reader.read(1024), WAIT)
        writer.close()
        async with openenv.EnvClient(url_of(host)) as env:
            assert (await env.reset()).observation["total"] == 0


async def test_the_side_calls_are_served_beside_the_transport() -> None:
    import httpx

    async with hosted(tokens=TokenSet([TOKEN])) as host:
        base = f"http://127.0.0.1:{port_of(host)}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=base, timeout=WAIT, trust_env=False) as http:
            assert (await http.get("/health")).status_code == 200  # open, without a token
            assert (await http.get("/openenv/info")).status_code == 401
            info = await http.get("/openenv/info", headers=auth)
            assert info.status_code == 200 and info.json()["name"]
            load = await http.get("/load", headers=auth)
            assert load.status_code == 200 and load.json()["max_sessions"] >= 1


class _Held(Sleeper):
    """Sleeper's steps, with an event of its own: released when the test says so."""

    barrier = threading.Barrier(1)
    release = threading.Event()


async def test_a_client_sending_faster_than_its_session_runs_is_held_back_by_tcp_not_buffered() -> None:
    """While a step runs, the client keeps sending 256 KiB requests and reads nothing: the
    server stops reading its socket once a bounded queue is full (binary_listener.INBOX_HIGH_*),
    so TCP holds the client back instead of the server's memory filling with requests. Before,
    the picows listener read on: the client had 96 MiB accepted within seconds."""
    cap = 96 * 1024 * 1024
    _Held.release.clear()
    try:
        async with hosted(_Held) as host:
            ws = await raw(url_of(host), max_size=None)
            assert (await ask(ws, hello())).WhichOneof("kind") == "handshake"
            reset = await ask(ws, pb.SessionRequest(request_id=2, reset=pb.ResetRequest()))
            assert reset.WhichOneof("kind") == "reset"
            await ws.send(step(3, 1).SerializeToString())  # held in the environment until released
            pad = pb.SessionRequest(request_id=4)
            pad.step.action.json.CopyFrom(to_value({"pad": "x" * (256 * 1024)}))
            data, sent = pad.SerializeToString(), 0
            with contextlib.suppress(TimeoutError):
                while sent < cap:  # until a send has waited 5 s for the socket: held back
                    await asyncio.wait_for(ws.send(data), 5.0)
                    sent += len(data)
            assert sent < cap, f"{sent / 2**20:.0f} MiB accepted while the session could not take any"
            _Held.release.set()
            ws.transport.abort()
    finally:
        _Held.release.set()
