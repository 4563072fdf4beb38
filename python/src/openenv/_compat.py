"""Module paths of openenv 0.1 (and the 0.2 renames), kept importable for one minor version.

0.2 laid the package out in layers (docs/architecture.md); ``openenv.session``,
``openenv.images``, ``openenv.bridge.frames`` and the like moved. Importing an old path
still works: it gives a module that forwards every attribute to the module(s) that now hold
it, with a ``DeprecationWarning`` naming the new path. No code of this repository uses them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

__all__ = ["MOVED", "install"]

#: old module -> the modules its names now live in (searched in order).
MOVED: dict[str, tuple[str, ...]] = {
    "openenv.session": ("openenv.runtime.session", "openenv.protocol"),
    "openenv.environment": ("openenv.runtime.environment", "openenv.protocol"),
    "openenv.codec": ("openenv.runtime.codec", "openenv.values"),
    "openenv.tools": ("openenv.runtime.tools",),
    "openenv.vector": ("openenv.runtime.vector",),
    "openenv.transport_ws": ("openenv.client.ws", "openenv.client.urls", "openenv.json_protocol.frames"),
    "openenv.images": (
        "openenv.deploy.engine",
        "openenv.deploy.project",
        "openenv.deploy.build",
        "openenv.deploy.run",
        "openenv.deploy.cleanup",
    ),
    "openenv.baseimage": ("openenv.deploy.baseimage",),
    "openenv.wheelhouse": ("openenv.deploy.wheelhouse",),
    "openenv.scaffold": ("openenv.deploy.scaffold",),
    "openenv.spaces": ("openenv.deploy.space",),
    "openenv.netns": ("openenv.deploy.netns",),
    "openenv.healthcheck": ("openenv.client.health", "openenv.cli.health"),
    "openenv.bridge.frames": ("openenv.json_protocol.frames", "openenv.json_protocol.jsontext"),
    "openenv.bridge.payloads": ("openenv.json_protocol.payloads",),
    "openenv.bridge.server": ("openenv.http.server", "openenv.host"),
    "openenv.bridge.cli": ("openenv.cli.bridge",),
    # 0.2 (issue 29): rooms named for what they hold.
    "openenv.wire": ("openenv.json_protocol",),
    "openenv.wire.frames": ("openenv.json_protocol.frames",),
    "openenv.wire.payloads": ("openenv.json_protocol.payloads",),
    "openenv.wire.jsonrpc": ("openenv.json_protocol.jsonrpc",),
    "openenv.wire.jsontext": ("openenv.json_protocol.jsontext",),
    "openenv.wire.render": ("openenv.json_protocol.render",),
    "openenv.bridge.app": ("openenv.http.app",),
    "openenv.bridge.asgi": ("openenv.http.asgi",),
    "openenv.bridge.backend": ("openenv.http.backend",),
    "openenv.bridge.binary": ("openenv.http.binary",),
    "openenv.bridge.binary_listener": ("openenv.http.binary_listener",),
    "openenv.bridge.guard": ("openenv.http.guard",),
    "openenv.bridge.limits": ("openenv.http.limits",),
    "openenv.bridge.listener": ("openenv.http.listener",),
    "openenv.bridge.mcp": ("openenv.http.mcp",),
    "openenv.bridge.observe": ("openenv.http.observe",),
    "openenv.bridge.ws": ("openenv.http.ws",),
    "openenv.bridge.web": ("openenv.http.web",),
    "openenv.bridge.http": ("openenv.http.server",),
    "openenv.engines": ("openenv.grpc_libraries",),
    "openenv.engines.grpclib_server": ("openenv.grpc_libraries.grpclib_server",),
}


class _Forwarder(types.ModuleType):
    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name, f"Moved: see {', '.join(targets)}.")
        self.__targets = targets

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # never the new package's __path__ (its files would load twice)
            raise AttributeError(attr)
        for t in self.__targets:
            mod = importlib.import_module(t)
            if hasattr(mod, attr):
                return getattr(mod, attr)
        raise AttributeError(f"{self.__name__}.{attr} is gone; look in {', '.join(self.__targets)}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED:
            # An old package (its submodules moved too) must be a package for them to import.
            package = any(old.startswith(fullname + ".") for old in MOVED)
            return importlib.machinery.ModuleSpec(fullname, self, is_package=package)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        targets = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {' / '.join(targets)}; the old path goes away in 0.3",
            DeprecationWarning,
            stacklevel=3,
        )
        module = _Forwarder(spec.name, targets)
        if spec.submodule_search_locations is not None:
            module.__path__ = []  # a package whose submodules are forwarders too (found by this finder)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install() -> None:
    """Make the old paths importable (idempotent; done by ``import openenv``)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
