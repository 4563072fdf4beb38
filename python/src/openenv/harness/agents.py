"""The agent harnesses the runner drives: how each one is configured and started.

An :class:`Agent` turns an :class:`AgentContext` (the episode's workspace, its private config
directory, the capture proxy's base URL, the model name, the prompt) into an
:class:`AgentLaunch` (argv, environment, working directory). Each harness is pointed at the
proxy through its own usual base-URL configuration:

* ``mini-swe-agent``: the ``mini`` command (the ``mini-swe-agent`` package) in yolo mode with
  ``--exit-immediately``, its LiteLLM model ``openai/MODEL`` with ``api_base`` the proxy; its
  only tool is bash in the workspace;
* ``codex``: Codex CLI's ``codex exec`` with a custom model provider (``wire_api =
  "responses"``, ``base_url`` the proxy) in a private ``CODEX_HOME``, approvals off; its shell
  tool runs in the workspace;
* ``opencode``: ``opencode run`` with an OpenAI-compatible provider (``@ai-sdk/openai-compatible``,
  bundled) whose ``baseURL`` is the proxy, in a private ``HOME``; its bash tool runs in the
  workspace;
* ``claude-code``: Claude Code's ``claude -p`` (print mode: one prompt, then exit) with
  ``ANTHROPIC_BASE_URL`` the proxy (Anthropic's Messages API; the proxy records it as ``api``
  ``messages``), permissions bypassed (it runs in the runner's jail), its configuration in a
  private ``CLAUDE_CONFIG_DIR`` and ``HOME``, non-essential traffic (telemetry, updates, error
  reports) off; its Bash tool runs in the workspace;
* ``command:CMD``: any program, run with ``sh -c CMD``; it finds the endpoint in
  ``OPENAI_BASE_URL``/``OPENAI_API_KEY``/``OPENENV_MODEL`` and the prompt in
  ``OPENENV_PROMPT_FILE``.

Every agent gets ``envtool`` on its ``PATH`` (the environment's tools, :mod:`openenv.harness.envtool`)
and ``OPENENV_TOOLS_URL``; Codex CLI, OpenCode and Claude Code also get the same tools as an MCP server
(``openenv``: Streamable HTTP, :mod:`openenv.harness.relay`), ``OPENENV_MCP_URL`` for others.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Protocol

__all__ = ["AGENTS", "Agent", "AgentContext", "AgentLaunch", "AgentUnavailable", "ClaudeCodeAgent", "CodexAgent",
           "CommandAgent", "MiniSweAgent", "OpenCodeAgent", "agent_from_spec"]  # fmt: skip

#: The key the harness is given: the proxy needs none, and a real key is the proxy's (--upstream-api-key).
PLACEHOLDER_KEY = "openenv-harness"


class AgentUnavailable(RuntimeError):
    """The agent's program is not installed (the message says how to install it)."""


@dataclasses.dataclass(frozen=True)
class AgentContext:
    workspace: Path
    """The agent's working directory (empty at the start)."""
    home: Path
    """A private directory for the agent's own configuration and state."""
    base_url: str
    """The capture proxy's base URL for this episode (``.../v1``)."""
    model: str
    prompt: str
    tools_url: str
    bin_dir: Path
    """Holds ``envtool``; first on the agent's ``PATH``."""
    mcp_url: str = ""
    """The episode's tools as an MCP Streamable HTTP server (empty: none)."""


@dataclasses.dataclass
class AgentLaunch:
    argv: list[str]
    env: dict[str, str]
    cwd: Path


class Agent(Protocol):
    name: str

    def check(self) -> None:
        """Raise :class:`AgentUnavailable` when the agent's program is missing (before a run)."""
        ...

    def launch(self, ctx: AgentContext) -> AgentLaunch: ...


def _base_env(ctx: AgentContext) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PATH=f"{ctx.bin_dir}{os.pathsep}{env.get('PATH', '')}",
        OPENENV_TOOLS_URL=ctx.tools_url,
        OPENENV_ENVTOOL=str(ctx.bin_dir / "envtool"),
        OPENENV_MCP_URL=ctx.mcp_url,
        OPENAI_BASE_URL=ctx.base_url,
        OPENAI_API_KEY=PLACEHOLDER_KEY,
        OPENENV_MODEL=ctx.model,
        OPENENV_PROMPT_FILE=str(ctx.home / "prompt.txt"),
        # Programs that read PWD rather than their working directory (OpenCode) work there too.
        PWD=str(ctx.workspace),
        NO_COLOR="1",
    )
    return env


#: Where `make venv` installs the npm harnesses (relative to the working directory).
LOCAL_NPM_BIN = os.path.join(".harness-tools", "node_modules", ".bin")


def _find(program: str, override: str | None, install: str) -> str:
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise AgentUnavailable(f"{override} is not an executable file")
        return override
    here = os.path.dirname(sys.executable)  # the same virtual environment's scripts first
    path = os.pathsep.join([here, os.environ.get("PATH", ""), os.path.abspath(LOCAL_NPM_BIN)])
    found = shutil.which(program, path=path)
    if found is None:
        raise AgentUnavailable(f"{program} is not installed: {install}")
    return found


