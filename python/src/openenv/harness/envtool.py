"""``envtool``: the environment's tools as a shell command, for agents whose only tool is a shell.

Run by file path with any Python 3 (standard library only, so it starts fast and needs nothing
installed in the agent's environment); the harness runner puts an ``envtool`` wrapper on the
agent's ``PATH`` and sets ``OPENENV_TOOLS_URL`` to the episode's tool relay::

    envtool list                          # the tools, with their arguments
    envtool NAME key=value key=@file ...  # call one; a value is JSON if it parses, else text;
                                          # @file passes the file's text
    envtool NAME --json '{"key": ...}'    # the arguments as one JSON object

Each call is one step of the agent's environment session (counted, rewarded, recorded). Prints
the result (its text, or its structured data as JSON); exit status 0, or 1 when the tool
reports an error, 2 on a usage error, 3 when the relay cannot be reached.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

USAGE = "usage: envtool list | envtool NAME [key=value | key=@file ...] | envtool NAME --json '{...}'"


def _rpc(method: str, params: dict[str, Any]) -> Any:
    url = os.environ.get("OPENENV_TOOLS_URL")
    if not url:
        print("envtool: OPENENV_TOOLS_URL is not set (run inside a harness run)", file=sys.stderr)
        sys.exit(3)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            reply = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"envtool: the tool relay at {url} cannot be reached: {e}", file=sys.stderr)
        sys.exit(3)
    if "error" in reply:
        print(f"envtool: {reply['error'].get('message')}", file=sys.stderr)
        sys.exit(1)
    return reply.get("result")


def _arguments(args: list[str]) -> dict[str, Any]:
    if args[:1] == ["--json"]:
        if len(args) != 2:
            raise ValueError("--json takes one JSON object")
        value = json.loads(args[1])
        if not isinstance(value, dict):
            raise ValueError("--json takes a JSON object")
        return value
    out: dict[str, Any] = {}
    for a in args:
        key, sep, value = a.partition("=")
        if not sep or not key:
            raise ValueError(f"expected key=value, got {a!r}")
        if value.startswith("@"):
            with open(value[1:], encoding="utf-8") as f:
                out[key] = f.read()
            continue
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print(__doc__.split("::", 1)[1].split("Each call")[0] if __doc__ else "")
        return 0 if argv else 2
    if argv[0] == "list":
        for t in _rpc("tools/list", {}).get("tools", []):
            props = (t.get("inputSchema") or {}).get("properties") or {}
            print(f"{t['name']}({', '.join(props)}): {t.get('description', '').strip()}")
        return 0
    try:
        arguments = _arguments(argv[1:])
    except (ValueError, OSError) as e:
        print(f"envtool: {e}\n{USAGE}", file=sys.stderr)
        return 2
    result = _rpc("tools/call", {"name": argv[0], "arguments": arguments})
    data = result.get("data")
    if data is not None and not isinstance(data, str):
        print(json.dumps(data, indent=1))
    else:
        print("\n".join(c.get("text", "") for c in result.get("content") or [] if c.get("type") == "text"))
    if result.get("episode_over"):
        print("[the episode is over]")
    return 1 if result.get("isError") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
