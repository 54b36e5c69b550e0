"""The one HTTP server the tests stand up in place of a Pushgateway, a UPF's metrics endpoint or a
release download: on 127.0.0.1, a free port, in a thread, for as long as the `with` block."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator

# what a handler returns: (status, body) for a GET, a status for a PUT
Get = Callable[[str], tuple[int, bytes]]
Put = Callable[[str, bytes], int]


@contextlib.contextmanager
def serving(get: Get | None = None, put: Put | None = None, directory: str | None = None) -> Iterator[str]:
    """Yields the server's base URL ('http://127.0.0.1:PORT'). GET answered by get(path) -> (status,
    body), PUT by put(path, body) -> status (501 without one); or, with directory, its files (GET
    only). Shut down and closed after the block, whatever happened in it."""
    if directory is not None and (get or put):
        raise ValueError("serving: a directory, or get/put handlers, not both")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):           # noqa: N802 -- http.server's name
            status, body = get(self.path) if get else (501, b"")
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self):           # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(put(self.path, body) if put else 501)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    if directory is not None:
        def handler(*a, **kw):
            return http.server.SimpleHTTPRequestHandler(*a, directory=directory, **kw)
    else:
        handler = Handler
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=5)
