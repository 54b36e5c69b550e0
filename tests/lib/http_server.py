"""The one HTTP server the tests stand up in place of a Pushgateway, a UPF's metrics endpoint or a
release download: on 127.0.0.1, a free port, in a thread, for as long as the `with` block."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
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


HOSTILE_MODES = ("oversized", "trickle", "stall", "error-oversized")


@contextlib.contextmanager
def hostile(oversize: int, modes=HOSTILE_MODES) -> Iterator[dict[str, str]]:
    """{mode: base URL} of servers whose answers a bounded reader must cut: oversized (oversize
    octets of NULs, as fast as loopback goes), trickle (a byte every 50 ms for ever), stall (a few
    bytes, then nothing, the connection open), error-oversized (a 400 whose body is oversized).
    Stopped, their connections closed, after the block."""
    stop = threading.Event()
    chunk = b"\0" * (64 << 10)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):           # noqa: N802 -- http.server's name
            mode = self.server.mode
            self.send_response(400 if mode == "error-oversized" else 200)
            self.send_header("Content-Type", "application/json" if mode != "trickle" or "api" in self.path
                             else "text/plain")
            self.end_headers()
            sent = 0
            try:
                if mode == "stall":
                    self.wfile.write(b'{"status": ')
                    self.wfile.flush()
                    stop.wait(60)
                    return
                while not stop.is_set():
                    if mode in ("oversized", "error-oversized"):
                        if sent >= oversize:
                            return
                        self.wfile.write(chunk)
                        sent += len(chunk)
                    else:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.05)
            except OSError:
                return              # the reader hung up: what a bounded one does

        def log_message(self, *a):
            pass

    servers = {}
    try:
        for mode in modes:
            s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            s.daemon_threads = True
            s.mode = mode
            threading.Thread(target=s.serve_forever, daemon=True).start()
            servers[mode] = s
        yield {m: f"http://127.0.0.1:{s.server_address[1]}" for m, s in servers.items()}
    finally:
        stop.set()
        for s in servers.values():
            s.shutdown()
            s.server_close()
