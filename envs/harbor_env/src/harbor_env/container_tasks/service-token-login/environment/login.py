import hashlib
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs

PW = open("/etc/app/admin.pw").read().strip()


class H(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        f = parse_qs(self.rfile.read(n).decode())
        ok = self.path == "/login" and f.get("user") == ["admin"] and f.get("password") == [PW]
        body = hashlib.sha256(f"admin:{PW}".encode()).hexdigest()[:16].encode() if ok else b"denied"
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


HTTPServer(("127.0.0.1", 9090), H).serve_forever()
