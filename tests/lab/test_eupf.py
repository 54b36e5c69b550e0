"""eUPF (edgecomllc/eupf a8d774a, ../shared/eupf/) as the DUT of the namespace lab, as the lab config
embedded-eupf runs it (gtplab/lab/external.py): with its default heartbeat settings (3 x 5 s),
provisioned by gtplab over PFCP from the lab's control-plane namespace with and without CHOOSE
(its feature_ftup), the sessions held past its heartbeat dead time by `gtplab pfcp` (exit 0), an
NDR sweep through it whose every trial balances (the UPF's verdicts, the kernel's count of them, the
veths' ring losses both ways), the sessions deleted and the association ended at the end. Skipped,
with the reason, when eUPF's runtime is absent. Its packets, byte for byte:
tests/dataplane/test_suite_correctness.py.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import pytest

from gtplab.dut.external import ExternalDut
from gtplab.gtpu import packets
from gtplab.measure import conservation
from gtplab.measure.plan import CaseParams
from gtplab.measure.runner import Runner
from gtplab.traffic import backend
from tests.lib import REPO, UNDECIDED
from tests.lib import eupf as E
from tests.lib.lab import leftovers

pytestmark = [pytest.mark.lab, pytest.mark.eupf]

GTPLAB = str(REPO / ".venv/bin/gtplab")
HOLD_S = 35            # > 30 s: twice eUPF's dead time for an unanswered CP (3 heartbeats x 5 s)


def uplink_teids(sessions: list[dict]) -> list[int]:
    """The uplink F-TEIDs of eUPF's sessions (the PDR with a TEID), sorted."""
    return sorted(p["Teid"] for s in sessions for p in s["PDRs"].values() if p.get("Teid"))


@pytest.mark.parametrize("ftup", ["false", "true"])
def test_eupf_provisioned_over_pfcp_forwards_every_packet_both_ways(ftup, tmp_path):
    """feature_ftup false (eUPF's default): it says FTUP 0, `choose: auto` gives gtplab's TEIDs;
    true: FTUP 1, it chooses them (CHOOSE) and the uplink sends the ones it chose (--teid-file).
    Either way its sessions are the bearers (its API lists their TEIDs), and a trial each way at a
    rate it keeps up with is forwarded packet for packet: none passed to the kernel (what an unknown
    TEID or UE would be), none dropped, every packet of the trial accounted for, its verdicts the
    kernel's."""
    cfg = E.lab_config(tmp_path, feature_ftup=ftup)
    be = backend.choose(cfg).open()
    try:
        lab = be.lab
        with Runner(be, cfg) as r:
            assert r.dut.kind == "external" and isinstance(r.dut.inner, ExternalDut)
            assert r.dut.cfg.choose is (ftup == "true")          # resolved at association from FTUP
            for direction in ("uplink", "downlink"):
                prep = r.prepare(CaseParams(direction=direction, frame_size=128, flows=16, latency=False))
                got = E.sessions(lab)
                assert len(got) == 16
                provisioned = [int(ln.split()[0], 16) for ln in Path(r.dut.teid_file).read_text().splitlines()
                               if ln.strip() and not ln.startswith("#")]
                assert uplink_teids(got) == sorted(provisioned)
                # the uplink sends the TEIDs in force: from the bearer file eUPF returned when it chose
                chose = ftup == "true"
                assert sorted(provisioned) == (list(range(1, 17)) if chose else [0x10000 + i for i in range(16)])
                if direction == "uplink":
                    assert bool(prep.tunables.get("teid_file")) is chose
                t = r.trial(prep, 20_000, 0.3)
                c, dut = t["conservation"], t["dut"]
                assert c["ok"], c["errors"]
                assert c["dut_rx_source"] == "ingress interface" and c["link_in_lost"] is not None
                assert dut["passed_by_reason"] == {} and dut["drops_by_reason"] == {}, dut
                assert dut["fwd_packets"] == dut["rx_packets"] > 0
                assert dut["ns_per_packet"] is None or dut["ns_per_packet"] > 0
    finally:
        be.close()
    assert leftovers(lab.name) == []


def _burst(lab, client, dut, teids: list[int], copies: int = 4) -> conservation.DutDelta:
    """copies uplink G-PDUs to each bearer (TEID i -> UE i), sent by the engine; the DUT's deltas."""
    a, p0 = lab.addressing, lab.ports[0]
    streams = []
    for i, teid in enumerate(teids):
        f = packets.gpdu(teid, a.ue(i), a.pdn(i), size=128, outer_src=a.sgw(i % 4), outer_dst=a.dut_access,
                         src_mac=p0.mac, dst_mac=p0.dut_mac)
        streams.append({"mode": {"type": "single_burst", "total_pkts": copies, "rate": {"type": "pps", "value": 1000}},
                        "isg": 0.0, "packet": {"binary": base64.b64encode(bytes(f)).decode(), "meta": ""},
                        "vm": {"instructions": []}, "flow_stats": {"enabled": False}})
    client.reset()
    client.add_streams(streams, ports=[0])
    c0 = dut.counters()
    client.start(ports=[0])
    client.wait_on_traffic(ports=[0], timeout=30, rx_delay_ms=100)
    return conservation.DutDelta.from_counters(c0, dut.counters())


