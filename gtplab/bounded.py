"""Bounded input: what gtplab reads from a file or a socket it does not control, read up to a limit
and a deadline, never to the end of whatever is there (issue 35 item 5).

    read_at_most(stream, limit, what)          bytes of a binary stream (a file, an HTTP answer)
    read_file(path, limit, what)               a user's file (a FIFO, /dev/zero, a binary are refused)
    http_get(url, limit, timeout, what)        an HTTP body: its Content-Length, its size, its time

Each raises, when the input is larger than `limit` bytes or (a socket) still arriving at the deadline,
`error` (default TooLarge, a UserError; an HTTP reader whose callers expect OSError passes its own,
e.g. gtplab.dut.prometheus.ScrapeError) with one line naming what was read and the bound. The memory
is the limit plus one chunk; an endless body (a broken endpoint, a port that is not HTTP, /dev/zero)
costs at most `limit` bytes and `timeout` seconds.

    read_lines(path, limit, line_limit, what)  a line-oriented file, one line at a time (bearer files,
                                               cases.jsonl): the memory is one line
    read_tail(path, limit)                     the end of a log, whatever its size

A FIFO, a socket or a directory is refused before it is read (opened non-blocking: a FIFO nobody
writes does not hang the open). The limits, per kind of input, are below (LIMITS), with the readers
that use each; those that keep theirs in their own module are listed there too.
"""

from __future__ import annotations

import os
import stat
import time
import urllib.request
from pathlib import Path

from gtplab.errors import UserError

CHUNK = 64 << 10

# ---- LIMITS: what each kind of input may take (bytes; seconds for a socket) --------------------------
# Files a user gives, or a run left behind:
LAB_CONFIG_BYTES = 1 << 20        # a lab config or sweep spec: a few kB (gtplab.lab.config.read_yaml)
RUN_JSON_BYTES = 16 << 20         # run.json: spec, layout, notes take a few kB (gtplab.results.store,
                                  # gtplab.conformance.cli)
CASE_LINE_BYTES = 16 << 20        # one line of cases.jsonl: a case and its trials, some 10-100 kB
CASES_FILE_BYTES = 1 << 30        # all of cases.jsonl: thousands of such cases
BEARER_FILE_BYTES = 256 << 20     # a bearer file: 1M bearers take ~60 MB, ~120 MB with the comments of a
                                  # provisioned one (gtplab.pfcp.provision.read_bearer_file, gtplab.dut.pfcp)
BEARER_LINE_BYTES = 4 << 10       # one bearer: ~100 bytes with its options and comment
BEARER_LINES = 1 << 24            # lines of a bearer file (bearers, comments, blank): 16 x a 1M-bearer table
STATE_FILE_BYTES = 1 << 20        # a pid, a command line, monitor.json (gtplab.observe.monitor)
LOG_TAIL_BYTES = 64 << 10         # what a message quotes of a log's end (gtplab.observe.monitor,
                                  # gtplab.lab.external.log_tail)
# HTTP bodies, each within its reader's timeout on the whole body:
EUPF_API_BYTES = 16 << 20         # eUPF's REST API, 5 s (gtplab.dut.external; gtplab.upftests.harness
EUPF_API_TIMEOUT = 5.0            # keeps its own API_MAX_BYTES, the same)
PROMETHEUS_QUERY_BYTES = 256 << 20  # /api/v1/query_range, --timeout (gtplab.results.export)
HTTP_ERROR_BODY_BYTES = 64 << 10  # an HTTP error answer's body, read for its message
# Kept in their modules: gtplab.dut.prometheus.SCRAPE_MAX_BYTES (a UPF's metrics, 16 MiB),
# gtplab.results.gateway.GATEWAY_STATUS_MAX_BYTES / GATEWAY_METRICS_MAX_BYTES (1 MiB / 64 MiB).
# Not bounded here: /proc and /sys files (the kernel's, bounded by it), gtplab's own state files
# under its run directory, and the TRex profiles' --teid-file (trex_profiles/gtpu_common.read_teids).


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


def open_file(path: str | Path, what: str | None = None, error: type[Exception] = TooLarge):
    """A user's file opened for reading (binary), or `error` in one line: opened non-blocking, so a
    FIFO nobody writes is refused instead of hanging the open; a directory or a socket is refused;
    a character device (/dev/zero) is let through, for the reader's limit to end it."""
    what = what or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise error(f"{what}: {e.strerror or e}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise error(f"{what}: a directory, not a file")
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)):
            raise error(f"{what}: not a regular file (a FIFO or a socket)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | Path, limit: int, what: str | None = None, error: type[Exception] = TooLarge) -> bytes:
    """The bytes of a user's file, at most `limit` (`what` names it in the error, default its path).
    Not a regular file (a FIFO that would block, a directory) is refused before it is read; a
    character device like /dev/zero is read to the limit and refused."""
    what = what or str(path)
    with open_file(path, what, error) as f:
        try:
            return read_at_most(f, limit, what, error)
        except OSError as e:
            if isinstance(e, error):
                raise
            raise error(f"{what}: {e.strerror or e}") from None


def read_lines(path: str | Path, limit: int, line_limit: int, what: str | None = None,
               error: type[Exception] = TooLarge, max_lines: int | None = None):
    """(line number, the line as bytes with its newline) of a user's line-oriented file, one at a
    time (the memory is one line): `error` naming the line when one is longer than `line_limit`, or
    the file when it is larger than `limit` bytes or has more than `max_lines` lines. The caller
    builds its result from the lines and keeps nothing of it when this raises."""
    what = what or str(path)
    with open_file(path, what, error) as f:
        n = total = 0
        while True:
            try:
                raw = f.readline(line_limit + 1)
            except OSError as e:
                raise error(f"{what}: {e.strerror or e}") from None
            if not raw:
                return
            n += 1
            total += len(raw)
            if len(raw) > line_limit:
                raise error(f"{what}:{n}: a line longer than {_size(line_limit)}: read no further")
            if total > limit:
                raise error(f"{what}: larger than {_size(limit)}: read no further")
            if max_lines is not None and n > max_lines:
                raise error(f"{what}: more than {max_lines} lines: read no further")
            yield n, raw


def read_tail(path: str | Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log, as text ("" when it is not a regular file or cannot be
    read): a log of gigabytes costs what its end does, a FIFO does not hang."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        return os.pread(fd, limit, max(0, st.st_size - limit)).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


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
        try:
            return read_at_most(r, limit, what, error, deadline=t0 + timeout)
        except TimeoutError:
            raise error(f"{what}: the answer stalled, nothing for {timeout:g} s: read no further") from None
