"""Bounded input: what gtplab reads from a file or a socket it does not control, read up to a limit
and a deadline, never to the end of whatever is there (issue 35 item 5).

    read_at_most(stream, limit, what)          bytes of a binary stream (a file, an HTTP answer)
    read_file(path, limit, what)               a user's file (a FIFO, /dev/zero, a binary are refused)
    http_get(url, limit, timeout, what)        an HTTP body: its Content-Length, its size, its time

Each raises, when the input is larger than `limit` bytes or (a socket) still arriving at the deadline,
`error` (default TooLarge, a UserError; an HTTP reader whose callers expect OSError passes its own,
e.g. gtplab.dut.prometheus.ScrapeError) with one line naming what was read and the bound. The memory
is the limit plus one chunk; an endless body (a broken endpoint, a port that is not HTTP, /dev/zero)
costs at most `limit` bytes and `timeout` seconds. Readers: gtplab.dut.prometheus.scrape (a UPF's
metrics), gtplab.results.push (the Pushgateway's answers), gtplab.upftests.harness (eUPF's REST API);
the lab config (gtplab.lab.config.MAX_BYTES) and results files (gtplab.results.store.MAX_RUN_BYTES,
MAX_LINE_BYTES, line by line) keep their own bounds.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from gtplab.errors import UserError

CHUNK = 64 << 10


class TooLarge(UserError):
    """Input over its bound (size or time): one line, exit status 2."""


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n & ((1 << 20) - 1) else \
        f"{n >> 10} KiB" if n >= 1 << 10 and not n & ((1 << 10) - 1) else f"{n} bytes"


def read_at_most(stream, limit: int, what: str, error: type[Exception] = TooLarge,
                 deadline: float | None = None) -> bytes:
    """All of `stream` (binary, with read1 or read) if it ends within `limit` bytes and, when given,
    before `deadline` (time.monotonic()); else `error`("WHAT: larger than LIMIT" / "still arriving
    after ..."). Reads one chunk at a time (read1: one recv on a socket, so a trickle meets the
    deadline instead of filling a chunk)."""
    read = getattr(stream, "read1", None) or stream.read
    parts, n = [], 0
    while True:
        b = read(min(CHUNK, limit + 1 - n))
        if not b:
            return b"".join(parts)
        parts.append(b)
        n += len(b)
        if n > limit:
            raise error(f"{what}: larger than {_size(limit)}: read no further")
        if deadline is not None and time.monotonic() > deadline:
            raise error(f"{what}: still arriving after {_size(n)}, past its deadline: read no further")


def read_file(path: str | Path, limit: int, what: str | None = None, error: type[Exception] = TooLarge) -> bytes:
    """The bytes of a user's file, at most `limit` (`what` names it in the error, default its path).
    Not a regular file (a FIFO that would block, a directory) is refused before it is opened; a
    character device like /dev/zero is read to the limit and refused."""
    what = what or str(path)
    p = Path(path)
    try:
        if p.is_fifo() or p.is_socket():
            raise error(f"{what}: not a regular file")
        with open(p, "rb") as f:
            return read_at_most(f, limit, what, error)
    except OSError as e:
        if isinstance(e, error):
            raise
        raise error(f"{what}: {e.strerror or e}") from None


def http_get(url: str, limit: int, timeout: float, what: str | None = None,
             error: type[Exception] | None = None, **kw) -> bytes:
    """The body of GET `url` (urllib.request.urlopen: its errors, HTTPError included, as they are):
    at most `limit` bytes, all of it within `timeout` s of the request (each connect and recv too).
    An answer whose Content-Length is over the limit is refused before its body is read.
    `error` defaults to OSError (what callers of an HTTP read handle)."""
    error = error or OSError
    what = what or url
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout, **kw) as r:
        length = r.headers.get("Content-Length")
        if length and length.strip().isdigit() and int(length) > limit:
            raise error(f"{what}: answers {int(length)} bytes, larger than {_size(limit)}: read no further")
        return read_at_most(r, limit, what, error, deadline=t0 + timeout)
