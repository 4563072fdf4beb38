"""``/web`` over plain HTTP: the playground's files come from the package with a strict
content policy, on loopback by default, and can be turned off."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from bridge_kit import served

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openenv_testenvs import Counter

pytestmark = pytest.mark.anyio


async def test_the_playground_files_are_served_from_the_package() -> None:
    async with served(Counter) as host, httpx.AsyncClient(base_url=host.http_url, timeout=60) as http:
        assert host.web  # loopback: on by default
        redirect = await http.get("/web")
        assert redirect.status_code == 307 and redirect.headers["location"] == "web/"
        page = await http.get("/web/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert '<script src="app.js"' in page.text
        assert "://" not in page.text  # no CDN: every asset is relative, the page works offline
        for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css"), ("favicon.svg", "image/svg")):
            r = await http.get(f"/web/{name}")
            assert r.status_code == 200 and r.headers["content-type"].startswith(ctype) and r.content
        assert (await http.get("/web/../server.py")).status_code == 404
        assert (await http.get("/web/nope.js")).status_code == 404
        assert (await http.post("/web/", json={})).status_code == 405
        assert (await http.post("/web/")).status_code == 415  # the guard's rule comes first (RFC 0003)


async def test_the_playground_can_be_turned_off() -> None:
    async with served(Counter, web=False) as host, httpx.AsyncClient(base_url=host.http_url, timeout=60) as http:
        r = await http.get("/web/")
        assert r.status_code == 404 and "--web" in r.json()["detail"]


def test_the_playground_is_off_by_default_beyond_loopback() -> None:
    import openenv

    # Beyond loopback a listener needs a token or an explicit allow_anonymous (RFC 0003).
    assert not openenv.Host(Counter, "0.0.0.0", 0, http_port=0, allow_anonymous=True).web
    assert openenv.Host(Counter, "0.0.0.0", 0, http_port=0, http_host="127.0.0.1", allow_anonymous=True).web
    assert openenv.Host(Counter, "::1", 0, http_port=0).web
