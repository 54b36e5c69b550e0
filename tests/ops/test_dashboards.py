"""The Grafana dashboards (dashboards/): generated JSON in step with the generator, valid dashboard JSON
tied to the provisioned datasource, every query valid PromQL (promtool), and every panel query
returning data from a real Prometheus after results are pushed (the local stack on random ports).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from gtplab.dut.dataplane import pgwu_binary
from gtplab.upftests import record as upftest_record
from tests.lib.monitor_stack import (DASHBOARD_DIR, SWEEP, all_panels, dashboards, free_ports, make_case,
                                     make_run, panel_queries, prom_query, running_stack, substitute,
                                     variable_selectors)
from tests.lib import REPO

PROVISIONING = DASHBOARD_DIR / "provisioning"
# a synthetic `gtplab upftest` push: a case with each figure a panel of dashboards/upftests.json shows
UPFTEST_RUN = ({"uuid": "upftest-synthetic", "upf": "PGW-U", "test": "policing"}, [
    {"case_id": "policing-s0-uplink-512-x2-b8", "verdict": "pass", "delivered_bps": 2.01e6, "mbr_bps": 2e6,
     "frame_size": 512, "burst": 8},
    {"case_id": "policing-burst-tolerance-s0-uplink-512", "verdict": "pass", "tolerance_bytes": 14656,
     "tolerance_ms": 58.6, "frame_size": 512},
    {"case_id": "policing-gate-uplink", "verdict": "fail"}])
UPFTEST_MORE = [({"uuid": "upftest-synthetic-h", "upf": "PGW-U", "test": "handover"},
                 [{"case_id": "handover-s0-noqfi", "verdict": "fail", "switch_ms": 12.5},
                  {"case_id": "handover-s1-qfi", "verdict": "not decided",
                   "why": "not decided: the Update FAR was answered after the traffic had ended"}]),
                ({"uuid": "upftest-synthetic-n", "upf": "PGW-U", "test": "n4"},
                 [{"case_id": "n4-establishment-idle", "verdict": "pass", "p99_ms": 3.2}])]
PGWU_BIN = pgwu_binary()


def provisioned_datasource() -> dict:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    (ds,) = doc["datasources"]
    return ds


def test_committed_json_is_what_the_generator_writes(tmp_path):
    cp = subprocess.run([sys.executable, str(DASHBOARD_DIR / "generate.py"), "--out-dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    generated = sorted(p.name for p in tmp_path.glob("*.json"))
    committed = sorted(p.name for p in DASHBOARD_DIR.glob("*.json"))
    assert generated == committed == ["dut.json", "live.json", "sweep-results.json", "upftests.json"]
    for name in generated:
        assert (tmp_path / name).read_bytes() == (DASHBOARD_DIR / name).read_bytes(), \
            f"dashboards/{name} differs from the generator: run dashboards/generate.py"
    cp = subprocess.run([sys.executable, str(DASHBOARD_DIR / "generate.py"), "--check"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr


def test_provisioning_files():
    ds = provisioned_datasource()
    assert ds["type"] == "prometheus" and ds["uid"] == "gtplab-prometheus"
    assert ds["url"] == "http://127.0.0.1:19090"  # gtplab monitor up's default Prometheus
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "gtplab.yaml").read_text())
    (prov,) = doc["providers"]
    assert doc["apiVersion"] == 1 and prov["type"] == "file" and prov["options"]["path"]


@pytest.mark.parametrize("name", ["sweep-results.json", "dut.json", "live.json"])
def test_dashboard_json_is_valid(name):
    uid = provisioned_datasource()["uid"]
    d = dashboards()[name]
    assert d["uid"].startswith("gtplab-") and d["title"] and isinstance(d["schemaVersion"], int)
    panels = all_panels(d)
    assert len(panels) >= 5
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids {ids}"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy"), p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["type"] in ("timeseries", "barchart", "stat", "table"), p["type"]
        assert p["datasource"] == {"type": "prometheus", "uid": uid}, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"]["uid"] == uid
    for v in d["templating"]["list"]:
        assert v["type"] == "query" and v["datasource"]["uid"] == uid
    assert any(v["name"] == "uuid" for v in d["templating"]["list"])


def _promtool_rules(tmp_path: Path, exprs: list[tuple[str, str]]) -> subprocess.CompletedProcess:
    rules = {"groups": [{"name": "gtplab_dashboards", "rules": [
        {"record": f"gtplab_dashboard_query_{i}", "expr": expr, "labels": {"where": where[:200]}}
        for i, (where, expr) in enumerate(exprs)]}]}
    path = tmp_path / "dashboard-queries.rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)


def test_every_query_is_valid_promql(tmp_path):
    d = dashboards()
    exprs = [(w, substitute(e, "some-run")) for w, e in panel_queries(d) + variable_selectors(d)]
    assert len(exprs) >= 30
    cp = _promtool_rules(tmp_path, exprs)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert f"{len(exprs)} rules found" in cp.stdout
    # the check does catch a bad query
    bad = _promtool_rules(tmp_path, exprs + [("broken", "sum by (cpu (rate(x[1m]))")])
    assert bad.returncode != 0


# ---- against the real stack --------------------------------------------------------------------

def _pgwu_metric_queries(queries):
    return [(w, e) for w, e in queries if "pgwu_" in e]


def _wait_all_return_data(prometheus: str, queries: list[tuple[str, str]], timeout: float) -> list[str]:
    """Poll until every query returns at least one series; returns those that never did."""
    deadline = time.monotonic() + timeout
    pending = list(queries)
    while pending and time.monotonic() < deadline:
        pending = [(w, e) for w, e in pending if not prom_query(prometheus, e)]
        if pending:
            time.sleep(0.5)
    return [f"{w}: {e}" for w, e in pending]


@pytest.fixture(scope="module")
def pgwu_exporter():
    """`pgwu load` in a unique pin dir + `pgwu metrics` on a free port, with a little traffic through
    BPF_PROG_TEST_RUN (drops and passes) so the rate panels have something to show.
    Yields the exporter's port, or None and the reason (the test then fails with it)."""
    pin = f"/sys/fs/bpf/gtplab-mon-{secrets.token_hex(4)}"
    (port,) = free_ports(1)
    proc = None
    stop = threading.Event()
    worker = None
    try:
        if not os.access(PGWU_BIN, os.X_OK):
            yield None, f"{PGWU_BIN} is not built"
            return
        try:
            cp = subprocess.run([str(PGWU_BIN), "-d", pin, "load", "--max-bearers", "4096"], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            yield None, "`pgwu load` did not finish in 30 s"
            return
        if cp.returncode != 0 or not os.path.exists(f"{pin}/xdp_access"):
            yield None, f"`pgwu load` did not pin {pin}/xdp_access (rc {cp.returncode}: {cp.stderr.strip()})"
            return
        proc = subprocess.Popen([str(PGWU_BIN), "-d", pin, "metrics", "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        if "pgwu_packets_total" not in text:
            yield None, f"`pgwu metrics` did not serve pgwu_packets_total on 127.0.0.1:{port}"
            return

        from gtplab.kernel import bpf
        prog = bpf.Prog.pinned(f"{pin}/xdp_access")
        eth = b"\x02\x00\x00\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x02" + b"\x08\x00"
        bad_ihl = eth + struct.pack("!BBHHHBBH4s4s", 0x44, 0, 20, 0, 0, 64, 17, 0,
                                    bytes([192, 0, 2, 9]), bytes([192, 0, 2, 1])) + bytes(26)
        arp = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x02" + b"\x08\x06" + bytes(46)

        def traffic():
            while not stop.wait(0.05):
                for pkt in (bad_ihl, arp):
                    prog.test_run(pkt, repeat=50)
        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        yield port, ""
    finally:
        stop.set()
        if worker:
            worker.join(timeout=5)
        if proc and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        if os.path.exists(pin):
            subprocess.run([str(PGWU_BIN), "-d", pin, "unload"], capture_output=True, timeout=60)
        if os.path.isdir(pin):
            shutil.rmtree(pin, ignore_errors=True)


@pytest.fixture(scope="module")
def pushed_stack(tmp_path_factory, pgwu_exporter):
    """The local stack (pgwu target = the exporter above, if any) with one synthetic sweep pushed."""
    from gtplab.results.push import Pusher
    port, _ = pgwu_exporter
    with running_stack(tmp_path_factory.mktemp("monitor"), pgwu_port=port) as stack:
        run = make_run()
        warnings = []
        pusher = Pusher(stack.gateway, run, warn=warnings.append)
        cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
        for i, case in enumerate(cases):
            assert pusher.case_started(case, index=i, total=len(cases))
            assert pusher.push(case)
        # the sweep leaves the last "running case" in place only while it runs; keep it for the live panels
        assert pusher.case_started(cases[-1], index=len(cases), total=len(cases))
        assert warnings == []
        # and UPF behaviour test results (gtplab upftest --push), for dashboards/upftests.json
        for r, cs in [UPFTEST_RUN] + UPFTEST_MORE:
            assert upftest_record.push(stack.gateway, r, cs) == len(cs)
        yield stack, run


def test_every_panel_query_returns_data(pushed_stack):
    stack, run = pushed_stack
    d = dashboards()
    queries = [(w, substitute(e, run["uuid"])) for w, e in panel_queries(d) + variable_selectors(d)]
    others = [q for q in queries if q not in _pgwu_metric_queries(queries)]
    assert len(others) >= 20
    empty = _wait_all_return_data(stack.prometheus, others, timeout=45)
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
    # the numbers are the pushed ones: 64-byte uplink received 0.9 Mpps in make_case
    (r,) = prom_query(stack.prometheus, substitute(
        'max by (direction, frame_size) (gtplab_case_received_packets_per_second{uuid="$uuid", '
        'action=~"$action", frame_size="64", direction="uplink"}) / 1e6', run["uuid"]))
    assert float(r["value"][1]) == pytest.approx(0.9)


@pytest.mark.bpf
def test_pgwu_panel_queries_return_data(pushed_stack, pgwu_exporter):
    port, why = pgwu_exporter
    # pgwu is part of the project, not an optional component: a broken `pgwu load` or `pgwu metrics`
    # is a failure here, never a skip
    assert port is not None, f"no pgwu metrics exporter: {why}"
    stack, run = pushed_stack
    d = dashboards()
    queries = _pgwu_metric_queries([(w, substitute(e, run["uuid"])) for w, e in panel_queries(d) + variable_selectors(d)])
    assert len(queries) >= 5
    empty = _wait_all_return_data(stack.prometheus, queries, timeout=45)
    assert not empty, "pgwu panel queries without data:\n" + "\n".join(empty)


def _unbalanced_trials(rdir: Path) -> str:
    """The trials whose conservation failed, with their errors and whether the counters had settled:
    what to look at when the sweep exits 1 on "unexplained packet counts"."""
    out = []
    try:
        for line in (rdir / "cases.jsonl").read_text().splitlines():
            c = json.loads(line)
            for t in c.get("trials") or []:
                cons = t.get("conservation") or {}
                if cons and not cons.get("ok"):
                    out.append(f"{c.get('case_id')} {t.get('phase')} {t.get('rate_asked')}: {cons.get('errors')} "
                               f"places {cons.get('places')} settle {t.get('settle')} host {t.get('host')}")
    except (OSError, ValueError) as e:
        out.append(f"(cases not read: {e})")
    return "\nunbalanced trials:\n" + "\n".join(out) if out else ""


# the series a goal pushes only with a lower bound (push_metrics.search_gauges: a None is not pushed),
# and the latency measured at shares of the PDR, which needs one
NEED_A_BOUND = ("gtplab_case_goal_lower_bound_packets_per_second", "gtplab_case_goal_conditional_throughput",
                "gtplab_case_latency_at_pdr_seconds")


def _skip_when_no_case_found_a_bound(rdir: Path, without_data: list[str]) -> None:
    """Undecidable, not failed: when no goal of any case found a lower bound (the generator sent short
    even at min load on a busy host: the search's min load is then an upper bound), the panels of the
    bounds have nothing to show whatever the dashboards say. Skipped with the cases' figures, only
    when those are all the queries without data."""
    if not without_data or not all(any(k in m for k in NEED_A_BOUND) for m in without_data):
        return
    cases = [json.loads(x) for x in (rdir / "cases.jsonl").read_text().splitlines() if x.strip()]
    if any(g.get("lower_pps") for c in cases for g in (c.get("goals") or {}).values()):
        return
    notes = "; ".join(f"{c.get('direction')} {c.get('frame_size')} B: limit {c.get('limit')}, "
                      + " / ".join(n for n in c.get("notes") or [] if "bound" in n or "host busy" in n)[:400]
                      for c in cases)
    pytest.skip(f"undecided: no goal of the sweep's {len(cases)} cases found a lower bound, so "
                f"{len(without_data)} panel queries of bounds have no data: {notes}")


@pytest.mark.lab           # a real sweep: namespaces, veths, XDP (its marker had slipped onto the helper above)
def test_every_panel_query_returns_data_from_a_real_sweep(tmp_path):
    """A real short `gtplab sweep` on the embedded lab, pushing to the local stack while Prometheus
    scrapes the lab DUT's `pgwu metrics` and node-exporter: every panel query and variable selector of
    every dashboard returns data from the real Prometheus, the live ones while the sweep runs."""
    (pgwu_port,) = free_ports(1)
    with running_stack(tmp_path, pgwu_port=pgwu_port) as stack:
        rdir = tmp_path / "sweep"
        proc = subprocess.Popen(
            [sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--sizes", "128,512", "--flows", "64",
             # the panels, not the search, are tested here: both bounds of a goal whatever the host
             # does: a max load no trial carries (3 Mpps: an upper bound at once), a goal that takes
             # 10 % loss (a lower bound even where a busy host loses packets at 10 kpps: the suite's
             # labs share CPUs), trials the host disturbed counted, and the latency at its shares
             "--rate-mode", "search", "--search", "max_load=3000000,latency_duration=0.5,disturbed=count",
             "--goals", "[ndr, {preset: pdr, loss_ratio: 0.1}]",
             "--pcap-limit", "0", "--pushgateway", stack.gateway, "--pgwu-metrics", f"127.0.0.1:{pgwu_port}",
             "--out", str(rdir)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not (rdir / "run.json").exists():
                assert proc.poll() is None, f"the sweep ended early: {proc.communicate()[1][-3000:]}"
                assert time.monotonic() < deadline, "the sweep wrote no run.json in 120 s"
                time.sleep(0.2)
            uuid = json.loads((rdir / "run.json").read_text())["uuid"]
            # a sweep pushes no UPF behaviour test: dashboards/upftests.json is checked with a real
            # `gtplab upftest --push` in tests/upftests/test_upftests_lab.py
            d = {k: v for k, v in dashboards().items() if k != "upftests.json"}
            queries = {(w, substitute(e, uuid)) for w, e in panel_queries(d) + variable_selectors(d)}
            assert len(queries) >= 25
            seen: set = set()
            while proc.poll() is None:
                seen |= {q for q in queries - seen if prom_query(stack.prometheus, q[1])}
                time.sleep(0.5)
            out, err = proc.communicate()
            assert proc.returncode == 0, err[-3000:] + _unbalanced_trials(rdir)
            missing = queries - seen
            missing = [f"{w}: {e}" for w, e in missing]
            # what is not live must (also) be there after the sweep
            rest = _wait_all_return_data(stack.prometheus, [tuple(m.split(": ", 1)) for m in missing
                                                            if "sweep_running" not in m], timeout=30)
            live_missing = [m for m in missing if "sweep_running" in m]
            _skip_when_no_case_found_a_bound(rdir, rest + live_missing)
            assert not rest and not live_missing, "panel queries without data:\n" + "\n".join(rest + live_missing)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
