"""The HTTP side under RFC 0003, over real loopback sockets: bearer tokens on every route and
both WebSocket alternatives, Origin/Host checks (cross-site WebSocket hijacking, DNS
rebinding, CSRF), bounded request heads (431/414 and the server's RSS), slowloris heads
closed by the deadline, JSON-RPC batches, TLS, and the official MCP client with a token."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest
from bridge_kit import WAIT_S, Ws, openenv_serve, served, wait_until, ws_url
from openenv_testenvs import Counter, ToolEnv
from security_kit import http_exchange, make_pki, read_all, rss_kib, status_of

import openenv
from openenv.http import HttpOptions
from openenv.http.limits import HttpLimits
from openenv.security import TlsConfig, TokenSet

pytestmark = pytest.mark.anyio

TOKEN = "tok-for-the-http-side"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSONRPC_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def _ws_status(url: str, **kw: Any) -> int:
    """The HTTP status a WebSocket upgrade is answered with (101 when it opens)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    try:
        ws = await asyncio.wait_for(connect(url, proxy=None, **kw), WAIT_S)
    except InvalidStatus as e:
        return int(e.response.status_code)
    await ws.close()
    return 101


async def test_a_token_protects_every_route_but_health_and_both_websocket_alternatives_work() -> None:
    async with served(ToolEnv, tokens=TokenSet([TOKEN])) as srv:
        base = srv.http_url
        ws = base.replace("http://", "ws://") + "/ws"
        async with httpx.AsyncClient(base_url=base, timeout=WAIT_S, trust_env=False) as http:
            assert (await http.get("/health")).status_code == 200  # probes stay open
            for path in ("/metadata", "/schema", "/openenv/info", "/"):
                r = await http.get(path)
                assert r.status_code == 401, path
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert r.json()["status"] == "UNAUTHENTICATED"
                assert (await http.get(path, headers={"Authorization": "Bearer nope"})).status_code == 401
                assert (await http.get(path, headers=AUTH)).status_code == 200
            assert (await http.post("/mcp", json=JSONRPC_LIST)).status_code == 401
            r = await http.post("/mcp", json=JSONRPC_LIST, headers=AUTH)
            assert r.status_code == 200 and {t["name"] for t in r.json()["result"]["tools"]} >= {"add"}
        assert await _ws_status(ws) == 401
        assert await _ws_status(base.replace("http://", "ws://") + "/mcp") == 401
        assert srv.manager.opened_total == 1  # only the authorised tools/list opened one
        with pytest.raises(openenv.Unauthenticated):
            async with openenv.EnvClient(base, token="", connect_timeout=WAIT_S):
                pass
        async with openenv.EnvClient(base, token=TOKEN) as env:  # the Authorization header
            assert (await env.call_tool("add", {"a": 1, "b": 2})).data == 3
        # Browsers cannot set headers on a WebSocket: a subprotocol or the query carry it.
        from websockets.asyncio.client import connect

        async with connect(ws, proxy=None, subprotocols=["openenv", f"bearer.{TOKEN}"]) as c:  # type: ignore[list-item]
            assert c.subprotocol == "openenv"
            await c.send('{"type": "reset", "data": {}}')
            assert '"observation"' in str(await asyncio.wait_for(c.recv(), WAIT_S))
        assert await _ws_status(ws + f"?access_token={TOKEN}") == 101
        assert await _ws_status(ws + "?access_token=wrong") == 401
        # Clients that take only a base URL (OpenEnv's stock clients append /ws, /health...):
        # the token as a path prefix.
        prefixed = f"{base}/t/{TOKEN}"
        assert await _ws_status(prefixed.replace("http://", "ws://") + "/ws") == 101
        assert await _ws_status(f"{base}/t/wrong/ws".replace("http://", "ws://")) == 401
        async with httpx.AsyncClient(timeout=WAIT_S, trust_env=False) as http:
            assert (await http.get(prefixed + "/metadata")).status_code == 200
            assert (await http.get(f"{base}/t/wrong/metadata")).status_code == 401
        async with openenv.EnvClient(prefixed, token="") as env:
            assert (await env.call_tool("add", {"a": 2, "b": 2})).data == 4


async def test_operator_routes_and_the_playground_need_the_token_and_the_playground_works_under_the_prefix() -> None:
    async with served(Counter, tokens=TokenSet([TOKEN])) as srv:
        base = srv.http_url
        async with httpx.AsyncClient(base_url=base, timeout=WAIT_S, trust_env=False) as http:
            for path in ("/metrics", "/load", "/web/", "/web/app.js"):
                assert (await http.get(path)).status_code == 401, path
                assert (await http.get(path, headers=AUTH)).status_code == 200, path
            # A browser sends no header on a page load: the /t/<token>/ prefix, kept by the
            # playground's relative redirect and relative requests.
            redirect = await http.get(f"/t/{TOKEN}/web")
            assert redirect.status_code == 307 and redirect.headers["location"] == "web/"
            page = await http.get(f"/t/{TOKEN}/web/")
            assert page.status_code == 200 and "text/html" in page.headers["content-type"]
            for rel in ("schema", "openenv/info"):  # what app.js fetches, relative to /web/
                assert (await http.get(f"/t/{TOKEN}/{rel}")).status_code == 200
        assert await _ws_status(f"{base}/t/{TOKEN}/ws".replace("http://", "ws://")) == 101


