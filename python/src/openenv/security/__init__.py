"""Who may reach a listener, and over what: bearer tokens, TLS, browser origins (RFC 0003).

Transport-neutral policy shared by the gRPC listener (:mod:`openenv.server`), the HTTP side
(:mod:`openenv.http`) and the clients (:mod:`openenv.client`); each of those applies it in
its own terms (gRPC metadata and status codes; HTTP headers, 401/403/431). docs/security.md
has the threat model and the defaults.

* :class:`TokenSet`: the accepted bearer tokens (``--token``, ``--token-file``,
  ``OPENENV_TOKEN``), compared in constant time;
* :class:`Authenticator`: the one check of a call's token that every listener applies
  (gRPC, grpclib, the HTTP side, the binary WebSocket, the in-process connection);
* :func:`check_bind`: a listener on a non-loopback address without a token refuses to start
  unless anonymous access is asked for explicitly;
* :class:`TlsConfig`: certificate, key and optional client CA (mTLS) of a listener;
  :func:`client_ssl_context` / :func:`grpc_channel_credentials` for clients;
* :class:`SecuritySettings`: all of the above for one server, as a settings object;
* :class:`BrowserPolicy`: ``Origin`` and ``Host`` checks against cross-site WebSocket
  hijacking, CSRF and DNS rebinding.
"""

from openenv.security.auth import Authenticator
from openenv.security.browser import BrowserPolicy
from openenv.security.settings import SecuritySettings
from openenv.security.tls import TlsConfig, client_ssl_context, grpc_channel_credentials
from openenv.security.tokens import TOKEN_ENV, TokenSet, bearer_token, check_bind, is_loopback_host

__all__ = [
    "TOKEN_ENV",
    "Authenticator",
    "BrowserPolicy",
    "SecuritySettings",
    "TlsConfig",
    "TokenSet",
    "bearer_token",
    "check_bind",
    "client_ssl_context",
    "grpc_channel_credentials",
    "is_loopback_host",
]
