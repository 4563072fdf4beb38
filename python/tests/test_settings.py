"""Settings objects (openenv.settings): validation, frozen-ness, the keyword mapping, the CLI's
options, and that a server given its settings as an object serves as one given keywords."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import click
import grpc
import pytest
from click.testing import CliRunner
from openenv_testenvs import Counter
from openenv_testkit import TESTS_DIR, get_info

import openenv
from openenv.cli import serve as serve_cli
from openenv.runtime.limits import LimitKeywords, SettingError, field_doc
from openenv.security import TlsConfig, TokenSet
from openenv.settings import HostKeywords, ServerKeywords
from openenv.v1 import environment_pb2, environment_pb2_grpc

WAIT_S = 60.0  # bound of every wait (never a timing assertion)

# ------------------------------------------------------------------ validation

BAD = [
    (openenv.Limits, "max_sessions", 0),
    (openenv.Limits, "max_sessions", 2.5),
    (openenv.Limits, "max_sessions", True),
    (openenv.Limits, "max_sessions_per_client", -1),
    (openenv.Limits, "max_message_bytes", 0),
    (openenv.Limits, "max_message_bytes", "4MiB"),
    (openenv.Limits, "idle_timeout_s", -1.0),
    (openenv.Limits, "idle_timeout_s", float("nan")),
    (openenv.Limits, "resume_grace_s", -0.5),
    (openenv.Limits, "max_num_envs", 0),
    (openenv.Limits, "handshake_timeout_s", -1),
    (openenv.Limits, "max_pipelined_requests", -1),
    (openenv.Limits, "isolation", "container"),
    (openenv.Limits, "inline_threshold_s", -1e-6),
    (openenv.Limits, "tools_only", "yes"),
    (openenv.SecuritySettings, "tokens", "one-string"),
    (openenv.SecuritySettings, "tokens", ["has space"]),
    (openenv.SecuritySettings, "tls", "cert.pem"),
    (openenv.SecuritySettings, "allow_anonymous", 1),
    (openenv.SecuritySettings, "allowed_origins", "https://a.example"),
    (openenv.SecuritySettings, "allowed_hosts", [1]),
    (openenv.HttpLimits, "max_head_bytes", 0),
    (openenv.HttpLimits, "max_headers", -3),
    (openenv.HttpLimits, "head_timeout_s", -1),
    (openenv.HttpLimits, "body_timeout_s", "60"),
    (openenv.HttpLimits, "ws_send_timeout_s", float("nan")),
    (openenv.HttpLimits, "message_timeout_s", -5),
    (openenv.HttpLimits, "unfinished_bytes", 0),
    (openenv.HttpLimits, "unfinished_bytes_per_client", "16 MiB"),
    (openenv.HttpSettings, "ws_ping_interval", -1),
    (openenv.HttpSettings, "ws_ping_timeout", "20"),
    (openenv.HttpSettings, "ws_compression", None),
    (openenv.HttpSettings, "max_message_bytes", 0),
    (openenv.HttpSettings, "max_connections", 0),
    (openenv.HttpSettings, "keepalive_timeout_s", -1),
    (openenv.HttpSettings, "limits", {"max_headers": 10}),
    (openenv.ServerSettings, "limits", {"max_sessions": 4}),
    (openenv.ServerSettings, "security", None),
    (openenv.ServerSettings, "http", None),
    (openenv.ServerSettings, "grpc_library", "quic"),
    (openenv.ServerSettings, "reflection", "no"),
    (openenv.ServerSettings, "metrics", None),
    (openenv.ServerSettings, "web", "auto"),
    (openenv.ServerSettings, "workers", 0),
    (openenv.ServerSettings, "workers", "many"),
]


@pytest.mark.parametrize(("cls", "field", "bad"), BAD, ids=[f"{c.__name__}.{f}={b!r}" for c, f, b in BAD])
def test_every_bad_value_is_refused_naming_the_field_and_the_value(cls: Any, field: str, bad: Any) -> None:
    with pytest.raises(ValueError) as e:
        cls(**{field: bad})
    assert isinstance(e.value, SettingError)
    assert (e.value.owner, e.value.field) == (cls.__name__, field)
    assert f"{cls.__name__}.{field} must be " in str(e.value)
    assert repr(bad) in str(e.value)
    with pytest.raises(ValueError, match=f"{cls.__name__}.{field} must be "):  # replace checks as well
        cls().replace(**{field: bad})


def test_every_field_is_checked_by_the_table_above() -> None:
    checked = {(c, f) for c, f, _ in BAD}
    classes = (
        openenv.Limits,
        openenv.SecuritySettings,
        openenv.HttpSettings,
        openenv.HttpLimits,
        openenv.ServerSettings,
    )
    for cls in classes:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("check") or f.metadata.get("convert"), f"{cls.__name__}.{f.name} is not checked"
            assert (cls, f.name) in checked, f"{cls.__name__}.{f.name}: no bad value tried"


def test_good_values_are_kept_and_converted() -> None:
    limits = openenv.Limits(max_sessions=8, handshake_timeout_s=None, isolation="process", idle_timeout_s=0)
    assert (limits.max_sessions, limits.handshake_timeout_s, limits.isolation) == (8, None, "process")
    security = openenv.SecuritySettings(tokens=["a", "b"], allowed_origins=["https://ui.example"])
    assert security.tokens == TokenSet(["b", "a"]) and security.allowed_origins == ("https://ui.example",)
    assert openenv.SecuritySettings(tokens=None).tokens == TokenSet()
    assert openenv.ServerSettings(security=security) == openenv.ServerSettings(security=security.replace())


def test_settings_are_frozen_and_replace_makes_a_changed_copy() -> None:
    settings = openenv.ServerSettings()
    for obj, field, value in [
        (settings, "grpc_library", "grpclib"),
        (settings.limits, "max_sessions", 4),
        (settings.security, "tokens", TokenSet(["t"])),
        (settings.http, "ws_ping_interval", 1.0),
        (settings.http.limits, "max_headers", 10),
    ]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, value)
        changed = obj.replace(**{field: value})
        assert getattr(changed, field) == value and getattr(obj, field) != value
    with pytest.raises(TypeError):
        settings.limits.replace(max_session=4)  # a typo is not a new setting


def test_the_keyword_types_name_exactly_the_settings_fields() -> None:
    # The TypedDicts type the keyword arguments of Runtime/Server/Host/serve: they may not drift
    # from the fields they map onto.
    assert set(LimitKeywords.__optional_keys__) == openenv.Limits.names()
    every = openenv.ServerSettings.names() | openenv.Limits.names() | openenv.SecuritySettings.names()
    assert set(ServerKeywords.__optional_keys__) <= every
    assert set(HostKeywords.__optional_keys__) - every == {"engine", "http_options"}


def test_the_keywords_map_onto_the_settings_in_one_place() -> None:
    base = openenv.ServerSettings(limits=openenv.Limits(max_sessions=4, idle_timeout_s=5.0))
    got = openenv.ServerSettings.of(base, {"max_sessions": 2, "tokens": ["t"], "web": False, "ws_compression": True})
    assert got.limits == openenv.Limits(max_sessions=2, idle_timeout_s=5.0)  # keywords over the object
    assert got.security.tokens == TokenSet(["t"]) and got.web is False and got.http.ws_compression
    assert openenv.ServerSettings.of(None, {}) == openenv.ServerSettings()
    with pytest.raises(TypeError, match="max_session"):
        openenv.ServerSettings.of(None, {"max_session": 2})
    with pytest.raises(ValueError, match=r"Limits\.idle_timeout_s"):
        openenv.ServerSettings.of(None, {"idle_timeout_s": -1})


def test_engine_is_grpc_library_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="grpc_library") as caught:
        host = openenv.Host(Counter, "127.0.0.1", 0, engine="grpclib")
    assert caught[0].filename == __file__  # attributed to the caller
    assert host.settings.grpc_library == "grpclib"
    assert type(host.grpc).__name__ == "GrpclibServer"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name, in the settings object, warns nothing
        settings = openenv.ServerSettings(grpc_library="grpclib")
        assert openenv.Host(Counter, "127.0.0.1", 0, settings=settings).settings.grpc_library == "grpclib"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        openenv.Host(Counter, "127.0.0.1", 0, engine="grpclib", grpc_library="grpcio")


def test_http_options_map_onto_the_http_settings() -> None:
    from openenv.http import HttpOptions

    opts = HttpOptions(ws_ping_interval=0.5, allowed_origins=("https://ui.example",), tokens=TokenSet(["http-only"]))
    host = openenv.Host(Counter, "127.0.0.1", 0, http_port=0, http_options=opts)
    assert host.settings.http == openenv.HttpSettings(ws_ping_interval=0.5)
    assert host.settings.security.allowed_origins == ("https://ui.example",)
    # As before settings: an http_options token protects the HTTP side only.
    assert not host.settings.security.tokens and host._http_security.tokens == TokenSet(["http-only"])


# ------------------------------------------------------------------ equivalence over real servers


def _capabilities(info: environment_pb2.EnvironmentInfo) -> environment_pb2.Capabilities:
    return info.capabilities


@pytest.mark.parametrize("library", ["grpcio", "grpclib"])
async def test_keywords_and_a_settings_object_serve_identically(library: str) -> None:
    keywords: dict[str, Any] = dict(
        max_sessions=6,
        max_message_bytes=2 * 1024 * 1024,
        idle_timeout_s=30.0,
        resume_grace_s=0.0,
        max_num_envs=3,
        handshake_timeout_s=4.0,
        max_pipelined_requests=16,
        tools_only=False,
        max_sessions_per_client=5,
        tokens=TokenSet(["tok"]),
    )
    settings = openenv.ServerSettings(
        limits=openenv.Limits(
            max_sessions=6,
            max_message_bytes=2 * 1024 * 1024,
            idle_timeout_s=30.0,
            resume_grace_s=0.0,
            max_num_envs=3,
            handshake_timeout_s=4.0,
            max_pipelined_requests=16,
            max_sessions_per_client=5,
        ),
        security=openenv.SecuritySettings(tokens=["tok"]),
        grpc_library=library,  # type: ignore[arg-type]
    )
    infos, http = [], []
    for kw in ({**keywords, "grpc_library": library}, {"settings": settings}):
        async with openenv.Host(Counter, "127.0.0.1", 0, http_port=0, **kw) as host:
            assert host.settings == settings
            assert host.address is not None
            async with grpc.aio.insecure_channel(host.address.removeprefix("grpc://")) as ch:
                resp = await environment_pb2_grpc.EnvironmentServiceStub(ch).GetInfo(
                    environment_pb2.GetInfoRequest(), metadata=[("authorization", "Bearer tok")], timeout=WAIT_S
                )
            infos.append(resp.info)
            o = host.http.settings
            h, sec = o.http, o.security
            http.append((o.http_message_bytes(), h.ws_ping_interval, sec.tokens, sec.tls, h.limits, h.max_connections))
    assert infos[0] == infos[1]
    caps = _capabilities(infos[0])
    assert (caps.max_sessions, caps.max_message_bytes, caps.max_num_envs, caps.max_pipelined_requests) == (
        6,
        2 * 1024 * 1024,
        3,
        16,
    )
    assert caps.auth_required and caps.handshake_timeout.ToNanoseconds() == 4 * 10**9
    assert not caps.HasField("resume_grace")
    assert http[0] == http[1] and http[0][0] == 2 * 1024 * 1024  # the HTTP side bounds messages alike


async def test_a_server_over_a_shared_manager_takes_its_runtimes_limits() -> None:
    limits = openenv.Limits(handshake_timeout_s=3.0, max_pipelined_requests=7)
    manager = openenv.runtime.SessionManager(openenv.runtime.EnvironmentRuntime(Counter, limits=limits))
    async with openenv.Server(manager, "127.0.0.1", 0) as srv:
        caps = (await get_info(srv.address.removeprefix("grpc://"))).capabilities
    assert caps.max_pipelined_requests == 7 and caps.handshake_timeout.ToNanoseconds() == 3 * 10**9
    await manager.shutdown()


# ------------------------------------------------------------------ the CLI


def _settings_of_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The settings ``openenv serve ARGS`` hands to serve() (which is replaced: nothing runs)."""
    seen: dict[str, Any] = {}
    monkeypatch.setattr(serve_cli, "serve", lambda *a, **kw: seen.update(kw))
    for var in ("OPENENV_MAX_SESSIONS", "OPENENV_ISOLATION", "OPENENV_ENGINE", "OPENENV_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    result = CliRunner().invoke(serve_cli.serve_command, ["openenv_testenvs:Counter", "--no-http", *args])
    assert result.exit_code == 0, result.output
    return seen["settings"]


def test_cli_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    # Metrics are counted only when something can scrape them (no HTTP side, no metrics port here).
    assert _settings_of_cli([], monkeypatch) == openenv.ServerSettings(metrics=False)


def test_cli_flags_build_the_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    args = [
        "--max-sessions", "9", "--idle-timeout", "12", "--resume-grace", "0", "--max-message-mb", "2",
        "--tools-only", "--ws-ping-interval", "3", "--ws-ping-timeout", "4", "--handshake-timeout", "0",
        "--isolation", "process", "--max-sessions-per-client", "2", "--inline-threshold-us", "25",
        "--engine", "grpclib", "--max-pipelined-requests", "0", "--token", "tok",
        "--allowed-origins", "https://a.example, https://b.example", "--allowed-hosts", "envs.internal",
        "--no-web", "--metrics-port", "0",
    ]  # fmt: skip
    expected = openenv.ServerSettings(
        limits=openenv.Limits(
            max_sessions=9,
            idle_timeout_s=12.0,
            resume_grace_s=0.0,
            max_message_bytes=2 * 1024 * 1024,
            tools_only=True,
            handshake_timeout_s=None,
            isolation="process",
            max_sessions_per_client=2,
            inline_threshold_s=25e-6,
            max_pipelined_requests=0,
        ),
        security=openenv.SecuritySettings(
            tokens=["tok"], allowed_origins=("https://a.example", "https://b.example"), allowed_hosts=("envs.internal",)
        ),
        http=openenv.HttpSettings(ws_ping_interval=3.0, ws_ping_timeout=4.0),
        grpc_library="grpclib",
        web=False,
        metrics=True,
    )
    assert _settings_of_cli(args, monkeypatch) == expected
    new_name = _settings_of_cli(["--grpc-library", "grpclib"], monkeypatch)
    assert new_name.grpc_library == "grpclib"


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--idle-timeout", "-1"], "--idle-timeout"),
        (["--max-sessions", "0"], "--max-sessions"),
        (["--resume-grace", "-2"], "--resume-grace"),
        (["--max-message-mb", "0"], "--max-message-mb"),
    ],
)
def test_cli_names_the_option_a_setting_refuses(args: list[str], option: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    monkeypatch.setattr(serve_cli, "serve", lambda *a, **kw: pytest.fail("served despite a bad option"))
    result = CliRunner().invoke(serve_cli.serve_command, ["openenv_testenvs:Counter", "--no-http", *args])
    assert result.exit_code == 2, result.output
    assert option in result.output and "must be" in result.output


def test_cli_help_is_the_fields_documentation() -> None:
    result = CliRunner().invoke(serve_cli.serve_command, ["--help"], terminal_width=1000)
    out = " ".join(result.output.split())
    for cls, name in [(openenv.Limits, "resume_grace_s"), (openenv.HttpSettings, "ws_ping_timeout")]:
        assert " ".join(field_doc(cls, name).replace("``", "").split()) in out
    assert "--grpc-library, --engine [grpcio|grpclib]" in out


def test_openenv_serve_applies_its_flags(tmp_path: Path) -> None:
    """A real ``openenv serve`` process: what GetInfo tells clients is what its flags said."""
    ready = tmp_path / "ready"
    cmd = [sys.executable, "-m", "openenv.cli", "serve", "openenv_testenvs:Counter", "--port", "0", "--no-http"]
    cmd += ["--max-sessions", "5", "--max-message-mb", "1", "--idle-timeout", "42", "--handshake-timeout", "7"]
    cmd += ["--max-pipelined-requests", "9", "--engine", "grpclib", "--ready-file", str(ready)]
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(TESTS_DIR)) if p)
    env = {**os.environ, "GRPC_VERBOSITY": "ERROR", "PYTHONPATH": path}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + WAIT_S
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                pytest.fail(f"the server exited with {proc.returncode}: {err[-2000:]}")
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        import asyncio

        caps = asyncio.run(get_info(ready.read_text().strip().removeprefix("grpc://"))).capabilities
        assert (caps.max_sessions, caps.max_message_bytes, caps.max_pipelined_requests) == (5, 1024 * 1024, 9)
        assert caps.idle_timeout.ToSeconds() == 42 and caps.handshake_timeout.ToSeconds() == 7
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_tls_settings_take_a_tls_config() -> None:
    tls = TlsConfig("cert.pem", "key.pem")  # files are read when a listener starts
    assert openenv.SecuritySettings(tls=tls).tls is tls