def test_a_metrics_port_beyond_loopback_needs_allow_anonymous() -> None:
    with pytest.raises(ValueError, match="metrics port"):
        openenv.Host(Counter, "0.0.0.0", 0, http_port=None, tokens=TokenSet([TOKEN]), metrics_port=0)


async def test_a_foreign_origin_or_host_is_refused_with_403_and_listed_ones_are_served() -> None:
    opts = HttpOptions(allowed_origins=("http://trainer-ui.example",), allowed_hosts=("envs.internal",))
    async with served(Counter, http_options=opts) as srv:
        port = srv.http.port
        ws = f"ws://127.0.0.1:{port}/ws"
        assert await _ws_status(ws, origin="http://evil.example") == 403  # cross-site WebSocket hijacking
        assert await _ws_status(ws, origin="http://trainer-ui.example") == 101  # listed
        assert await _ws_status(ws, origin=f"http://127.0.0.1:{port}") == 101  # the server's own origin
        assert await _ws_status(ws) == 101  # not a browser: no Origin
        # DNS rebinding: evil.example resolves to 127.0.0.1, so the page is "same-origin" with
        # itself, but its requests name evil.example in Host.
        for host in (b"evil.example", b"evil.example:%d" % port):
            for req in (
                b"GET /metadata HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host,
                b"POST /mcp HTTP/1.1\r\nHost: %s\r\nOrigin: http://%s\r\nContent-Type: application/json\r\n"
                b"Content-Length: 2\r\nConnection: close\r\n\r\n{}" % (host, host),
            ):
                assert status_of(await asyncio.to_thread(http_exchange, port, req)) == 403
        listed = b"GET /metadata HTTP/1.1\r\nHost: envs.internal:%d\r\nConnection: close\r\n\r\n" % port
        assert status_of(await asyncio.to_thread(http_exchange, port, listed)) == 200
        assert srv.manager.opened_total == 3  # the three WebSockets that opened, nothing else


async def test_a_cross_site_text_plain_post_cannot_run_a_tool() -> None:
    async with served(ToolEnv) as srv:
        call = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}'
        async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
            for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
                r = await http.post("/mcp", content=call, headers={"Content-Type": ctype})
                assert r.status_code == 415, ctype
            assert srv.manager.opened_total == 0  # no session, so no tool ran
            r = await http.post("/mcp", content=call, headers={"Content-Type": "application/json"})
            assert r.json()["result"]["structuredContent"] == {"result": 3}


async def test_json_rpc_batches_cannot_take_every_slot() -> None:
    async with served(Counter) as srv:
        async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
            creates = [{"jsonrpc": "2.0", "id": i, "method": "openenv/session/create"} for i in range(1100)]
            for batch in (creates, creates[:2], [JSONRPC_LIST] * 33):
                r = await http.post("/mcp", json=batch)
                assert r.status_code == 200 and r.json()["error"]["code"] == -32600
            assert srv.manager.opened_total == 0
            r = await http.post("/mcp", json=[creates[0], {"jsonrpc": "2.0", "id": 9, "method": "ping"}])
            assert [x.get("result") is not None for x in r.json()] == [True, True]
            assert srv.manager.active == 1


def test_oversized_request_heads_get_431_or_414_and_the_server_memory_stays_bounded(tmp_path: Any) -> None:
    with openenv_serve("bridge_envs:BenchCounter", tmp_path) as (_grpc, http_url, proc):
        port = int(http_url.rsplit(":", 1)[1])
        assert status_of(http_exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) == 200
        before = rss_kib(proc.pid)
        header = b"X-Pad: " + b"a" * 1000 + b"\r\n"
        statuses = []
        for _ in range(4):  # 4 x 8 MB of small headers; the 32 MB cost +450 MB
            head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header * 8000
            statuses.append(status_of(http_exchange(port, head)))
        assert statuses == [431] * 4
        many = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"  # small but many
        assert status_of(http_exchange(port, many)) == 431
        url = b"GET /" + b"a" * 32 * 1024 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"  # a 32 KB URL
        assert status_of(http_exchange(port, url)) == 414
        grown = rss_kib(proc.pid) - before
        assert grown < 30 * 1024, f"RSS grew by {grown} KiB"
        assert status_of(http_exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) == 200
        assert proc.poll() is None


async def test_half_sent_request_heads_are_closed_by_the_head_deadline() -> None:
    opts = HttpOptions(limits=HttpLimits(head_timeout_s=1.0))
    async with served(Counter, http_options=opts) as srv:
        port = srv.http.port

        def slowloris(n: int) -> list[bytes]:
            socks = []
            for i in range(n):
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                if i % 2:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: b\r\n")  # never finished
                socks.append(s)
            out = [read_all(s) for s in socks]  # each recv waits up to 30 s for the server to close
            for s in socks:
                s.close()
            return out

        answers = await asyncio.to_thread(slowloris, 100)
        assert all(status_of(a) == 408 for a in answers[1::2]), "half-sent heads are answered 408"
        assert all(a == b"" for a in answers[0::2]), "silent connections are closed"
        async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
            assert (await http.get("/health")).status_code == 200


