"""Browser safety of the HTTP side: which ``Origin`` and ``Host`` a request may carry.

Browsers let any page open a WebSocket or send a "simple" POST to ``127.0.0.1``; what they
cannot forge is the ``Origin`` header. A page whose name resolves to 127.0.0.1 (DNS
rebinding) is same-origin with itself, but its requests carry its own name in ``Host``. So:
a request with an ``Origin`` is served only when that origin is listed or is the server's
own (``http(s)://<Host>``); and a server bound to loopback answers only to loopback names
in ``Host`` (plus listed ones). Clients that are not browsers send no ``Origin`` and are
unaffected; tokens (:class:`~openenv.security.TokenSet`) protect those.
"""

from __future__ import annotations

from collections.abc import Iterable

from openenv.security.tokens import is_loopback_host

__all__ = ["BrowserPolicy"]


class BrowserPolicy:
    """Origin and Host rules of one HTTP listener.

    Args:
        allowed_origins: origins (``scheme://host[:port]``) whose pages may use the server;
            ``"*"`` allows every origin (then only tokens protect it).
        allowed_hosts: extra ``Host`` values answered when bound to loopback (a name in
            ``/etc/hosts``, a reverse proxy's name), with or without ``:port``.
        bind_host: the interface the listener is bound to; the Host check applies when it is
            a loopback address.
    """

    def __init__(
        self, allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = (), *, bind_host: str = "127.0.0.1"
    ) -> None:
        self.allowed_origins = frozenset(o.strip().rstrip("/").lower() for o in allowed_origins if o.strip())
        self.any_origin = "*" in self.allowed_origins
        self.allowed_hosts = frozenset(h.strip().lower() for h in allowed_hosts if h.strip())
        self.check_host = is_loopback_host(bind_host)

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these ``Host`` and ``Origin`` headers is refused (None: it is not)."""
        h = (host or "").strip().lower()
        if self.check_host and h and not is_loopback_host(h) and not self._host_listed(h):
            return f"Host {h[:100]!r} is not served here (the server is bound to loopback; see --allowed-hosts)"
        if origin is None or self.any_origin:
            return None
        o = origin.strip().rstrip("/").lower()
        if o in self.allowed_origins:
            return None
        if h and o in (f"http://{h}", f"https://{h}"):
            return None  # the server's own origin
        return f"Origin {o[:100]!r} is not allowed (see --allowed-origins)"

    def _host_listed(self, h: str) -> bool:
        return h in self.allowed_hosts or h.rsplit(":", 1)[0] in self.allowed_hosts
