"""Unit tests (no lab) of the sweep's parts: spec validation and overrides, the plan (undersize
uplink), the NDR/PDR search against a fake DUT, packet conservation arithmetic, lab configs and
thresholds, and a case written to a results directory with a fake runner."""

from __future__ import annotations

import argparse
import csv
import json

import pytest
import yaml

from gtplab.lab import config as labconfig
from gtplab.measure import conservation, plan, sweep
from gtplab.results import store as results
from gtplab.errors import UserError
from gtplab.measure.plan import CaseParams
from gtplab.measure.search import ndr_search


# ---------------------------------------------------------------------------------------- spec

def test_default_spec_is_valid_and_complete():
    s = plan.load_spec(None)
    assert s["frame_sizes"] == [64, 128, 256, 512, 1024, 1280, 1424, 1518, 3024]
    assert s["directions"] == ["uplink", "downlink"] and s["checksum"] == ["on"]
    cases, skipped = plan.plan(s)
    assert len(cases) == 20 and not skipped
    assert len({c.case_id for c in cases}) == 20
    # issue 13: one case per direction at 1 M bearers in random order, next to the grid's 1024
    scale = [c for c in cases if c.order == "random"]
    assert [(c.direction, c.frame_size, c.flows, c.n_bearers) for c in scale] == \
        [("uplink", 64, 1_000_000, 1_000_000), ("downlink", 64, 1_000_000, 1_000_000)]
    assert scale[0].tunables()["order"] == "random" and "order" not in cases[0].tunables()
    assert cases[-2:] == scale      # last: loaded once for both, no grid case after their flush
    assert all(any(g.order == "seq" and g.direction == c.direction and g.frame_size == c.frame_size
                   and g.flows == 1024 for g in cases) for c in scale)


def test_scale_cases_can_be_left_out_and_are_checked():
    s = plan.load_spec(None)
    assert len(plan.plan(plan.validate({**s, "scale": None}))[0]) == 18
    one = plan.validate({**s, "directions": ["downlink"],
                          "scale": {"flows": 4096, "order": "seq", "frame_sizes": [128, 512]}})
    got = [(c.frame_size, c.flows, c.order) for c in plan.plan(one)[0] if c.flows == 4096]
    assert got == [(128, 4096, "seq"), (512, 4096, "seq")]
    for bad, msg in (({"flows": 6}, "scale.flows"), ({"flows": 2 << 20}, "scale.flows"),
                     ({"order": "shuffled"}, "scale.order"), ({"frame_sizes": []}, "scale.frame_sizes"),
                     ({"frame_sizes": [9000]}, "scale.frame_sizes"), ({"bearers": 5}, "unknown: bearers"),
                     ("yes", "scale: null or a mapping")):
        with pytest.raises(UserError, match=msg):
            plan.validate({**s, "scale": bad})


@pytest.mark.parametrize("bad,msg", [
    ({"frame_size": [64]}, "unknown key"),
    ({"frame_sizes": [63]}, "out of range"),
    ({"frame_sizes": [3025]}, "out of range"),
    ({"frame_sizes": ["big"]}, "list of integers"),
    ({"frame_sizes": [64, 64]}, "duplicates"),
    ({"directions": ["sideways"]}, "directions"),
    ({"flow_modes": ["many"]}, "flow_modes"),
    ({"flows": 6}, "multiple of 4"),
    ({"flows": 8, "bearers": 4}, "bearers"),
    ({"checksum": ["maybe"]}, "checksum"),
    ({"rate_mode": "fast"}, "rate_mode"),
    ({"rate": "lots"}, "rate"),
    ({"rate": -5}, "positive"),
    ({"duration": 0}, "duration"),
    ({"ndr": {"tolerance": 0.1}}, "ndr: unknown"),
    ({"ndr": {"loss_tolerance": 2}}, "loss ratio"),
    ({"pcap_limit": -1}, "pcap_limit"),
    ({"undersize": "pad"}, "undersize"),
    ({"frame_sizes": [64], "directions": ["uplink"], "undersize": "error"}, "below the uplink minimum 82"),
])
def test_bad_spec_one_clear_error(bad, msg):
    with pytest.raises(UserError, match=msg):
        plan.validate(bad)


