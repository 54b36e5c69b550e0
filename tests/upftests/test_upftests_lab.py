"""Each UPF behaviour test kind run briefly in the namespace lab: against the PGW-U (embedded-pfcp,
its agent `pgwu pfcp`) and against eUPF (embedded-eupf; skipped, with the reason, when its runtime
is absent). What is asserted is what holds whatever the UPF enforces: every case is decided from
what was measured (its figures recomputed give its verdict), a rejection is "not supported" with the
UPF's Cause, never a timeout; and, for the PGW-U, what it does today (it answers the rules; until
its enforcement lands, policing above the MBR and End Markers fail, with figures)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time

import pytest

from gtplab.lab import config as labconfig
from gtplab.lab import topology
from gtplab.upftests import criteria as C
from gtplab.upftests import handover, n4, policing, usage
from gtplab.upftests.harness import Upf
from tests.lib import REPO
from tests.lib import external_upf as X
from tests.lib.lab import leftovers
from tests.lib.monitor_stack import dashboards, panel_queries, prom_query, running_stack

pytestmark = [pytest.mark.lab]
GTPLAB = str(REPO / ".venv/bin/gtplab")


def _configs():
    return [pytest.param("embedded-pfcp", id="pgwu"),
            pytest.param("embedded-eupf", id="eupf", marks=pytest.mark.eupf),
            pytest.param("embedded-open5gs", id="open5gs", marks=pytest.mark.open5gs)]


def _open(name):
    cfg = labconfig.load(name) if name == "embedded-pfcp" else X.lab_config(name)
    return Upf.open(cfg)


@pytest.mark.parametrize("name", _configs())
def test_policing_cases_are_decided_from_their_figures(name):
    with _open(name) as upf:
        lab = upf.lab.name
        cases = policing.run(upf, factors=(0.5, 2.0), mbrs_mbps=(2, 4), duration=2.0, bursts=(1, 32))
    assert leftovers(lab) == []
    if any(c["verdict"] == "not supported" for c in cases):
        assert all("cause" in c and "rejected with cause" in c["why"] for c in cases if c["verdict"] == "not supported")
        return
    rates = [c for c in cases if c.get("factor") and not c["case_id"].startswith("policing-isolation")]
    # sessions x directions x (loads x bursts + the minimum burst at the load below the MBR)
    assert len(rates) == 2 * 2 * (2 * 2 + 1)
    for c in rates:
        again = C.policing(c["factor"], c["mbr_bps"], c["tx_packets"], c["rx_packets"], c["delivered_bps"],
                           offered_bps=c["offered_bps"], burst_bytes=c["burst_bytes"])
        assert again["verdict"] == c["verdict"], c
        assert c["tx_packets"] > 0
        # what left back to back: at least the burst asked for (the engine's own count)
        assert c["max_burst"] >= c["burst"], c
        assert c["burst_bytes"] == max(c["burst"], c["max_burst"]) * c["l3_bytes"]
    assert {c["burst"] for c in rates if c["burst_role"] == "swept"} == {1, 32}
    # a case that lost packets says where its trial's went (the DUT's receive ring, the UPF's drops)
    for c in rates:
        if c["tx_packets"] > c["rx_packets"]:
            assert c["loss_where"]["trial_lost"] >= c["tx_packets"] - c["rx_packets"], c
    if name == "embedded-pfcp":     # what the PGW-U's policer drops above the MBR is its own drop_mbr
        assert all(c["loss_where"]["upf_drops_by_reason"].get("drop_mbr", 0) > 0
                   for c in rates if c["factor"] == 2.0)
    if name == "embedded-open5gs":  # Open5GS 8f25f3b enforces no MBR: far more than it is delivered
        assert all(c["verdict"] == "fail" and c["delivered_bps"] > 1.25 * c["mbr_bps"]
                   for c in rates if c["factor"] == 2.0), [(c["case_id"], c["verdict"], c.get("why"), c["delivered_bps"], c["mbr_bps"]) for c in rates]
    assert {c["burst"] for c in rates if c["burst_role"] == "minimum"} == \
        {policing.min_burst_packets(c["l3_bytes"]) for c in rates}
    tol = [c for c in cases if c["case_id"].startswith("policing-burst-tolerance")]
    assert len(tol) == 2 * 2
    for c in tol:
        mine = [r for r in rates if r["session"] == c["session"] and r["direction"] == c["direction"]
                and r["factor"] <= C.NO_LOSS_FACTOR]
        again = C.burst_tolerance([{"burst_bytes": r["burst"] * r["l3_bytes"], "burst_packets": r["burst"],
                                    "tx_packets": r["tx_packets"], "rx_packets": r["rx_packets"],
                                    "max_burst": r["max_burst"]} for r in mine], c["mbr_bps"])
        assert again["verdict"] == c["verdict"] and again["tolerance_bytes"] == c["tolerance_bytes"], c
    gate = [c for c in cases if c["case_id"].startswith("policing-gate")]
    assert len(gate) == 2 and all(c["tx_packets"] > 0 for c in gate)
    if name == "embedded-open5gs":  # nor a closed gate: every packet passes it
        assert all(c["verdict"] == "fail" and c["rx_packets"] == c["tx_packets"] for c in gate), gate
    iso = [c for c in cases if c["case_id"].startswith("policing-isolation")]
    assert len(iso) == 2
    for c in iso:
        assert C.isolation(c["alone_bps"], c["delivered_bps"], c["alone_offered_bps"])["verdict"] == c["verdict"]


@pytest.mark.parametrize("name", _configs())
def test_handover_accounts_for_every_downlink_packet(name):
    with _open(name) as upf:
        cases = handover.run(upf, pps=2000, duration=2.0)
    assert [c["case_id"] for c in cases] == ["handover-s0-noqfi", "handover-s1-qfi"] or \
        all(c["verdict"] == "not supported" for c in cases)
    for c in cases:
        if c["verdict"] == "not supported":
            continue
        assert c["received_unique"] + c["missing"] == c["tx_packets"] > 0
        assert c["switch_ms"] is not None or "no packet on the new path" in c["why"]
        if name == "embedded-pfcp":
            # the PGW-U switches the path without loss or duplicates (its End Marker: branch upf-enforce)
            assert c["missing"] == 0 and c["duplicates"] == 0, c


@pytest.mark.parametrize("name", _configs())
def test_usage_reports_are_compared_with_the_generator(name):
    with _open(name) as upf:
        cases = usage.run(upf, duration=2.5)
    ids = {c["case_id"] for c in cases}
    assert {"usage-deletion", "usage-periodic", "usage-quota", "usage-dropped"} <= ids
    dele = next(c for c in cases if c["case_id"] == "usage-deletion")
    if dele["verdict"] != "not supported":
        assert dele["generator"]["ul_packets"] > 0 and dele["reports"], dele
        if name == "embedded-pfcp":
            assert dele["verdict"] == "pass", dele          # its report at deletion is exact today
    if name == "embedded-open5gs":
        # Open5GS 8f25f3b: its reports at deletion and at the volume threshold, and of dropped
        # traffic, hold; it answers no Query URR, sends no periodic or time-threshold report and
        # does not stop traffic at the quota
        got = {c["case_id"]: (c["verdict"], c.get("why", "")) for c in cases}
        assert {k: v[0] for k, v in got.items()} == {
            "usage-deletion": "pass", "usage-query": "fail", "usage-periodic": "fail", "usage-volth": "pass",
            "usage-quota": "fail", "usage-timth": "fail", "usage-dropped": "pass"}, got
        assert "no Usage Report in the answer to Query URR" in got["usage-query"][1]
        assert "quota" in got["usage-quota"][1] and "no report" in got["usage-timth"][1]


def test_n4_and_the_command_line_write_results(tmp_path):
    """`gtplab upftest handover --push` end to end (results directory, report, exit status, the
    Pushgateway read by a real Prometheus: the verdict and handover panels of dashboards/upftests.json
    return data), and the N4 kind in a short form against the PGW-U: every request answered,
    latencies measured."""
    out = tmp_path / "ho"
    with running_stack(tmp_path) as stack:
        p = subprocess.run([GTPLAB, "upftest", "handover", "--lab-config", "embedded-pfcp", "-o", str(out),
                            "--push", stack.gateway], capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), p.stderr
        d = {k: v for k, v in dashboards().items() if k == "upftests.json"}
        want = [e for w, e in panel_queries(d) if "policing" not in e and "n4" not in e]
        assert len(want) == 3
        fails = [e for e in want if e.endswith("< 1")]
        assert len(fails) == 1
        if p.returncode == 0:       # every case passed: the panel of cases that did not pass stays empty
            want = [e for e in want if e not in fails]
        deadline, empty = time.monotonic() + 30, want
        while empty and time.monotonic() < deadline:
            empty = [e for e in want if not prom_query(stack.prometheus, e)]
            time.sleep(0.5)
        assert not empty, f"upftests.json panel queries without data after a real push: {empty}"
        if p.returncode == 0:       # checked once the other panels have the pushed data
            assert prom_query(stack.prometheus, fails[0]) == [], fails
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "upftest" and run["test"] == "handover" and run["upf"] == "PGW-U"
    assert (out / "report.md").read_text().count("| handover-s") == 2 and (out / "report/index.html").is_file()
    assert ("pass" if p.returncode == 0 else "fail") == run["summary"]["verdict"]
    t = subprocess.run([GTPLAB, "upftest", "table", str(out)], capture_output=True, text=True, timeout=60)
    assert t.returncode == 0 and "| PGW-U |" in t.stdout
    with _open("embedded-pfcp") as upf:
        cases = n4.run(upf, load_pps=20_000, soak_s=4)
    lat = [c for c in cases if c["case_id"] != "n4-churn-soak"]
    assert len(lat) == 6 and all(c["p50_ms"] is not None and c["p99_ms"] >= c["p50_ms"] for c in lat)
    soak = cases[-1]
    assert soak["cycles"] >= 2 and soak["untouched_tx"] > 0
    # the PGW-U's bearer table holds the 4 untouched sessions after each cycle, none at the end
    assert soak["upf_sessions"]["untouched"] == 4 and soak["upf_sessions"]["after"] == 0, soak


def _upftest_until(out, first: str, *args):
    """`gtplab upftest ... -o out` started; returns (the process, its stderr lines up to the first
    that starts with `first`)."""
    p = subprocess.Popen([GTPLAB, "upftest", *args, "-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        line = p.stderr.readline()
        if not line and p.poll() is not None:
            break
        seen.append(line)
        if line.startswith(first):
            return p, seen
    p.kill()
    p.wait()
    pytest.fail(f"no {first!r} line from upftest:\n" + "".join(seen))


def _lab_of(out) -> str:
    """The lab's name as run.json says (written once the lab is up)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            lab = json.loads((out / "run.json").read_text()).get("lab")
            if lab:
                return lab
        time.sleep(0.1)
    pytest.fail("run.json never named the lab")