async def test_https_and_wss_with_generated_certificates(tmp_path: Any) -> None:
    pki = make_pki(tmp_path)
    tls = TlsConfig(str(pki.server_cert), str(pki.server_key))
    async with served(Counter, tls=tls, tokens=TokenSet([TOKEN])) as srv:
        assert srv.http_url.startswith("https://") and srv.address.startswith("grpcs://")
        url = f"https://localhost:{srv.http.port}"
        async with openenv.EnvClient(url, token=TOKEN, ca_file=str(pki.ca)) as env:
            assert (await env.reset(seed=4)).observation["total"] == 4
        with pytest.raises(openenv.Unavailable):  # a CA that did not sign the server's certificate
            async with openenv.EnvClient(url, token=TOKEN, ca_file=str(pki.other_ca), connect_timeout=5):
                pass
        plain = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        assert status_of(await asyncio.to_thread(http_exchange, srv.http.port, plain)) == 0  # TLS only


async def test_the_official_mcp_client_works_with_a_token() -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with served(ToolEnv, tokens=TokenSet([TOKEN])) as srv:
        async with (
            create_mcp_http_client(headers=AUTH) as http,
            streamable_http_client(srv.http_url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            r = await mcp.call_tool("add", {"a": 2, "b": 5})
            assert not r.is_error and r.structured_content == {"result": 7}


async def test_the_mcp_sdks_own_dns_rebinding_protection_is_configured_behind_the_observing_layer() -> None:
    """The guard checks Host and Origin first; the SDK's own protection is the second line,
    configured from the listener's policy also when the app is wrapped (metrics, playground):
    a setting made on the wrapper reached the wrapper only."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with served(ToolEnv) as srv:
        app = srv.http.app
        assert type(app).__name__ == "ObservedApp" and app.app.browser is not None
        async with streamable_http_client(srv.http_url + "/mcp") as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
        settings = app.app._mcp_http.manager.security_settings
        assert settings is not None and settings.enable_dns_rebinding_protection
        assert "127.0.0.1:*" in settings.allowed_hosts


async def test_wss_with_mutual_tls(tmp_path: Any) -> None:
    pki = make_pki(tmp_path)
    tls = TlsConfig(str(pki.server_cert), str(pki.server_key), str(pki.ca))
    async with served(Counter, tls=tls) as srv:
        url = f"https://localhost:{srv.http.port}"
        mtls = (str(pki.client_cert), str(pki.client_key))
        async with openenv.EnvClient(url, ca_file=str(pki.ca), client_cert=mtls) as env:
            assert (await env.reset(seed=6)).observation["total"] == 6
        with pytest.raises(openenv.Unavailable):  # no client certificate
            async with openenv.EnvClient(url, ca_file=str(pki.ca), connect_timeout=5):
                pass


@pytest.mark.parametrize("engine", ["grpcio", "grpclib"])
async def test_one_client_address_holds_at_most_its_share_of_sessions_on_both_listeners(engine: str) -> None:
    """``max_sessions_per_client``: sessions are counted per client address over gRPC, /ws and
    /mcp together; beyond the cap a handshake is refused RESOURCE_EXHAUSTED naming the cap,
    another address (127.0.0.2, loopback too) is unaffected, and a closed session gives its
    slot back to its client."""
    async with served(Counter, max_sessions=64, max_sessions_per_client=3, grpc_library=engine) as srv:
        grpc_url = srv.address
        create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
        async with openenv.EnvClient(grpc_url) as first, Ws(ws_url(srv.http_url)) as second:
            await first.reset()
            await second.send({"type": "reset", "data": {}})
            assert (await second.recv())["type"] == "observation"
            async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False) as http:
                third = (await http.post("/mcp", json=create)).json()
                assert "result" in third, third  # the client's third session
                refused = (await http.post("/mcp", json=create)).json()
                assert "per client" in refused["error"]["message"], refused
                with pytest.raises(openenv.ResourceExhausted) as e:
                    async with openenv.EnvClient(grpc_url):
                        pass
                assert "3 per client" in str(e.value)
                assert srv.manager.per_client == {"127.0.0.1": 3}
            other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
            async with httpx.AsyncClient(base_url=srv.http_url, timeout=WAIT_S, trust_env=False, transport=other) as h2:
                assert "result" in (await h2.post("/mcp", json=create)).json()  # another client: its own share
            assert srv.manager.per_client == {"127.0.0.1": 3, "127.0.0.2": 1}
        await wait_until(lambda: srv.manager.per_client["127.0.0.1"] == 1, what="two closed sessions to free")
        async with openenv.EnvClient(grpc_url) as again:  # slots come back to their client
            await again.reset()
