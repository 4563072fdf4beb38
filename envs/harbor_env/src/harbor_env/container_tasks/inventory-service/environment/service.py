import json
from http.server import BaseHTTPRequestHandler, HTTPServer

ITEMS = [{"name": "bolt", "qty": 40}, {"name": "nut", "qty": 65}, {"name": "gear", "qty": 12}]


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(ITEMS if self.path == "/items" else {"error": "not found"}).encode()
        self.send_response(200 if self.path == "/items" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


HTTPServer(("127.0.0.1", 8080), H).serve_forever()