def test_cli_setting_options_are_made_from_their_fields() -> None:
    """``openenv serve``'s options that set a settings field are generated from it (issue 55):
    each has the field's documentation as its help, the field's default, and its type."""
    from openenv.cli.setting_options import SettingOption

    params = {p.name: p for p in serve_cli.serve_command.params}
    rows: tuple[SettingOption, ...] = serve_cli.SETTING_OPTIONS
    assert len(rows) == 16 and len({r.field for r in rows}) == 16
    for row in rows:
        param = params[row.dest]
        assert isinstance(param, click.Option)
        assert param.help is not None and param.help.startswith(field_doc(row.cls, row.field).replace("``", ""))
        if row.env is None and row.field != "web":
            assert param.default == row._default(), row.flag


def test_cli_options_that_set_a_setting_are_all_generated() -> None:
    """Every option of ``openenv serve`` and ``openenv bridge`` that sets a settings field is
    made from the field (issue 55): the hand-declared ones are exactly the listener options,
    none of which is a server setting (ServerSettings is everything but where to listen), each
    with its reason; and the
    security options ``serve`` and ``bridge`` share have their field's documentation as their
    ``--help`` (TlsConfig's for the TLS files), so the help and the reference cannot drift."""
    from openenv.cli import bridge as bridge_cli
    from openenv.cli.setting_options import SECURITY_OPTIONS

    for module, command in ((serve_cli, serve_cli.serve_command), (bridge_cli, bridge_cli.bridge_command)):
        generated = {row.dest for row in (*module.SETTING_OPTIONS, *SECURITY_OPTIONS)}
        options = {p.name for p in command.params if isinstance(p, click.Option) and p.name != "help"}
        assert options - generated == set(module.LISTENER_OPTIONS), command.name
        assert all(module.LISTENER_OPTIONS.values())  # each exception says why
    for command in (serve_cli.serve_command, bridge_cli.bridge_command):
        params = {p.name: p for p in command.params}
        for row in SECURITY_OPTIONS:
            doc = field_doc(row.cls, row.field).replace("``", "")
            param = params[row.dest]
            assert doc and isinstance(param, click.Option) and param.help == row.help(), (command.name, row.flag)
            assert param.help.startswith(doc), (command.name, row.flag)
