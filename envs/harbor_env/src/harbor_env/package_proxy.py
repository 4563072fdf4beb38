"""``harbor-packages``: what a task container reaches instead of the internet (docs/harbor.md).

A task container (:mod:`harbor_env.container`) sits on an internal Docker network with no route
out; this server, in a container of its own on that network and on the default bridge, is the
one thing it reaches, as ``http://harbor-packages``; the containers resolve the apt mirrors'
host names and uv's installer's to it too (``docker run --add-host``: no proxy variable, so
the task's own HTTP clients are not redirected), and ``PIP_INDEX_URL``/``UV_INDEX_URL`` name its
package index. It serves:

* **Debian packages** (``apt-get update``/``install`` as the image's apt sources say): a GET
  for one of the apt mirrors this machine's own apt sources name (``--apt-host``), fetched
  there and cached (``/cache``);
* **a Python package index** (``/simple/NAME/``, PEP 503): the index this machine's pip uses
  (``--index``), its links rewritten to ``/files/...``, which fetches and caches each file;
* **uv's installer** (``curl -LsSf https://INSTALLER/uv/VERSION/install.sh | sh``, Harbor's
  verifier preamble): port 443 answers for the installer's host (``--tls-host``) with a
  certificate of the local CA the harbor base image trusts, and the script served installs that
  version of uv from the ``uv`` wheel of the package index (``/uv/VERSION/uv.tar.gz``) into
  ``~/.local/bin``, with the ``env`` file the real installer writes;
* nothing else: any other host, ``CONNECT`` or path is refused with 403 and a line saying why
  (it also answers as a forward proxy on port 3128, for clients told to use one).

Standard library only: it runs on the harbor base image's Python (``python3 package_proxy.py
--cache DIR ...``). Upstream fetches verify TLS with ``--cafile`` (the host's CA bundle).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import html
import io
import os
import re
import socketserver
import ssl
import sys
import tarfile
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

NAME = "harbor-packages"
PORT = 3128
#: Where the containers reach it (port 80, by its network alias).
BASE_URL = f"http://{NAME}"
_LOCK = threading.Lock()

INSTALL_SH = """#!/bin/sh
# uv's installer, as harbor-packages serves it (docs/harbor.md): uv {version} from the package index.
set -eu
dest="${{UV_INSTALL_DIR:-${{XDG_BIN_HOME:-$HOME/.local/bin}}}}"
mkdir -p "$dest"
url="{base}/uv/{version}/uv.tar.gz"
if command -v curl >/dev/null 2>&1; then curl -fsSL "$url"; else wget -qO- "$url"; fi | tar -xz -C "$dest"
cat > "$dest/env" <<EOF
#!/bin/sh
case ":\\${{PATH}}:" in
    *:"$dest":*) ;;
    *) export PATH="$dest:\\$PATH" ;;
esac
EOF
echo "downloading uv {version} x86_64-unknown-linux-gnu"
echo "installing to $dest"
echo "everything's installed!"
"""


class Config:
    cache = "/cache"
    index = ""
    apt_hosts: frozenset[str] = frozenset()
    tls_hosts: frozenset[str] = frozenset()
    cert = ""
    key = ""
    cafile: str | None = None
    file_hosts: ClassVar[set[str]] = set()


def _ctx() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=Config.cafile)


def _fetch(url: str, accept: str | None = None) -> bytes:
    req = urllib.request.Request(
        url, headers={"User-Agent": "harbor-packages", **({"Accept": accept} if accept else {})}
    )
    with urllib.request.urlopen(req, timeout=120, context=_ctx()) as r:
        data: bytes = r.read()
        return data


def _cached(url: str, *, keep: bool = True, accept: str | None = None) -> bytes:
    """``url``'s content, from the cache when it is there (written atomically)."""
    path = os.path.join(Config.cache, hashlib.sha256(url.encode()).hexdigest())
    if keep and os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    data = _fetch(url, accept)
    if keep:
        fd, tmp = tempfile.mkstemp(dir=Config.cache)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return data