@pytest.mark.timing        # eUPF's heartbeat period (5 s) against HOLD_S
def test_gtplab_pfcp_holds_eupf_sessions_past_its_heartbeat_timeout_and_exits_0(tmp_path):
    """`gtplab pfcp --lab` against eUPF with its defaults (heartbeats every 5 s, the association and
    its sessions dropped after 3 unanswered): gtplab's node answers them on 8805 of its N4 address,
    so HOLD_S s later the sessions are all there and forward; then deleted (eUPF has none left), the
    release eUPF ignores waited for once (release_wait), exit 0."""
    from gtplab.lab.topology import Lab
    from gtplab.traffic.backend import engine_client
    cfg = E.lab_config()
    lab = Lab.up(dut="external", external_spec=cfg.external_spec())
    client = dut = proc = None
    try:
        out = tmp_path / "provisioned.txt"
        hb0 = E.metric(lab, 'upf_pfcp_rx{message_name="Heartbeat Response"}', default=0)   # none before the first
        t0 = time.monotonic()
        proc = subprocess.Popen([GTPLAB, "pfcp", "--lab", lab.name, "--lab-config", "embedded-eupf",
                                 "-t", "flows=8,sgws=4", "-o", str(out), "--duration", str(HOLD_S)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        client = engine_client(lab)
        client.connect()
        dut = ExternalDut(lab, cfg)
        deadline = t0 + HOLD_S - 4
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        held = time.monotonic() - t0
        assert held > 30
        got = E.sessions(lab)
        teids = [int(ln.split()[0], 16) for ln in out.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert len(got) == 8 and uplink_teids(got) == sorted(teids) == [0x10000 + i for i in range(8)]
        assert E.api(lab, "/api/v1/pfcp_associations")       # still associated
        # eUPF's heartbeats, answered by gtplab: one every 5 s since the association
        answered = E.metric(lab, 'upf_pfcp_rx{message_name="Heartbeat Response"}') - hb0
        assert answered >= 5, answered
        dd = _burst(lab, client, dut, teids)
        assert dd.fwd_packets == 4 * 8 and not dd.passed_by_reason and not dd.drops_by_reason, dd
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
        assert "sessions deleted, association ended" in stderr
        assert "association release request (seq" in stderr and "after 1 send, T1 1 s, N1 0" in stderr
        assert E.sessions(lab) == []                           # every deletion found its session
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(30)
        if client:
            client.disconnect()
        if dut:
            dut.close()
        lab.down()


@pytest.fixture(scope="module")
def eupf_sweep(tmp_path_factory):
    """`gtplab sweep --lab-config embedded-eupf` (what docs/lab.md tells a new user), 2 sizes x 2
    directions: (its results directory, run.json, the case records)."""
    E.lab_config()              # skips, with the reason, without eUPF's runtime
    out = tmp_path_factory.mktemp("eupf-sweep") / "run"
    p = subprocess.run([GTPLAB, "sweep", "--lab-config", "embedded-eupf", "--sizes", "64,1424", "--flows", "64",
                        "--max-trials", "10", "--no-scale", "--no-latency", "--pcap-limit", "8",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "CONSERVATION FAILED" not in p.stderr
    run = json.loads((out / "run.json").read_text())
    cases = [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines()]
    return out, run, cases


# both timing: the sweep they share is a search, made by whichever of them runs first
@pytest.mark.timing
def test_ndr_sweep_through_eupf_every_trial_balances(eupf_sweep):
    """The sweep exits 0 with a report, and in every trial, lossy ones included, every packet is
    accounted for: the generator's tx is the DUT's ingress count plus the ring losses in, eUPF's
    verdicts add up to what it received and agree with the kernel's count of them, what it forwarded
    is what came back plus the ring losses out. So each trial's loss is exactly its ring and drop
    counters, and the ring losses are read at all (with eUPF's counters alone they were not, issue
    22). The sessions were deleted (a failed deletion fails the run) and the association ended (a
    warning: eUPF ignores it)."""
    out, run, cases = eupf_sweep
    assert (out / "report" / "index.html").is_file()
    assert run["dut_mode"] == "external" and run["dut_counters"] == "eupf" and run["finished"]
    assert run["conservation_failures"] == 0 and run["cases_done"] == 4
    assert any(n.startswith("PFCP warning:") and "association release request" in n for n in run["notes"])
    assert run["pfcp_bearer_file"] == "bearers-pfcp.txt"
    lay = run["cpu_layout"]
    assert lay["honoured"] and lay["upf"]["cpus"] == lay["dut"], lay
    assert len(cases) == 4 and all(c["conservation_ok"] for c in cases)
    for c in cases:
        for t in c["trials"]:
            cons, loss = t["conservation"], t["loss"]
            assert cons["ok"] and cons["dut_rx_source"] == "ingress interface", cons
            assert loss["dut_ingress_ring"] is not None and loss["generator_ingress_ring"] is not None
            lost = t["tx_packets"] - t["rx_packets"]
            assert lost == loss["dut_ingress_ring"] + loss["dut_dropped"] + loss["generator_ingress_ring"], t
        d = c["dut"]
        assert d["cpu_source"].startswith("DUT receive NAPI threads") and d["ns_per_packet"] > 0
        assert d["process_cpu_seconds"] is not None
    assert leftovers(run["lab_name"]) == []


@pytest.mark.timing
def test_ndr_sweep_through_eupf_finds_each_cases_limit(eupf_sweep):
    """Every case's search ends with a result: the DUT's NDR, or the generator's limit. A case the
    host disturbed (limit "host busy", or a budget run out on trials excluded as disturbed: nothing
    claimed either way) decides nothing: the test is then skipped as undecided, with those cases'
    figures, unless another case failed. A budget run out on undisturbed trials fails."""
    _, _, cases = eupf_sweep
    undecided = []
    for c in cases:
        d = c.get("disturbance") or {}
        irregular = "the budget ran out" in c["status"] and c["ndr_pps"] is None
        if c["ndr_pps"] is None and not c["generator_bound"] and (
                c["limit"] == "host busy" or (irregular and d.get("disturbed"))):
            undecided.append(f"{c['case_id']}: {d.get('disturbed')} trials disturbed "
                             f"({100 * (d.get('disturbed_share') or 0):.0f}% of the trial time), limit {c['limit']}")
            continue
        assert c["ndr_pps"] or c["generator_bound"], (c["status"], c["notes"], d)
    if undecided:
        pytest.skip(f"{UNDECIDED} {len(undecided)} of {len(cases)} cases: " + "; ".join(undecided))


@pytest.mark.trex
def test_trex_lab_sweeps_eupf_and_balances(tmp_path):
    """The recipe of docs/pfcp.md with TRex: `gtplab sweep --lab-config embedded-trex-eupf` (TRex on
    af_packet in the generator namespace, eUPF as embedded-eupf runs it): exit 0, every trial
    balanced, its loss attributed (on TRex's side: its af_packet receive ring). Skipped, with the
    reason, without TRex's runtime."""
    from gtplab.lab import config as labconfig
    from gtplab.lab import trex_server
    cfg = labconfig.load("embedded-trex-eupf")
    E.require_runtime(cfg)
    try:
        trex_server.resolve(cfg.trex_runtime())
    except trex_server.TrexUnavailable as e:
        pytest.skip(str(e))
    out = tmp_path / "run"
    p = subprocess.run([GTPLAB, "sweep", "--lab-config", "embedded-trex-eupf", "--sizes", "128", "--directions",
                        "uplink,downlink", "--flows", "16", "--rate-mode", "fixed", "--rate", "20kpps",
                        "--duration", "1", "--no-scale", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert (run["generator"], run["dut_mode"], run["conservation_failures"]) == ("trex", "external", 0)
    for c in (json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines()):
        t = c["trials"][0]
        assert t["conservation"]["ok"] and c["dut"]["fwd_packets"] == c["dut"]["rx_packets"] > 0, t
        lost = t["tx_packets"] - t["rx_packets"]
        assert lost == t["loss"]["dut_ingress_ring"] + t["loss"]["dut_dropped"] + t["loss"]["generator_ingress_ring"]
    assert leftovers(run["lab_name"]) == []


def test_kernel_counters_balance_any_xdp_upf_lossy_trials_included(tmp_path):
    """counters: kernel reads nothing of the UPF: the veth driver's count of the XDP verdicts on the
    DUT ports (redirected, sent back, dropped, failed, the rest passed). Through eUPF, a trial at a
    rate it keeps up with and one flat out (the generator offers several times what eUPF's program
    handles on one CPU) both balance: every packet on a counter, the loss the ring's."""
    cfg = E.lab_config(tmp_path, dut={"counters": "kernel", "eupf": None})
    be = backend.choose(cfg).open()
    try:
        with Runner(be, cfg) as r:
            assert r.dut.inner.counters_kind == "kernel"
            prep = r.prepare(CaseParams(direction="uplink", frame_size=64, flows=64, latency=False))
            for rate in (20_000, None):
                t = r.trial(prep, rate, 0.5)
                c, d = t["conservation"], t["dut"]
                assert c["ok"] and c["dut_rx_source"] == "ingress interface", c["errors"]
                assert d["drops_by_reason"] == {} and d["passed_by_reason"] == {}, d
                lost = t["tx_packets"] - t["rx_packets"]
                assert lost == t["loss"]["dut_ingress_ring"] + t["loss"]["generator_ingress_ring"], t
    finally:
        be.close()