def _cleanup(lab: str, agents: list[int]) -> None:
    """What a failed test leaves: the lab (gtplab lab down) and the agents found on its pins."""
    if lab and leftovers(lab):
        subprocess.run([GTPLAB, "lab", "down", "--name", lab], capture_output=True, timeout=120)
    for pid in agents:
        with contextlib.suppress(ProcessLookupError):
            if topology._is_pgwu(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_mid_run_tears_down_the_lab_and_the_agent_and_keeps_the_cases(tmp_path):
    """SIGTERM (a `timeout`, a CI cancel) once the first cases are written: exit 143, run.json
    "interrupted" with the cases done, which cases.jsonl holds; no lab and no `pgwu pfcp` agent
    left (issue 35)."""
    out = tmp_path / "pol"
    p, seen = _upftest_until(out, "[1/", "policing", "--lab-config", "embedded-pfcp", "--bursts", "1")
    lab, agents = _lab_of(out), []
    try:
        pins = f"/sys/fs/bpf/gtplab-{lab}"
        agents = topology._pgwu_on_pins(pins)
        assert agents, "the run's `pgwu pfcp` agent was not found on its lab's pins"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 143, "".join(seen) + err
        assert "Traceback" not in err and "terminated (SIGTERM)" in err
        run = json.loads((out / "run.json").read_text())
        assert run["status"] == "interrupted" and run["interrupted"]["signal"] == "SIGTERM", run
        n = len((out / "cases.jsonl").read_text().splitlines())
        assert 1 <= run["cases_done"] == n < run["cases_planned"], run
        assert leftovers(lab) == [] and topology._pgwu_on_pins(pins) == []
        assert not any(topology._alive(a) for a in agents)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        _cleanup(lab, agents)


def test_lab_down_after_a_killed_run_ends_its_pgwu_agent(tmp_path):
    """SIGKILL leaves everything (no handler runs): `gtplab lab down --name LAB` then removes the
    lab and ends the `pgwu ... pfcp --listen 127.0.0.1:0` agent the run started (issue 35)."""
    out = tmp_path / "ho"
    p, _ = _upftest_until(out, "gtplab upftest handover:", "handover", "--lab-config", "embedded-pfcp")
    lab, agents = _lab_of(out), []
    try:
        pins = f"/sys/fs/bpf/gtplab-{lab}"
        agents = topology._pgwu_on_pins(pins)
        assert agents, "the run's `pgwu pfcp` agent was not found on its lab's pins"
        p.kill()
        p.wait()
        d = subprocess.run([GTPLAB, "lab", "down", "--name", lab], capture_output=True, text=True, timeout=120)
        assert d.returncode == 0, d.stderr
        assert topology._pgwu_on_pins(pins) == [] and not any(topology._alive(a) for a in agents)
        assert leftovers(lab) == []
        # run.json says the run started and never said how it ended: the table calls it cut short
        t = subprocess.run([GTPLAB, "upftest", "table", str(out)], capture_output=True, text=True, timeout=60)
        assert t.returncode == 0 and "cut short (no end recorded) after 0 of 2 cases" in t.stdout, t.stdout + t.stderr
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        _cleanup(lab, agents)
