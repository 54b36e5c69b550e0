"""Bounded input (issue 35 item 5, gtplab/bounded.py): every reader of a file or an HTTP body gtplab does
not control refuses an oversized or endless one in one line, within a memory and a time bound.

One test per kind of reader: a user's file (/dev/zero), a UPF's Prometheus endpoint
(gtplab.dut.prometheus.scrape), the Pushgateway's API answers (gtplab.results.push: its status and
its metrics), eUPF's REST API (gtplab.upftests.harness._get), results files read by `gtplab upftest
table` (gtplab.results.store's line bound). The HTTP server answers 200 and then either far more than
the reader's bound as fast as loopback goes ("oversized", capped at OVERSIZE so a reader without a
bound costs memory, not the host) or one byte every 50 ms for ever ("trickle": each recv is quick, so
only a deadline on the whole body ends it). The bounds are made small for the test (monkeypatch), so
the memory a reader may use is a few MiB.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import tracemalloc

import pytest

from tests.lib import REPO
from tests.lib.http_server import hostile

GTPLAB = str(REPO / ".venv/bin/gtplab")
LIMIT = 1 << 20               # the bound each reader is given here
OVERSIZE = 48 << 20           # what the "oversized" server sends at most: 48 x the bound
PEAK = 4 * LIMIT              # a bounded reader holds the bound and a chunk or two (decode, join)


@pytest.fixture
def server():
    """{mode: base URL}: tests/lib/http_server.hostile's servers (oversized capped at OVERSIZE)."""
    with hostile(OVERSIZE, ("oversized", "trickle")) as urls:
        yield urls


def _bounded(call, seconds: float) -> tuple[BaseException | None, float, int]:
    """(what call raised or None, seconds it took, peak Python memory while it ran); the call runs
    in a thread so a reader without a deadline fails the test instead of hanging it."""
    out: dict = {}

    def run():
        try:
            call()
        except BaseException as e:      # noqa: BLE001 -- returned to the test
            out["e"] = e

    tracemalloc.start()
    t0 = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    took = time.monotonic() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not t.is_alive(), f"still reading after {seconds} s: no deadline on the body"
    return out.get("e"), took, peak


def _one_line_refusal(e, took, peak, kind, seconds):
    assert e is not None, "an oversized or endless body was taken"
    assert isinstance(e, kind), f"{type(e).__name__}: {e}"
    assert "\n" not in str(e) and str(e), repr(str(e))
    assert took < seconds, f"took {took:.1f} s"
    assert peak < PEAK, f"peak memory {peak >> 20} MiB while reading, bound {PEAK >> 20} MiB: read to the end"


def test_a_users_file_dev_zero_is_refused_at_the_bound():
    from gtplab.bounded import TooLarge, read_file
    e, took, peak = _bounded(lambda: read_file("/dev/zero", LIMIT, "bearer file /dev/zero"), 10)
    _one_line_refusal(e, took, peak, TooLarge, 5)
    assert str(e) == "bearer file /dev/zero: larger than 1 MiB: read no further"


@pytest.mark.parametrize("mode", ["oversized", "trickle"])
def test_prometheus_scrape_of_an_endless_body(server, monkeypatch, mode):
    from gtplab.dut import prometheus
    monkeypatch.setattr(prometheus, "SCRAPE_MAX_BYTES", LIMIT, raising=False)
    e, took, peak = _bounded(lambda: prometheus.scrape(server[mode] + "/metrics", timeout=1.0), 8)
    _one_line_refusal(e, took, peak, prometheus.ScrapeError, 4)
    assert ("larger than 1 MiB" if mode == "oversized" else "past its deadline") in str(e)


@pytest.mark.parametrize("mode", ["oversized", "trickle"])
@pytest.mark.parametrize("what", ["status", "metrics"])
def test_pushgateway_answers_that_do_not_end(server, monkeypatch, mode, what):
    from gtplab.results import gateway as push
    for name in ("GATEWAY_STATUS_MAX_BYTES", "GATEWAY_METRICS_MAX_BYTES"):
        monkeypatch.setattr(push, name, LIMIT, raising=False)
    call = {"status": lambda: push.gateway_start_time(server[mode], timeout=1.0),
            "metrics": lambda: push.live_groups(server[mode], timeout=1.0)}[what]
    e, took, peak = _bounded(call, 8)
    _one_line_refusal(e, took, peak, OSError, 4)
    assert f"pushgateway {server[mode]}/api/v1/" in str(e)


@pytest.mark.parametrize("mode", ["oversized", "trickle"])
def test_eupf_rest_api_answer_that_does_not_end(server, monkeypatch, mode):
    from gtplab.upftests import harness
    monkeypatch.setattr(harness, "API_MAX_BYTES", LIMIT, raising=False)
    # the API's own timeout is 5 s: the trickle ends at it
    e, took, peak = _bounded(lambda: harness._get(server[mode] + "/api/v1/pfcp_sessions"), 12)
    _one_line_refusal(e, took, peak, OSError, 8)
    assert "UPF API" in str(e)


def test_upftest_table_of_results_that_are_dev_zero(tmp_path):
    """`gtplab upftest table` on a results directory whose run.json and cases.jsonl are /dev/zero: the
    table's row for it says why (record.table: an unreadable directory is a row of its own), in
    seconds (the store's bound: 16 MiB a file, a line; read no further)."""
    d = tmp_path / "res"
    d.mkdir()
    os.symlink("/dev/zero", d / "run.json")
    os.symlink("/dev/zero", d / "cases.jsonl")
    t0 = time.monotonic()
    p = subprocess.run([GTPLAB, "upftest", "table", str(d)], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 0 and not p.stderr, p
    row = [ln for ln in p.stdout.splitlines() if str(d) in ln]
    assert len(row) == 1 and "run.json: larger than 16 MiB" in row[0], p.stdout
    assert took < 20, f"{took:.1f} s"
