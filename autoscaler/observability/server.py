"""`/metrics` and health checks over plain HTTP, on a thread of its own."""

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], bool]


def serve(
    *, host: str, port: int, registry: CollectorRegistry | None, checks: Mapping[str, Check]
) -> ThreadingHTTPServer:
    """Serve `/metrics` (unless `registry` is None) and each check's path, 200 while it holds
    and 503 otherwise; `server.shutdown()` stops it. Port 0 picks a free port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics" and registry is not None:
                self.reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif self.path in checks:
                ok = checks[self.path]()
                self.reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain")
            else:
                self.reply(404, b"not found\n", "text/plain")

        def reply(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return  # scrapes every few seconds would drown the operator's log

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