def _token(url: str) -> str:
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def _untoken(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


_HREF = re.compile(r'href="([^"]+)"')
_META = re.compile(r'\s(?:data-dist-info-metadata|data-core-metadata)="[^"]*"')


def simple_page(name: str) -> bytes:
    """The index's page of ``name`` with every file link through ``/files/`` (fetched fresh:
    new releases; the files themselves are cached)."""
    norm = re.sub(r"[-_.]+", "-", name).lower()
    base = Config.index.rstrip("/") + f"/{norm}/"
    text = _fetch(base, "text/html").decode("utf-8", "replace")

    def link(m: re.Match[str]) -> str:
        url, _, frag = html.unescape(m.group(1)).partition("#")
        full = urllib.parse.urljoin(base, url)
        host = urllib.parse.urlsplit(full).hostname or ""
        with _LOCK:
            Config.file_hosts.add(host)
        fname = urllib.parse.unquote(full.rsplit("/", 1)[-1])
        out = f"{BASE_URL}/files/{_token(full)}/{urllib.parse.quote(fname)}"
        return 'href="' + html.escape(out + (f"#{frag}" if frag else "")) + '"'

    return _META.sub("", _HREF.sub(link, text)).encode()


def uv_tarball(version: str) -> bytes:
    """uv and uvx of the ``uv`` wheel ``version`` (x86_64 manylinux) as a .tar.gz."""
    path = os.path.join(Config.cache, f"uv-{version}.tar.gz")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    page = _fetch(Config.index.rstrip("/") + "/uv/", "text/html").decode("utf-8", "replace")
    wheel = None
    for m in _HREF.finditer(page):
        url = urllib.parse.urljoin(Config.index.rstrip("/") + "/uv/", html.unescape(m.group(1)).partition("#")[0])
        fname = url.rsplit("/", 1)[-1]
        if fname.startswith(f"uv-{version}-") and "manylinux" in fname and "x86_64" in fname:
            wheel = url
            break
    if wheel is None:
        raise FileNotFoundError(f"no x86_64 manylinux wheel of uv {version} in the package index")
    data = _cached(wheel)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as z, tarfile.open(fileobj=out, mode="w:gz") as tar:
        for n in z.namelist():
            base = n.rsplit("/", 1)[-1]
            if ".data/scripts/" in n and base in ("uv", "uvx"):
                body = z.read(n)
                info = tarfile.TarInfo(base)
                info.size = len(body)
                info.mode = 0o755
                tar.addfile(info, io.BytesIO(body))
    fd, tmp = tempfile.mkstemp(dir=Config.cache)
    with os.fdopen(fd, "wb") as f:
        f.write(out.getvalue())
    os.replace(tmp, path)
    return out.getvalue()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "harbor-packages"
    tls_host: str | None = None

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send(self, code: int, body: bytes, ctype: str = "application/octet-stream", head: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _refuse(self, why: str, code: int = 403) -> None:
        self._send(code, f"harbor-packages: {why}\n".encode(), "text/plain")

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if host not in Config.tls_hosts or port != "443":
            self._refuse(
                f"{self.path} is not reachable from a task container (no internet: only the package registries "
                "this machine reaches, through http_proxy and the package index http://harbor-packages:3128/simple)"
            )
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(Config.cert, Config.key)
        try:
            conn = ctx.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            self.close_connection = True
            return
        self.connection = conn
        self.rfile = conn.makefile("rb", self.rbufsize)
        self.wfile = socketserver._SocketWriter(conn)  # type: ignore[attr-defined]
        self.tls_host = host
        self.close_connection = False

    def do_HEAD(self) -> None:
        self.do_GET(head=True)

    def do_GET(self, head: bool = False) -> None:
        asked = (self.headers.get("Host") or NAME).rsplit(":", 1)[0].strip("[]").lower()
        if self.server.server_address[1] == 443:  # type: ignore[index]
            scheme, host, path = "https", asked, self.path
        elif self.tls_host is not None:
            scheme, host, path = "https", self.tls_host, self.path
        elif self.path.startswith("http://"):
            parts = urllib.parse.urlsplit(self.path)
            scheme, host = "http", parts.hostname or ""
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        else:
            scheme, host, path = "http", asked if asked in Config.apt_hosts else NAME, self.path
        try:
            if host == NAME or host.startswith("localhost"):
                self._local(path, head)
            elif scheme == "https" and host in Config.tls_hosts:
                m = re.fullmatch(r"/uv/(?:(\d+\.\d+\.\d+)/)?install\.sh", path)
                if m is None:
                    self._refuse(f"https://{host}{path} is not served here (only uv's install.sh)", 404)
                    return
                version = m.group(1) or self._latest_uv()
                self._send(200, INSTALL_SH.format(version=version, base=BASE_URL).encode(), "text/x-sh", head)
            elif scheme == "http" and host in Config.apt_hosts:
                keep = "/pool/" in path or "/by-hash/" in path
                self._send(200, _cached(f"http://{host}{path}", keep=keep), head=head)
            else:
                self._refuse(f"{scheme}://{host} is not reachable from a task container (no internet)")
        except urllib.error.HTTPError as e:
            self._refuse(f"upstream answered {e.code} for {path}", e.code)
        except (urllib.error.URLError, OSError, ValueError) as e:
            self._refuse(f"{path}: {e}", 502)

    def _latest_uv(self) -> str:
        page = _fetch(Config.index.rstrip("/") + "/uv/", "text/html").decode("utf-8", "replace")
        versions = re.findall(r"uv-(\d+\.\d+\.\d+)-py3-none-manylinux", page)
        if not versions:
            raise ValueError("no uv release in the package index")
        return max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))

    def _local(self, path: str, head: bool) -> None:
        path = path.split("?", 1)[0]
        if path == "/health":
            self._send(200, b"ok\n", "text/plain", head)
        elif m := re.fullmatch(r"/simple/([^/]+)/?", path):
            self._send(200, simple_page(m.group(1)), "text/html", head)
        elif path in ("/simple", "/simple/"):
            self._send(200, b"<html><body></body></html>", "text/html", head)
        elif m := re.fullmatch(r"/files/([A-Za-z0-9_-]+)/[^/]+", path):
            url = _untoken(m.group(1))
            host = urllib.parse.urlsplit(url).hostname or ""
            cached = os.path.exists(os.path.join(Config.cache, hashlib.sha256(url.encode()).hexdigest()))
            if not cached and host not in Config.file_hosts:
                self._refuse(f"{host} is not a host of the package index")
                return
            self._send(200, _cached(url), head=head)
        elif m := re.fullmatch(r"/uv/(\d+\.\d+\.\d+)/uv\.tar\.gz", path):
            self._send(200, uv_tarball(m.group(1)), "application/gzip", head)
        else:
            self._refuse(f"nothing at {path}", 404)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="harbor-packages: the package registries a task container reaches")
    ap.add_argument("--cache", default="/cache")
    ap.add_argument("--index", required=True, help="the Python package index (PEP 503) to serve")
    ap.add_argument("--apt-host", action="append", default=[], help="a Debian mirror's host name")
    ap.add_argument("--tls-host", action="append", default=[], help="a host whose uv installer is served")
    ap.add_argument("--cert", default="", help="the certificate (PEM) served for --tls-host")
    ap.add_argument("--key", default="")
    ap.add_argument("--cafile", default=None, help="CA bundle for upstream TLS")
    ap.add_argument("--port", type=int, default=PORT)
    ns = ap.parse_args(argv)
    Config.cache, Config.index, Config.cafile = ns.cache, ns.index, ns.cafile
    Config.apt_hosts, Config.tls_hosts = frozenset(ns.apt_host), frozenset(ns.tls_host)
    Config.cert, Config.key = ns.cert, ns.key
    Config.file_hosts = {urllib.parse.urlsplit(ns.index).hostname or ""}
    os.makedirs(Config.cache, exist_ok=True)
    servers = [ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in (ns.port, 80)]
    if Config.cert:
        tls = ThreadingHTTPServer(("0.0.0.0", 443), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(Config.cert, Config.key)
        tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
        servers.append(tls)
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(f"harbor-packages serving on :{ns.port}, :80 and :443", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