@dataclasses.dataclass
class MiniSweAgent:
    """mini-swe-agent (``pip install 'protoenv[harness]'`` brings it)."""

    executable: str | None = None
    step_limit: int = 50
    command_timeout_s: int = 120
    name: str = "mini-swe-agent"

    def check(self) -> None:
        _find("mini", self.executable, "pip install 'protoenv[harness]'")

    def launch(self, ctx: AgentContext) -> AgentLaunch:
        exe = _find("mini", self.executable, "pip install 'protoenv[harness]'")
        config = {
            "model": {
                "model_name": f"openai/{ctx.model}",
                "cost_tracking": "ignore_errors",
                "model_kwargs": {"api_base": ctx.base_url, "api_key": PLACEHOLDER_KEY, "drop_params": True},
            },
            "agent": {"mode": "yolo", "confirm_exit": False, "step_limit": self.step_limit, "cost_limit": 0},
            "environment": {"cwd": str(ctx.workspace), "timeout": self.command_timeout_s},
        }
        path = ctx.home / "mini.yaml"
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
        env = _base_env(ctx)
        env.update(
            MSWEA_CONFIGURED="true",  # no first-run questions
            MSWEA_SILENT_STARTUP="1",
            MSWEA_GLOBAL_CONFIG_DIR=str(ctx.home / "mswea"),
            LITELLM_LOCAL_MODEL_COST_MAP="True",  # LiteLLM fetches its cost map over the network otherwise
            MSWEA_COST_TRACKING="ignore_errors",
        )
        argv = [exe, "-y", "--exit-immediately", "-c", "mini.yaml", "-c", str(path), "-t", ctx.prompt]
        argv += ["-o", str(ctx.home / "trajectory.json")]
        return AgentLaunch(argv, env, ctx.workspace)


@dataclasses.dataclass
class CodexAgent:
    """Codex CLI (``npm install @openai/codex``; ``make harness-tools`` installs it locally)."""

    executable: str | None = None
    name: str = "codex"

    def check(self) -> None:
        self._exe()

    def _exe(self) -> str:
        return _find("codex", self.executable or os.environ.get("OPENENV_CODEX_BIN"), "npm install @openai/codex")

    def launch(self, ctx: AgentContext) -> AgentLaunch:
        exe = self._exe()
        home = ctx.home / "codex"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            "\n".join(
                [
                    f"model = {json.dumps(ctx.model)}",
                    'model_provider = "openenv"',
                    'approval_policy = "never"',
                    # The agent's commands run in its workspace, in the runner's jail
                    # (openenv.harness.jail): Codex's own sandbox needs kernel features a
                    # container may lack, and would not hide the environment's files anyway.
                    'sandbox_mode = "danger-full-access"',
                    "check_for_update_on_startup = false",
                    # A login shell re-reads /etc/profile, which resets PATH (and drops envtool).
                    "allow_login_shell = false",
                    "[analytics]",
                    "enabled = false",
                    "[model_providers.openenv]",
                    'name = "openenv capture proxy"',
                    f"base_url = {json.dumps(ctx.base_url)}",
                    'env_key = "OPENAI_API_KEY"',
                    'wire_api = "responses"',
                    *(["[mcp_servers.openenv]", f"url = {json.dumps(ctx.mcp_url)}"] if ctx.mcp_url else []),
                    "",
                ]
            ),
            encoding="utf-8",
        )
        env = _base_env(ctx)
        env["CODEX_HOME"] = str(home)
        argv = [exe, "exec", "--skip-git-repo-check", "--cd", str(ctx.workspace), ctx.prompt]
        return AgentLaunch(argv, env, ctx.workspace)


@dataclasses.dataclass
class OpenCodeAgent:
    """OpenCode (``npm install opencode-ai``; ``make venv`` installs it locally)."""

    executable: str | None = None
    name: str = "opencode"

    def check(self) -> None:
        self._exe()

    def _exe(self) -> str:
        return _find("opencode", self.executable or os.environ.get("OPENENV_OPENCODE_BIN"), "npm install opencode-ai")

    def launch(self, ctx: AgentContext) -> AgentLaunch:
        exe = self._exe()
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {
                "openenv": {
                    "npm": "@ai-sdk/openai-compatible",  # bundled with OpenCode: nothing is fetched
                    "name": "openenv capture proxy",
                    "options": {"baseURL": ctx.base_url, "apiKey": PLACEHOLDER_KEY},
                    "models": {ctx.model: {"name": ctx.model}},
                }
            },
            "model": f"openenv/{ctx.model}",
            **({"mcp": {"openenv": {"type": "remote", "url": ctx.mcp_url, "enabled": True}}} if ctx.mcp_url else {}),
            "autoupdate": False,
            "share": "disabled",
        }
        path = ctx.home / "opencode.json"
        path.write_text(json.dumps(config, indent=1), encoding="utf-8")
        env = _base_env(ctx)
        home = ctx.home / "home"  # OpenCode keeps its state under HOME/XDG: a private one per episode
        env.update(
            OPENCODE_CONFIG=str(path),
            # Nothing from the network, the user's or the project's setup: the run is what we configure.
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
            OPENCODE_DISABLE_SHARE="1",
            OPENCODE_DISABLE_CLAUDE_CODE="1",
            OPENCODE_DISABLE_EXTERNAL_SKILLS="1",
            OPENCODE_DISABLE_PROJECT_CONFIG="1",
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_DATA_HOME=str(home / ".local/share"),
            XDG_CACHE_HOME=str(home / ".cache"),
            XDG_STATE_HOME=str(home / ".local/state"),
        )
        home.mkdir(parents=True, exist_ok=True)
        return AgentLaunch([exe, "run", "-m", f"openenv/{ctx.model}", ctx.prompt], env, ctx.workspace)


