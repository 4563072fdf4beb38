"""TLS for both listeners and their clients: files in, credentials and contexts out."""

from __future__ import annotations

import dataclasses
import ssl

import grpc

__all__ = ["TlsConfig", "client_ssl_context", "grpc_channel_credentials"]


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """A listener's certificate chain and private key (PEM files); with ``client_ca``,
    clients must present a certificate signed by it (mutual TLS).

    The files are read when a listener starts, so a renewed certificate is picked up on
    restart; :meth:`check` reads them once, to fail early on a wrong path.
    """

    # The documentation of each file is also the help of its ``openenv serve``/``bridge`` option.
    cert_file: str = dataclasses.field(metadata={"doc": "TLS certificate chain (PEM) of every listener."})
    key_file: str = dataclasses.field(metadata={"doc": "TLS private key (PEM) of the certificate."})
    client_ca_file: str | None = dataclasses.field(
        default=None,
        metadata={"doc": "Require client certificates signed by this CA (PEM; mutual TLS)."},
    )

    def check(self) -> TlsConfig:
        """ValueError when a file cannot be read or the key does not match the certificate."""
        self.server_ssl_context()
        return self

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials for ``grpc.aio.Server.add_secure_port``."""
        key, cert = _read(self.key_file, "TLS key"), _read(self.cert_file, "TLS certificate")
        ca = _read(self.client_ca_file, "client CA") if self.client_ca_file else None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)

    def server_ssl_context(self) -> ssl.SSLContext:
        """A server-side :class:`ssl.SSLContext` (TLS 1.2+)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:
                ctx.load_verify_locations(self.client_ca_file)
                ctx.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"bad TLS files ({self.cert_file}, {self.key_file}): {e}") from None
        return ctx


def client_ssl_context(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext:
    """A client-side context verifying the server against ``ca_file`` (default: the
    system's CAs); ``cert_file``/``key_file`` present a client certificate (mTLS)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def grpc_channel_credentials(
    ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials:
    """Credentials for a ``grpcs://`` channel: the server is verified against ``ca_file``
    (default: gRPC's bundled roots); ``cert_file``/``key_file`` present a client certificate."""
    ca = _read(ca_file, "CA") if ca_file else None
    cert = _read(cert_file, "client certificate") if cert_file else None
    key = _read(key_file, "client key") if key_file else None
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