def test_spec_file_errors(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("frame_sizes: [64\n")
    with pytest.raises(UserError, match="not YAML"):
        plan.load_spec(str(f))
    with pytest.raises(UserError, match="no such file"):
        plan.load_spec(str(tmp_path / "missing.yaml"))
    f.write_text(yaml.safe_dump({"frame_sizes": [128], "checksum": [True, False]}))
    assert plan.load_spec(str(f))["checksum"] == ["on", "off"]     # YAML 1.1 on/off


def _args(**kw):
    base = dict(sizes=None, directions=None, flow_modes=None, flows=None, bearers=None, checksum=None,
                rate_mode=None, rate=None, duration=None, max_trials=None, pcap_limit=None, no_latency=False)
    base.update(kw)
    return argparse.Namespace(**base)


def test_overrides_are_validated():
    s = plan.apply_overrides(plan.load_spec(None), _args(sizes="64,1518", directions="uplink",
                                                           rate="250000", rate_mode="ndr", duration=0.5))
    assert s["frame_sizes"] == [64, 1518] and s["directions"] == ["uplink"] and s["rate"] == 250000.0
    with pytest.raises(UserError, match="out of range"):
        plan.apply_overrides(plan.load_spec(None), _args(sizes="64,9000"))
    with pytest.raises(UserError, match="bad list"):
        plan.apply_overrides(plan.load_spec(None), _args(sizes="64,x"))
    # an empty list is a value, refused: not "the whole default sweep"
    for kw, msg in (({"sizes": ""}, "frame_sizes"), ({"directions": ""}, "directions"),
                    ({"flow_modes": ""}, "flow_modes"), ({"checksum": ""}, "checksum")):
        with pytest.raises(UserError, match=msg):
            plan.apply_overrides(plan.load_spec(None), _args(**kw))


def test_undersize_uplink_is_clamped_visibly_or_skipped():
    s = plan.validate({"frame_sizes": [64, 128], "directions": ["uplink", "downlink"]})
    cases, skipped = plan.plan(s)
    up64 = next(c for c in cases if c.direction == "uplink" and c.frame_size == 64)
    assert up64.actual_size == 82 and up64.tunables()["size"] == 82
    assert up64.tunables()["stats"] == "none"            # no room for the latency trailer
    dn64 = next(c for c in cases if c.direction == "downlink" and c.frame_size == 64)
    assert dn64.actual_size == 64 and dn64.tunables()["stats"] == "latency"
    cases, skipped = plan.plan(plan.validate({**s, "undersize": "skip"}))
    assert [(c.direction, c.frame_size) for c in cases if c.frame_size == 64] == [("downlink", 64)]
    assert skipped == [{"direction": "uplink", "frame_size": 64, "note": "below the uplink minimum 82: skipped"}]


def test_case_tunables_match_bearer_file(tmp_path):
    """The bearers the sweep installs come from the profile's own tunables (no drift)."""
    from gtplab.gtpu.bearers import write_bearer_file
    p = CaseParams("uplink", 256, flows=8, bearers=16, checksum="off")
    t = p.tunables()
    assert t["flows"] == 8 and t["bearers"] == 16 and t["outer_udp_csum"] == "zero"
    n = write_bearer_file("uplink", t, str(tmp_path / "b.txt"), csum="off")
    lines = [ln for ln in (tmp_path / "b.txt").read_text().splitlines() if not ln.startswith("#")]
    assert n == 16 and len(lines) == 16
    assert lines[5].split() == ["0x00010005", "10.64.0.6", "10.201.0.17", "0x80000005", "csum=off"]


# ---------------------------------------------------------------------------------------- NDR search

def fake_dut(capacity, gen_max, log):
    """Loses everything above `capacity` pps; the generator reaches at most gen_max."""
    def trial(pps):
        offered = gen_max if pps is None else min(pps, gen_max)
        log.append(pps)
        loss = max(0.0, 1 - capacity / offered)
        return {"offered_pps": offered, "rx_pps": offered * (1 - loss), "loss_ratio": loss}
    return trial


def test_ndr_search_finds_capacity_within_resolution():
    log = []
    best, trials, status = ndr_search(fake_dut(300e3, 1e6, log), 0.0, resolution=0.02, max_trials=20)
    assert log[0] is None                                   # starts at the generator's maximum
    assert log[1] == pytest.approx(300e3)                   # then what the DUT delivered
    assert best["loss_ratio"] == 0 and 0.98 * 300e3 - 20e3 <= best["offered_pps"] <= 300e3
    assert trials == [t for t in trials] and len(trials) == len(log) and all("passed" in t for t in trials)
    assert status == "resolution reached; limit: dut"


def test_ndr_search_says_when_the_loss_was_the_generators():
    # the DUT forwards everything; above 300 kpps the generator's own receive ring overflows
    def trial(pps):
        offered = 1e6 if pps is None else pps
        loss = max(0.0, 1 - 300e3 / offered)
        return {"offered_pps": offered, "rx_pps": offered * (1 - loss), "loss_ratio": loss,
                "limit": "generator (receive)" if loss else None}
    best, trials, status = ndr_search(trial, 0.0, resolution=0.02, max_trials=20)
    assert status.startswith("generator-bound") and "generator (receive)" in status
    assert best["offered_pps"] <= 300e3


def test_ndr_search_counts_a_generator_bound_pass_at_its_achieved_rate():
    # asked 600 kpps, the generator only reached 450 kpps: the search must not take 600 as passing
    asked = []
    def trial(pps):
        asked.append(pps)
        if pps is None:
            return {"offered_pps": 1e6, "rx_pps": 500e3, "loss_ratio": 0.5, "limit": "dut"}
        offered = min(pps, 450e3) if len(asked) == 2 else pps
        loss = max(0.0, 1 - 500e3 / offered)
        return {"offered_pps": offered, "rx_pps": offered * (1 - loss), "loss_ratio": loss,
                "generator_bound": offered < 0.97 * pps, "limit": "dut" if loss else None}
    best, trials, status = ndr_search(trial, 0.0, resolution=0.01, max_trials=3)
    assert trials[1]["generator_bound"] and trials[1]["passed"]
    assert asked[2] == pytest.approx((450e3 + 1e6) / 2)      # bracket from the achieved 450k, not 500k


def test_ndr_search_binary_when_first_guess_fails():
    log = []
    def trial(pps):                    # the DUT delivers more than it can sustain loss-free
        offered = 1e6 if pps is None else pps
        log.append(offered)
        loss = 0.0 if offered <= 400e3 else 0.5
        return {"offered_pps": offered, "rx_pps": offered * (1 - loss), "loss_ratio": loss}
    best, trials, status = ndr_search(trial, 0.0, resolution=0.01, max_trials=30)
    assert 390e3 <= best["offered_pps"] <= 400e3
    lo_fail = min(t["offered_pps"] for t in trials if not t["passed"])
    assert lo_fail > 400e3 and lo_fail - best["offered_pps"] <= 0.01 * 1e6


def test_pdr_tolerance_and_limits():
    def trial(pps):
        offered = 1e6 if pps is None else pps
        return {"offered_pps": offered, "rx_pps": offered, "loss_ratio": 0.0005 if offered > 500e3 else 0.0}
    best_pdr, _, _ = ndr_search(trial, 0.001)
    assert best_pdr["offered_pps"] == 1e6                         # 0.05 % loss is within PDR 0.1 %
    best_ndr, trials, status = ndr_search(trial, 0.0, max_trials=3)
    assert len(trials) == 3 and "stopped after 3" in status and best_ndr["offered_pps"] <= 500e3
    best, trials, status = ndr_search(lambda p: {"offered_pps": 1e5, "rx_pps": 0, "loss_ratio": 1.0}, 0.0,
                                      max_trials=4)
    assert best is None and len(trials) == 4 and "no trial met" in status


def test_generator_limited():
    log = []
    best, trials, status = ndr_search(fake_dut(5e6, 1e6, log), 0.0)
    assert len(trials) == 1 and best["offered_pps"] == 1e6 and status.startswith("generator-bound")


# ---------------------------------------------------------------------------------------- conservation

def test_dut_delta_classifies_counters():
    before = {("ul_fwd", "redirect"): 10, ("drop_unknown_teid", "drop"): 1}
    after = {("ul_fwd", "redirect"): 110, ("drop_unknown_teid", "drop"): 6, ("pass_not_gtpu", "pass"): 2,
             ("echo_reply", "tx"): 1, ("drop_trunc_ip", "aborted"): 1}
    d = conservation.DutDelta.from_counters(before, after)
    assert (d.rx_packets, d.fwd_packets, d.drop_packets, d.pass_packets) == (109, 100, 6, 2)
    assert d.drops_by_reason == {"drop_unknown_teid": 5, "drop_trunc_ip": 1}
    assert d.other == {"echo_reply/tx": 1}


def test_dut_delta_counts_answered_drops_as_drops():
    """An unknown-TEID G-PDU answered with an Error Indication (drop_unknown_teid/tx) is a drop of
    that reason, not "other": the data packet was not forwarded."""
    after = {("drop_unknown_teid", "tx"): 3, ("drop_unknown_teid", "drop"): 7, ("sig_end_marker", "drop"): 1}
    d = conservation.DutDelta.from_counters({}, after)
    assert d.drops_by_reason == {"drop_unknown_teid": 10, "sig_end_marker": 1} and d.other == {}
    assert d.rx_packets == 11 and d.drop_packets == 11


def test_conservation_holds_and_explains_link_losses():
    d = conservation.DutDelta(rx_packets=95, fwd_packets=90, drops_by_reason={"drop_spoofed": 5})
    ok = conservation.check(100, 88, d, dut_rx=95, link_in_lost=5, link_out_lost=2)
    assert ok.ok and not ok.errors
    assert conservation.check(100, 90, conservation.DutDelta(100, 90, {"drop_unknown_ue": 10})).ok


def test_conservation_counts_what_the_duts_kernel_sent():
    """Packets passed to the DUT's kernel that it sends on (12 outer fragments reassembled into 3
    G-PDUs; 1 encapsulated packet cut into 2 outer fragments) balance only with kernel_fwd, the
    frames its kernel sent, and only with the right number of them."""
    ul = conservation.DutDelta(rx_packets=12, fwd_packets=0, passed_by_reason={"pass_outer_frag": 12})
    assert not conservation.check(12, 3, ul, dut_rx=12).ok
    c = conservation.check(12, 3, ul, dut_rx=12, kernel_fwd=3)
    assert c.ok and "+ 3 sent by its kernel" in c.message() and c.as_dict()["kernel_fwd"] == 3
    bad = conservation.check(12, 3, ul, dut_rx=12, kernel_fwd=4)
    assert not bad.ok and "sent by its kernel 4 != generator rx 3" in bad.errors[0]
    dl = conservation.DutDelta(rx_packets=4, fwd_packets=3, passed_by_reason={"pass_fib_other": 1})
    assert conservation.check(4, 5, dl, dut_rx=4, kernel_fwd=2).ok
    assert not conservation.check(4, 5, dl, dut_rx=4).ok


@pytest.mark.parametrize("gen_tx,gen_rx,dut_rx,lin,lout,what", [
    (100, 90, 99, 0, 0, "generator tx 100 != DUT rx 99"),          # one vanished on the way in
    (100, 89, 100, 0, 0, "DUT forwarded 90 != generator rx 89"),   # one vanished on the way out
    (100, 90, 101, 0, 0, "DUT rx 101 != forwarded 90"),            # a packet the DUT saw but did not count
    (100, 90, 100, None, None, None),                               # unknown link losses = 0: balanced
])
def test_conservation_unexplained_differences_fail_with_numbers(gen_tx, gen_rx, dut_rx, lin, lout, what):
    d = conservation.DutDelta(rx_packets=100, fwd_packets=90, drops_by_reason={"drop_ttl_expired": 10})
    c = conservation.check(gen_tx, gen_rx, d, dut_rx=dut_rx, link_in_lost=lin, link_out_lost=lout)
    if what is None:
        assert c.ok
    else:
        assert not c.ok and any(what in e for e in c.errors), c.errors
        assert "unexplained" in c.message() and str(gen_tx) in c.message()


# ---------------------------------------------------------------------------------------- lab configs

def test_shipped_lab_configs_load():
    emb = labconfig.load("embedded")
    assert emb.backend == "local" and not emb.cpu_shared_with_generator and emb.dut_mode == "pgwu"
    assert emb.threshold("ndr_pps", "uplink", 1518) == 20000
    assert emb.threshold("ndr_pps", "uplink", 128) == 30000          # the direction's default
    assert 0 < emb.pdr_loss < 0.01 and emb.measured and "MEASURED_PLACEHOLDER" not in emb.measured
    tr = labconfig.load("example-trex")
    assert tr.backend == "trex" and tr.dut["metrics_url"].startswith("http")
    assert tr.threshold("ndr_pps", "downlink", 64) > emb.threshold("ndr_pps", "downlink", 64)


def test_lab_config_errors(tmp_path, monkeypatch):
    f = tmp_path / "lab.yaml"
    for text, msg in (("backend: ixia\n", "backend"), ("speed: 1\n", "unknown key"),
                      ("thresholds: {ndr_pps: {sideways: {default: 1}}}\n", "uplink/downlink"),
                      ("thresholds: {pdr_loss: 5}\n", "ratio"), ("dut: {url: x}\n", "unknown key"),
                      # configs that cannot work are refused when read (issue 15)
                      ("ports: {access: 0, sgi: 0}\n", "both port 0"),
                      ("port_speed_bps: -5\n", "port_speed_bps -5"),
                      ("port_speed_bps: true\n", "port_speed_bps"),
                      ("thresholds: {ndr_pps: {uplink: {default: 5000000}}}\n", "above the line rate at 3024 B"),
                      ("thresholds: {ndr_pps: {uplink: {1424: 900000}}}\n", "above the line rate at 1424 B"),
                      ("thresholds: {ndr_pps: {uplink: {default: \"150%\"}}}\n", "bad entry"),
                      ("dut: {mode: bridge}\n", "dut.mode"),
                      ("cpus: {generator: 0, dut: 4096}\n", "not available"),
                      ("cpus: {generator: 0}\n", "generator: CPUS, dut: CPUS"),
                      # a TRex lab of other hosts reads the PGW-U's counters over its metrics URL
                      ("backend: trex\n", "dut.counters pgwu on a lab of other hosts"),
                      ("backend: trex\ndut: {provision: pfcp, pfcp: {upf: embedded, n3: 10.201.0.1, n6: 10.202.0.1}, "
                       "metrics_url: "
                       "'http://dut:9464/metrics'}\n", "embedded is the namespace lab's agent")):
        f.write_text(text)
        with pytest.raises(UserError, match=msg):
            labconfig.load(str(f))
    with pytest.raises(UserError, match="no lab config named"):
        labconfig.load("nosuchlab")
    # TRex in the lab's own namespaces: the PGW-U and its agent are local (no metrics URL needed)
    f.write_text("backend: trex\nlab: {generator: trex}\ndut: {provision: pfcp, pfcp: {upf: embedded, "
                 "n3: 10.201.0.1, n6: 10.202.0.1}}\n")
    assert labconfig.load(str(f)).backend == "trex"
    f.write_text('port_speed_bps: 10000000000\nthresholds: {ndr_pps: {uplink: {default: "50%", 1518: 800000}}}\n')
    c = labconfig.load(str(f))
    assert c.threshold("ndr_pps", "uplink", 64) == pytest.approx(0.5 * 14880952.38)
    assert c.threshold("ndr_pps", "uplink", 1518) == 800000
    f.write_text("name: mine\n")
    monkeypatch.setenv("GTPLAB_LAB_CONFIG", str(f))
    assert labconfig.load().name == "mine"


# ---------------------------------------------------------------------------------------- results

class FakeDut:
    import contextlib

    @contextlib.contextmanager
    def bpf_stats(self):
        yield


class FakeRunner:
    """Trials of a DUT that forwards 300 kpps; records what run_case asked for."""

    def __init__(self):
        self.dut = FakeDut()
        self.asked = []

    def prepare(self, p):
        from gtplab.measure.runner import Prepared
        return Prepared(p, 0, 1, p.tunables(), p.tunables()["stats"] == "latency", [])

    def case_costs(self, prep, load_pps):
        """The DUT's costs apart from the search (Runner.case_costs): none measured here."""
        self.cost_load = load_pps
        return {"load_pps": load_pps, "notes": [], "xdp_ns_per_packet": None, "dut_cpu_ns_per_packet": None,
                "reference_cpu_ns_per_packet": None, "above_reference_ns_per_packet": None, "trials": []}

    def trial(self, prep, pps, duration, capture=None, capture_limit=64):
        self.asked.append(pps)
        offered = 1e6 if pps is None else pps
        rx = min(offered, 300e3)
        tx_p = int(offered * duration)
        rx_p = int(rx * duration)
        d = conservation.DutDelta(tx_p, rx_p, {"drop_no_route": tx_p - rx_p} if tx_p > rx_p else {})
        cons = conservation.check(tx_p, rx_p, d)
        return {"rate_asked": "x", "offered_pps": offered, "offered_bps_l1": 1.0, "offered_bps_l2": 1.0,
                "rx_pps": rx, "rx_bps_l1": 1.0, "rx_bps_l2": 1.0, "tx_packets": tx_p, "rx_packets": rx_p,
                "loss_ratio": (tx_p - rx_p) / tx_p,
                "latency_us": {k: None for k in ("min", "avg", "p50", "p99", "max")},
                "dut": {"rx_packets": tx_p, "fwd_packets": rx_p, "drop_packets": d.drop_packets,
                        "drops_by_reason": d.drops_by_reason, "ns_per_packet": None, "cpu_seconds": None,
                        "cpu_ns_per_packet": None},
                "conservation": cons.as_dict()}


def test_run_case_records_contract_fields_and_trials(tmp_path):
    cfg = labconfig.load("embedded")
    spec = plan.validate({"frame_sizes": [64], "directions": ["uplink"], "rate_mode": "ndr",
                           "duration": 0.1, "pcap_limit": 8})
    (p,) = plan.plan(spec)[0]
    fr = FakeRunner()
    results.write_run(tmp_path, {"uuid": "u", "started": "2026-01-01T00:00:00+00:00", "backend": "local",
                                 "lab": "embedded", "host": "h"})
    (tmp_path / "pcaps").mkdir()
    rec = sweep.run_case(fr, p, spec, cfg, tmp_path / "pcaps", None)
    results.append_case(tmp_path, rec)
    for k in results.CASE_FIELDS:
        assert k in rec, k
    assert rec["frame_size"] == 82 and rec["requested_frame_size"] == 64
    assert any("below the uplink minimum 82" in n for n in rec["notes"])
    assert rec["rate_mode"] == "ndr" and rec["loss_ratio"] == 0 and 290e3 <= rec["offered_pps"] <= 300e3
    assert len(rec["trials"]) == len(fr.asked) > 2 and rec["conservation_ok"]
    assert fr.cost_load == rec["offered_pps"] and rec["cost"]["load_pps"] == rec["offered_pps"]
    assert rec["pcap"] == "pcaps/case-uplink-64-multi1024-csumon-ndr-port1.pcap"
    (back,) = results.read_cases(tmp_path)
    assert back["case_id"] == rec["case_id"] and back["trials"] == json.loads(json.dumps(rec["trials"]))
    with open(tmp_path / "cases.csv") as f:
        row = next(csv.DictReader(f))
    assert row["dut.fwd_packets"] == str(rec["dut"]["fwd_packets"]) and row["requested_frame_size"] == "64"


def test_results_dir_is_never_overwritten(tmp_path):
    (tmp_path / "x").write_text("keep")
    with pytest.raises(UserError, match="not empty"):
        sweep._results_dir(str(tmp_path), "u")


def test_ndr_search_with_only_the_generators_losses_is_generator_bound():
    # TRex on af_packet: every trial of a short search loses packets in the generator's own receive
    # ring; no NDR, and the case must say the generator set it (not blame the DUT)
    def trial(pps):
        offered = 300e3 if pps is None else pps
        return {"offered_pps": offered, "rx_pps": offered * 0.98, "loss_ratio": 0.02,
                "limit": "generator (receive)"}
    best, trials, status = ndr_search(trial, 0.0, resolution=0.02, max_trials=2)
    assert best is None and len(trials) == 2
    assert status.startswith("generator-bound") and "generator (receive)" in status
    # one loss of the DUT among them: no generator-bound claim
    seq = iter(["generator (receive)", "dut"])
    best, trials, status = ndr_search(lambda pps: {**trial(pps), "limit": next(seq)}, 0.0, max_trials=2)
    assert best is None and status.startswith("no trial met")
def test_flamegraph_flag_and_its_deprecated_alias(capsys):
    """`sweep --flamegraph` turns the flame graphs on; the old `--profile` still does, and says once that
    it is deprecated; without either they are off and nothing is said."""
    from gtplab import cli
    parser = cli.build_parser()
    assert parser.parse_args(["sweep", "--flamegraph"]).flamegraph is True
    assert capsys.readouterr().err == ""
    assert parser.parse_args(["sweep"]).flamegraph is False
    assert parser.parse_args(["sweep", "--profile"]).flamegraph is True
    err = capsys.readouterr().err
    assert err.count("deprecated") == 1 and "--profile" in err and "use --flamegraph" in err
    assert len(err.strip().splitlines()) == 1


def test_trex_latency_histogram_percentiles():
    from gtplab.measure.runner import hist_percentile
    # TRex's shape: bucket lower bounds (10 us steps below 100, 100 below 1000, 1000 above) as strings
    h = {"30": 10, "70": 40, "200": 40, "900": 9, "2000": 1}
    assert hist_percentile(h, 0.5) == 80.0          # the 50th of 100 packets is in [70, 80)
    assert hist_percentile(h, 0.9) == 300.0         # the 90th in [200, 300)
    assert hist_percentile(h, 0.99) == 1000.0       # the 99th in [900, 1000)
    assert hist_percentile(h, 1.0) == 3000.0
    assert hist_percentile({}, 0.5) is None and hist_percentile({"10": 0}, 0.5) is None


def test_case_costs_holds_bpf_stats_for_its_one_trial_only():
    """Issue 26 item 5: the kernel's run-time accounting (BPF_ENABLE_STATS) taxes every packet of the
    DUT's program with two clock reads, so Runner.case_costs holds it for its last trial alone: the
    DUT's trial without it gives the CPU ns/packet the search paid, the one with it the XDP program's
    ns/packet and what the accounting cost (their difference)."""
    import contextlib
    import types
    from gtplab.measure.runner import Runner

    held, seen = [False], []

    class Dut:
        @contextlib.contextmanager
        def bpf_stats(self):
            held[0] = True
            try:
                yield
            finally:
                held[0] = False

    def trial(prep, load, duration):
        seen.append((load, duration, held[0]))
        on = held[0]
        return {"offered_pps": load, "loss_ratio": 0.0, "host": {"disturbed": False},
                "dut": {"cpu_ns_per_packet": 1100.0 if on else 1000.0, "ns_per_packet": 210.0 if on else None,
                        "bpf_stats": on}}

    r = Runner.__new__(Runner)
    r.dut, r._lab, r._reference, r.backend = Dut(), None, None, types.SimpleNamespace(kind="local")
    r.trial = trial
    c = r.case_costs(None, 400e3, duration=0.3)
    assert seen == [(200e3, 0.3, False), (200e3, 0.3, True)] and not held[0]
    assert c["dut_cpu_ns_per_packet"] == 1000.0 and c["xdp_ns_per_packet"] == 210.0
    assert c["bpf_stats_ns_per_packet"] == 100.0 and c["above_reference_ns_per_packet"] is None
    assert [t["bpf_stats"] for t in c["trials"]] == [False, True]
    assert any("no reference forwarder" in n for n in c["notes"]) and not c["disturbed"]