@dataclasses.dataclass
class ClaudeCodeAgent:
    """Claude Code (``npm install @anthropic-ai/claude-code``; ``make venv`` installs it locally)."""

    executable: str | None = None
    max_turns: int = 50
    name: str = "claude-code"

    def check(self) -> None:
        self._exe()

    def _exe(self) -> str:
        return _find(
            "claude", self.executable or os.environ.get("OPENENV_CLAUDE_BIN"), "npm install @anthropic-ai/claude-code"
        )

    def launch(self, ctx: AgentContext) -> AgentLaunch:
        exe = self._exe()
        env = _base_env(ctx)
        home = ctx.home / "home"
        config = ctx.home / "claude"
        for d in (home, config):
            d.mkdir(parents=True, exist_ok=True)
        env.update(
            # Claude Code appends /v1/messages to its base URL; the episode's proxy URL ends in /v1.
            ANTHROPIC_BASE_URL=ctx.base_url.removesuffix("/").removesuffix("/v1"),
            ANTHROPIC_API_KEY=PLACEHOLDER_KEY,
            ANTHROPIC_MODEL=ctx.model,
            # Its background calls (titles, summaries) use the "small, fast" model: the same one,
            # through the same proxy, so they are in the trace as well.
            ANTHROPIC_SMALL_FAST_MODEL=ctx.model,
            ANTHROPIC_DEFAULT_HAIKU_MODEL=ctx.model,
            ANTHROPIC_DEFAULT_SONNET_MODEL=ctx.model,
            ANTHROPIC_DEFAULT_OPUS_MODEL=ctx.model,
            CLAUDE_CONFIG_DIR=str(config),
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_CACHE_HOME=str(home / ".cache"),
            # Nothing but model calls leaves it: no telemetry, update checks, error reports or surveys.
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            DISABLE_BUG_COMMAND="1",
            CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1",
            # --dangerously-skip-permissions refuses a root user outside a sandbox; the runner's
            # jail is one (its own user, PID and network namespaces, a read-only host).
            IS_SANDBOX="1",
            # The MCP tools in every request, as the other harnesses offer them: not deferred
            # behind its ToolSearch tool (a model would have to ask for each by name first).
            ENABLE_TOOL_SEARCH="false",
        )
        argv = [exe, "-p", ctx.prompt, "--model", ctx.model, "--dangerously-skip-permissions"]
        argv += ["--max-turns", str(self.max_turns), "--output-format", "json"]
        if ctx.mcp_url:
            servers = {"mcpServers": {"openenv": {"type": "http", "url": ctx.mcp_url}}}
            argv += ["--mcp-config", json.dumps(servers), "--strict-mcp-config"]
        return AgentLaunch(argv, env, ctx.workspace)


@dataclasses.dataclass
class CommandAgent:
    """Any program: ``sh -c COMMAND`` in the workspace (see the module's text)."""

    command: str
    name: str = "command"

    def check(self) -> None:
        pass

    def launch(self, ctx: AgentContext) -> AgentLaunch:
        return AgentLaunch(["/bin/sh", "-c", self.command], _base_env(ctx), ctx.workspace)


AGENTS = ("mini-swe-agent", "codex", "opencode", "claude-code", "command:CMD")


def agent_from_spec(spec: str, executable: str | None = None) -> Agent:
    """``mini-swe-agent``, ``codex``, ``opencode``, ``claude-code`` or ``command:CMD``; ``executable``
    overrides the program found."""
    if spec == "mini-swe-agent":
        return MiniSweAgent(executable)
    if spec == "codex":
        return CodexAgent(executable)
    if spec == "opencode":
        return OpenCodeAgent(executable)
    if spec == "claude-code":
        return ClaudeCodeAgent(executable)
    if spec.startswith("command:") and spec[8:].strip():
        return CommandAgent(spec[8:])
    raise ValueError(f"unknown agent {spec!r}; one of {', '.join(AGENTS)}")
