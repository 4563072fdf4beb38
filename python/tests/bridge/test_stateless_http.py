"""OpenEnv's stateless HTTP endpoints (``POST /reset``, ``POST /step``, ``GET /state``), over
real loopback sockets: OpenEnv's shapes, one environment per call (created and closed within
the request: nothing kept, nothing leaked, callers never share one), every malformed input a
clear 4xx that leaves the server serving, capacity, tokens and Origin as on every route,
tools-only environments without them, and the same endpoints behind ``openenv bridge``.
(``tools/openenv_suite.py`` runs OpenEnv's own suite against them, on demand.)"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from bridge_kit import WAIT_S, Ws, served, wait_until, ws_url
from openenv_testenvs import Counter, Scripted, ToolEnv

from openenv.http import BridgeApp, HttpServer
from openenv.security import TokenSet

pytestmark = pytest.mark.anyio

TOKEN = "tok-for-the-stateless-endpoints"


def _client(base: str, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, timeout=WAIT_S, trust_env=False, **kw)


async def test_each_call_is_a_fresh_environment_with_openenvs_shapes() -> None:
    Counter.reset_counts()
    async with served(Counter) as srv, _client(srv.http_url) as http:
        r = await http.post("/reset", json={"seed": 7, "episode_id": "ep-http"})
        assert r.status_code == 200
        body = r.json()
        assert body["observation"]["total"] == 7 and body["reward"] is None and body["done"] is False
        assert body["episode_id"] == "ep-http" and body["step_count"] == 0
        assert (await http.post("/reset", json={})).json()["observation"]["total"] == 0

        # /step: a fresh environment, reset without a seed, then the action; nothing is kept
        firsts = []
        for _ in range(2):
            r = await http.post("/step", json={"action": {"delta": 3}, "timeout_s": 30, "request_id": "r", "x": 1})
            assert r.status_code == 200, r.text
            step = r.json()
            assert step["observation"]["total"] == 3 and step["reward"] == 3.0 and step["done"] is False
            assert step["step_count"] == 1 and step["terminated"] is False and step["truncated"] is False
            firsts.append(step["episode_id"])
        assert firsts[0] != firsts[1]
        r = await http.post("/step", json={"action": {"delta": 1, "finish": "terminated"}})
        assert r.json()["done"] is True and r.json()["terminated"] is True

        # /state: a newborn session's state
        r = await http.get("/state")
        assert r.status_code == 200
        assert r.json() == {
            "episode_id": None,
            "step_count": 0,
            "total": 0,
            "history": [],
            "tag": "",
            "status": "NOT_STARTED",
        }

        # concurrent callers each get their own environment
        steps = await asyncio.gather(*(http.post("/step", json={"action": {"delta": d}}) for d in range(1, 9)))
        assert sorted(s.json()["observation"]["total"] for s in steps) == list(range(1, 9))
        assert {s.json()["step_count"] for s in steps} == {1}
        assert len({s.json()["episode_id"] for s in steps}) == 8

        # every call's environment was closed before its answer: no session outlives a request
        assert srv.manager.active == 0
        assert Counter.created == Counter.closed == 2 + 3 + 1 + 8
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert {"/reset", "/step", "/state"} <= set(paths) and "post" in paths["/step"]


async def test_malformed_requests_are_refused_clearly_and_the_server_keeps_serving() -> None:
    Scripted.reset_counts()
    async with served(Scripted) as srv, _client(srv.http_url) as http:
        # a step timeout is answered when it elapses (the environment's step ends in its own time)
        Scripted.gate.clear()
        r = await http.post("/step", json={"action": {"op": "block"}, "timeout_s": 0.05})
        assert r.status_code == 504 and r.json()["status"] == "DEADLINE_EXCEEDED"
        Scripted.gate.set()  # the blocked step ends; its session closes then
        huge = 2**64
        cases: list[tuple[str, Any, int, str | None]] = [
            ("/reset", b"not json", 422, "json_invalid"),
            ("/reset", [1, 2], 422, "model_attributes_type"),
            ("/reset", {"seed": -1}, 422, "greater_than_equal"),
            ("/reset", {"seed": "3"}, 422, "int_type"),
            ("/reset", {"seed": True}, 422, "int_type"),
            ("/reset", {"seed": huge}, 422, None),
            ("/reset", {"episode_id": "e" * 256}, 422, "string_too_long"),
            ("/reset", {"episode_id": 5}, 422, "string_type"),
            ("/step", b"", 422, "missing"),
            ("/step", {}, 422, "missing"),
            ("/step", {"action": [1]}, 422, "dict_type"),
            ("/step", {"action": {"op": "echo"}, "timeout_s": 0}, 422, "greater_than"),
            ("/step", {"action": {"op": "echo"}, "timeout_s": "soon"}, 422, "float_type"),
            ("/step", {"action": {"op": "echo"}, "timeout_s": 1e300}, 422, "less_than_equal"),
            ("/step", {"action": {"op": "echo"}, "request_id": "r" * 256}, 422, "string_too_long"),
            ("/step", {"action": {"op": "invalid"}}, 422, "value_error"),  # InvalidAction: the env's refusal
        ]
        for path, body, status, typ in cases:
            if isinstance(body, bytes):
                r = await http.post(path, content=body, headers={"content-type": "application/json"})
            else:
                r = await http.post(path, json=body)
            assert r.status_code == status, (path, body, r.text)
            detail = r.json()["detail"]
            assert isinstance(detail, list) and detail, (path, body, r.text)
            if typ is not None:
                assert detail[0]["type"] == typ, (path, body, r.text)

        r = await http.post("/step", json={"action": {"op": "raise", "message": "kaboom"}})
        assert r.status_code == 500 and r.json()["status"] == "INTERNAL" and "kaboom" in r.json()["detail"]
        r = await http.post("/step", json={"action": {"op": "big", "n": srv.http.app.max_message_bytes + 10}})
        assert r.status_code == 500 and r.json()["status"] == "RESOURCE_EXHAUSTED"
        assert "carried out" in r.json()["detail"]
        r = await http.post("/step", content=b'{"action": {}}')
        assert r.status_code == 415  # no JSON content type (the listener's CSRF rule for every POST)
        big = b'{"action": "' + b"x" * srv.http.app.max_message_bytes + b'"}'
        r = await http.post("/step", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413
        for method, path in (("GET", "/reset"), ("GET", "/step"), ("DELETE", "/state")):
            r = await http.request(method, path)
            assert r.status_code == 405 and r.headers["allow"] in ("POST", "GET"), (method, path)

        r = await http.post("/step", json={"action": {"op": "echo", "value": {"ok": [1, 2]}}})
        assert r.status_code == 200 and r.json()["observation"]["ok"] == [1, 2]
        # every environment is closed (the timed-out one once its step has ended)
        await wait_until(lambda: srv.manager.active == 0 and Scripted.created == Scripted.closed, "the closes")


async def test_capacity_tokens_and_origin_apply_as_on_every_route() -> None:
    async with served(Counter, max_sessions=1, tokens=TokenSet([TOKEN])) as srv:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with _client(srv.http_url) as http:
            assert (await http.post("/reset", json={})).status_code == 401
            assert (await http.get("/state")).status_code == 401
            assert (await http.post("/reset", json={}, headers={"Authorization": "Bearer nope"})).status_code == 401
            assert (await http.post(f"/t/{TOKEN}/reset", json={})).status_code == 200  # OpenEnv clients' base URL form
            r = await http.post(
                "/step", json={"action": {"delta": 1}}, headers={**auth, "Origin": "https://evil.example"}
            )
            assert r.status_code == 403
            async with Ws(ws_url(srv.http_url, f"access_token={TOKEN}")) as ws:  # the one slot, held
                assert (await ws.ask({"type": "reset"}))["type"] == "observation"
                r = await http.post("/step", json={"action": {"delta": 1}}, headers=auth)
                assert r.status_code == 503 and r.headers["retry-after"] == "1"
                assert r.json()["code"] == "CAPACITY_REACHED" and r.json()["max_sessions"] == 1
                assert (await ws.ask({"type": "step", "data": {"delta": 2}}))["data"]["observation"]["total"] == 2
            r = await http.post("/step", json={"action": {"delta": 1}}, headers=auth)  # the slot is free again
            assert r.status_code == 200 and r.json()["observation"]["total"] == 1


async def test_bad_seed_and_timeout_on_ws_are_errors_not_a_dropped_connection() -> None:
    async with served(Counter) as srv, Ws(ws_url(srv.http_url)) as ws:
        err = await ws.ask({"type": "reset", "data": {"seed": 2**64}})
        assert err["type"] == "error" and err["data"]["code"] == "VALIDATION_ERROR"
        err = await ws.ask({"type": "step", "data": {"delta": 1}, "timeout_s": 1e300})
        assert err["type"] == "error" and err["data"]["code"] == "VALIDATION_ERROR"
        assert (await ws.ask({"type": "reset", "data": {"seed": 2**64 - 1}}))["type"] == "observation"


async def test_tool_environments_tools_only_and_behind_the_bridge() -> None:
    from openenv.bridge import RemoteBackend

    async with served(ToolEnv, tools_only=True) as srv, _client(srv.http_url) as http:
        for method, path in (("POST", "/reset"), ("POST", "/step"), ("GET", "/state")):
            r = await http.request(method, path, json={"action": {}} if method == "POST" else None)
            assert r.status_code == 404 and "tools-only" in r.json()["detail"], path
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert not {"/reset", "/step", "/state"} & set(paths)  # OpenEnv's production mode

    from echo_env.server import EchoEnvironment

    async with served(EchoEnvironment) as srv:
        backend = await RemoteBackend.connect(srv.address)
        bridge = await HttpServer(BridgeApp(backend), "127.0.0.1", 0).start()
        try:
            for base in (srv.http_url, bridge.url):
                async with _client(base) as http:
                    call = {"type": "call_tool", "tool_name": "echo_with_length", "arguments": {"message": "hey"}}
                    r = await http.post("/step", json={"action": call})
                    assert r.status_code == 200, (base, r.text)
                    obs = r.json()["observation"]
                    assert obs["tool_name"] == "echo_with_length" and obs["error"] is None
                    assert obs["result"]["data"] == {"message": "hey", "length": 3}
                    assert r.json()["step_count"] == 1
                    untyped = {"tool_name": "echo_message", "arguments": {"message": "x"}}  # type defaults to call_tool
                    r = await http.post("/step", json={"action": untyped})
                    assert r.json()["observation"]["result"]["data"] == "x"
                    r = await http.post("/step", json={"action": {"type": "call_tool", "tool_name": "nope"}})
                    assert r.status_code == 200 and r.json()["observation"]["error"]["error_type"] == "tool_not_found"
                    r = await http.post("/step", json={"action": {"type": "list_tools"}})
                    assert [t["name"] for t in r.json()["observation"]["tools"]] == ["echo_message", "echo_with_length"]
                    r = await http.get("/state")
                    assert r.status_code == 200 and r.json()["step_count"] == 0 and r.json()["status"] == "NOT_STARTED"
                    assert (await http.post("/reset", json={"episode_id": "e"})).json()["episode_id"] == "e"
            assert srv.manager.active == 0
        finally:
            await bridge.stop()
            await backend.stop()
