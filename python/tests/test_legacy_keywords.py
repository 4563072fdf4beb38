"""The keyword arguments that predate the settings objects: one deprecation route (issue 55).

``Host(Env, max_sessions=8)``, ``Server(...)``, ``openenv.serve(...)`` and ``Engine(manager,
tokens=...)`` keep working for one more minor version, through one function
(:func:`openenv.settings.legacy_keywords`): each use warns ``DeprecationWarning`` naming the
keywords, the settings to give instead and the release that removes them, and then serves
exactly as the same settings given as an object. The settings form warns nothing. Every test
that serves does so over a real socket on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest
from openenv_testenvs import Counter
from openenv_testkit import get_info

import openenv
from openenv.engine import Engine
from openenv.runtime.session import EnvironmentRuntime, SessionManager
from openenv.security import TokenSet
from openenv.settings import LEGACY_REMOVAL, legacy_keywords

pytestmark = pytest.mark.anyio

WAIT = 30.0
DOCS = Path(__file__).resolve().parents[2] / "docs"


async def test_host_keywords_warn_the_removal_and_serve_as_the_settings_object() -> None:
    """A user of ``Host(..., max_sessions=3)`` learns, from the warning, what replaces it and
    when it goes; until then the server is the one the settings object makes."""
    with pytest.warns(DeprecationWarning, match=rf"Host\(max_sessions=\).*removed in openenv {LEGACY_REMOVAL}") as w:
        host = openenv.Host(Counter, "127.0.0.1", 0, max_sessions=3)
    assert w[0].filename == __file__  # attributed to the caller, not to openenv
    given = openenv.ServerSettings(limits=openenv.Limits(max_sessions=3))
    assert host.settings == given
    await asyncio.wait_for(host.start(), WAIT)
    try:
        assert host.address is not None
        info = await get_info(host.address.removeprefix("grpc://"))
        assert info.capabilities.max_sessions == 3
    finally:
        await host.stop(1.0)


async def test_the_settings_object_warns_nothing() -> None:
    """Code already on settings objects (``openenv serve``, this repository) stays quiet."""
    settings = openenv.ServerSettings(limits=openenv.Limits(max_sessions=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        host = openenv.Host(Counter, "127.0.0.1", 0, settings=settings)
        server = openenv.Server(Counter, "127.0.0.1", 0, settings=settings)
        engine = Engine(SessionManager(EnvironmentRuntime(Counter)), settings)
    assert host.settings == server.settings == engine.settings == settings


def test_server_and_engine_keywords_take_the_same_route() -> None:
    """``Server`` and ``Engine`` keywords warn the same way and mean the same settings."""
    tokens = TokenSet(["t0"])
    with pytest.warns(DeprecationWarning, match=rf"Server\(tokens=\).*{LEGACY_REMOVAL}"):
        server = openenv.Server(Counter, "127.0.0.1", 0, tokens=tokens)
    assert server.settings.security.tokens == tokens and server.engine.settings.security.tokens == tokens
    manager = SessionManager(EnvironmentRuntime(Counter))
    with pytest.warns(DeprecationWarning, match=rf"Engine\(handshake_timeout_s=, tokens=\).*{LEGACY_REMOVAL}"):
        engine = Engine(manager, handshake_timeout_s=4.0, tokens=tokens)
    assert engine.handshake_timeout_s == 4.0 and engine.refusal(None) is not None
    assert manager.runtime.info.capabilities.auth_required


def test_engine_and_http_options_are_folded_into_the_same_warning() -> None:
    """``engine=`` (``grpc_library``) goes through the one shim too, and a disagreement is an error."""
    with pytest.warns(DeprecationWarning, match=r"Host\(engine=\)") as w:
        host = openenv.Host(Counter, "127.0.0.1", 0, engine="grpcio")
    assert len(w) == 1 and host.settings.grpc_library == "grpcio"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        legacy_keywords("Host", None, {"engine": "grpcio", "grpc_library": "grpclib"})


def test_the_removal_release_is_written_in_the_docs() -> None:
    """The warning's release and docs/security.md's agree, so users can plan the change."""
    text = (DOCS / "security.md").read_text()
    assert f"removed in openenv {LEGACY_REMOVAL}" in text


def test_http_options_is_deprecated_and_means_the_settings_it_restated() -> None:
    """``HttpOptions`` restated ``HttpSettings`` as a mutable object: it warns, and an
    ``HttpServer`` given one serves the settings it stands for."""
    from openenv.http import HttpOptions, HttpServer

    with pytest.warns(
        DeprecationWarning, match=rf"HttpOptions is deprecated and is removed in openenv {LEGACY_REMOVAL}"
    ):
        opts = HttpOptions(ws_ping_interval=3.0, tokens=TokenSet(["h"]), allowed_hosts=("envs.internal",))
    server = HttpServer(None, "127.0.0.1", 0, opts)  # type: ignore[arg-type]  # never started
    assert server.settings.http == openenv.HttpSettings(ws_ping_interval=3.0)
    assert server.settings.security == openenv.SecuritySettings(tokens=["h"], allowed_hosts=("envs.internal",))
    assert server.authenticator.refusal(None) is not None
