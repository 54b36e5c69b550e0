"""Unit tests (no lab) of the sweep's parts: spec validation and overrides (the search's keys among
them), the plan (undersize uplink), packet conservation arithmetic, lab configs and thresholds, and a
case written to a results directory with a fake runner. The search's behaviour against fake DUTs is
tests/measure/test_sweep_search.py; the results directory's claim and run ids test_results_claim.py."""

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
from tests.lib.fake_runner import FakeRunner


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
    ({"ndr": {"loss_tolerance": 0}}, "the search is MLRsearch .RFC 9971. now"),
    ({"rate_mode": "ndr"}, "rate_mode ndr: NDR and PDR are goals of one search now"),
    ({"rate_mode": "pdr"}, "rate_mode search, with search.goals"),
    ({"search": {"goal": ["ndr"]}}, "search: unknown key.s. goal"),
    ({"search": ["ndr"]}, "search: a mapping"),
    ({"search": {"goals": []}}, "search.goals: an empty list"),
    ({"search": {"goals": ["ndrx"]}}, r"search.goals\[0\]: .*unknown preset 'ndrx'"),
    ({"search": {"goals": [{"preset": "pdr", "loss_ratio": 1.5}]}}, r"search.goals\[0\]: .*loss_ratio must be"),
    ({"search": {"goals": [{"preset": "pdr", "speed": 1}]}}, r"search.goals\[0\]: .*unknown key.s. speed"),
    ({"search": {"goals": ["ndr", {"loss_ratio": 0}]}}, "two goals with the code NDR"),
    ({"search": {"goals": [{"code": "PDR0.5", "loss_ratio": 0}]}}, "code 'PDR0.5' does not match"),
    ({"search": {"min_load": 0}}, "search.min_load 0"),
    ({"search": {"min_load": "lots"}}, "search.min_load"),
    ({"search": {"max_load": 5000}}, r"search.max_load 5000: .* >= min_load \(10000\)"),
    ({"search": {"time_budget": -1}}, "search.time_budget -1"),
    ({"search": {"goals": ["rfc2544"], "time_budget": 30}}, "less than one 60 s trial"),
    ({"search": {"max_trials": 0}}, "search.max_trials 0"),
    ({"search": {"max_trials": 2.5}}, "search.max_trials"),
    ({"search": {"disturbed": "ignore"}}, "search.disturbed 'ignore': one of exclude, count"),
    ({"search": {"latency_at": [0, 100]}}, "search.latency_at"),
    ({"search": {"latency_at": [10, 10]}}, "search.latency_at"),
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
                rate_mode=None, rate=None, duration=None, max_trials=None, pcap_limit=None, no_latency=False,
                goals=None, search=None)
    base.update(kw)
    return argparse.Namespace(**base)


def test_overrides_are_validated():
    s = plan.apply_overrides(plan.load_spec(None), _args(sizes="64,1518", directions="uplink",
                                                           rate="250000", rate_mode="fixed", duration=0.5))
    assert s["frame_sizes"] == [64, 1518] and s["directions"] == ["uplink"] and s["rate"] == 250000.0
    assert s["rate_mode"] == "fixed" and s["duration"] == 0.5
    with pytest.raises(UserError, match="out of range"):
        plan.apply_overrides(plan.load_spec(None), _args(sizes="64,9000"))
    with pytest.raises(UserError, match="bad list"):
        plan.apply_overrides(plan.load_spec(None), _args(sizes="64,x"))
    # an empty list is a value, refused: not "the whole default sweep"
    for kw, msg in (({"sizes": ""}, "frame_sizes"), ({"directions": ""}, "directions"),
                    ({"flow_modes": ""}, "flow_modes"), ({"checksum": ""}, "checksum")):
        with pytest.raises(UserError, match=msg):
            plan.apply_overrides(plan.load_spec(None), _args(**kw))


def test_search_defaults_and_overrides():
    """The default spec searches NDR and PDR0.5 (RFC 9971 goals with every attribute stated); --goals
    takes presets or a YAML list of records, --search the other keys; the spec stays valid JSON for
    run.json and validates again as it is."""
    s = plan.load_spec(None)
    assert s["rate_mode"] == "search"
    sr = s["search"]
    assert [g["code"] for g in sr["goals"]] == ["NDR", "PDR0.5"]
    assert sr["goals"][1] == {"code": "PDR0.5", "loss_ratio": 0.005, "exceed_ratio": 0.5, "final_trial_duration": 0.5,
                              "duration_sum": 1.0, "width": 0.02, "initial_trial_duration": 0.5,
                              "rfc_code": "0.5f1d0.5l50e"}
    assert (sr["min_load"], sr["max_load"], sr["time_budget"], sr["max_trials"], sr["disturbed"], sr["latency_at"],
            sr["latency_duration"]) == (10e3, None, None, None, "exclude", [0, 10, 50, 90], 0.25)
    assert json.loads(json.dumps(s)) == s and plan.validate(s) == s
    assert [g.code for g in plan.goals(sr)] == ["NDR", "PDR0.5"]
    assert all(c.case_id.endswith("-search") and c.rate_mode == "search" for c in plan.plan(s)[0])
    o = plan.apply_overrides(s, _args(goals="rfc2544"))
    assert [g["code"] for g in o["search"]["goals"]] == ["RFC2544"]
    assert o["search"]["goals"][0]["final_trial_duration"] == 60.0
    o = plan.apply_overrides(s, _args(goals="[ndr, {preset: pdr, loss_ratio: 0.001}, {final_trial_duration: 2, "
                                            "duration_sum: 4}]",
                                      search="min_load=5e4, time_budget=20,max_load=2000000,latency_at=[50, 0]",
                                      max_trials=9))
    assert [g["code"] for g in o["search"]["goals"]] == ["NDR", "PDR0.1", "2f4d0l50e"]
    assert (o["search"]["min_load"], o["search"]["time_budget"], o["search"]["max_load"], o["search"]["max_trials"],
            o["search"]["latency_at"]) == (5e4, 20.0, 2e6, 9, [0, 50])
    assert plan.apply_overrides(s, _args(search="latency_at=90"))["search"]["latency_at"] == [90]
    assert plan.apply_overrides(s, _args(search="latency_at=[]"))["search"]["latency_at"] == []
    for kw, msg in (({"goals": "[ndr"}, "--goals .*not a YAML list"), ({"goals": "ndr,ndr"}, "two goals with the code NDR"),
                    ({"goals": "fastest"}, "unknown preset 'fastest'"), ({"search": "min_load"}, "KEY=VALUE"),
                    ({"search": "speed=1"}, "--search: unknown key 'speed'"),
                    ({"search": "goals=ndr"}, "give the goals with --goals"),
                    ({"search": "min_load=-1"}, "search.min_load -1"),
                    ({"goals": "ndr", "rate_mode": "fixed"}, "--goals: the rate mode is fixed"),
                    ({"max_trials": 3, "rate_mode": "fixed"}, "--max-trials: the rate mode is fixed"),
                    ({"duration": 0.3}, "--duration: seconds of a fixed-rate trial; a search's trials"),
                    ({"search": "latency_duration=0"}, "search.latency_duration 0")):
        with pytest.raises(UserError, match=msg):
            plan.apply_overrides(s, _args(**kw))


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

def test_run_case_records_contract_fields_and_trials(tmp_path):
    cfg = labconfig.load("embedded")
    spec = plan.validate({"frame_sizes": [64, 128], "directions": ["uplink"], "rate_mode": "search",
                           "pcap_limit": 8, "search": {"latency_duration": 0.1}})
    p, p128 = plan.plan(spec)[0]
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
    # the recorded trial is the last full-length one at NDR's relevant lower bound: no loss, at most 300 kpps
    assert rec["rate_mode"] == "search" and rec["loss_ratio"] == 0 and 294e3 <= rec["offered_pps"] <= 300e3 * (1 + 1e-9)
    assert rec["offered_pps"] == rec["goals"]["NDR"]["lower_pps"] == rec["ndr_pps"] and rec["goal"] == "NDR"
    assert rec["duration_s"] == 0.5          # the goals' trial duration, not the spec's (fixed rate) one
    assert len(rec["trials"]) == len(fr.asked) > 2 and rec["conservation_ok"]
    assert [t["phase"] for t in rec["trials"]][:2] == ["max load", "search"]
    # the DUT's costs are measured apart from the search, at the case's result (Runner.case_costs)
    assert fr.cost_load == rec["ndr_pps"] and rec["cost"]["load_pps"] == rec["ndr_pps"]
    # 82 B uplink has no room for the latency trailer: no latency trials, and said so
    assert "latency_pdr" not in rec and all(t["phase"] != "latency" for t in rec["trials"])
    assert any("no latency" in n for n in rec["notes"])
    assert rec["pcap"] == "pcaps/case-uplink-64-multi1024-csumon-search-port1.pcap"
    rec128 = sweep.run_case(fr, p128, spec, cfg, tmp_path / "pcaps", None)
    results.append_case(tmp_path, rec128)
    assert [t["phase"] for t in rec128["trials"]][-4:] == ["latency"] * 4
    assert list(rec128["latency_pdr"]["points"]) == ["0", "10", "50", "90"]
    back, back128 = results.read_cases(tmp_path)
    assert back["case_id"] == rec["case_id"] and back["trials"] == json.loads(json.dumps(rec["trials"]))
    with open(tmp_path / "cases.csv") as f:
        row, row128 = csv.DictReader(f)
    assert row["dut.fwd_packets"] == str(rec["dut"]["fwd_packets"]) and row["requested_frame_size"] == "64"
    # the goal code is in the CSV's columns, with the bounds and whether the result is regular
    assert float(row["goals.NDR.lower_pps"]) == rec["goals"]["NDR"]["lower_pps"]
    assert float(row["goals.PDR0.5.upper_pps"]) == rec["goals"]["PDR0.5"]["upper_pps"]
    assert row["goals.NDR.regular"] == "True" and row["goal"] == "NDR" and row["limit"] == "dut"
    assert float(row128["latency_pdr.points.90.latency_us.p99"]) == rec128["latency_pdr"]["points"]["90"]["latency_us"]["p99"]


def test_results_dir_is_never_overwritten(tmp_path):
    (tmp_path / "x").write_text("keep")
    with pytest.raises(UserError, match="not empty"):
        sweep._results_dir(str(tmp_path), "u")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]          # nothing left behind


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


def test_socket_knobs_in_a_lab_config(tmp_path):
    """dut.socket (the socket path's knobs, docs/socket.md): checked when the config is read, each
    error naming the knob; given, they become `pgwu socket`'s flags."""
    from gtplab.dut.sock import SocketKnobs
    f = tmp_path / "lab.yaml"
    for text, msg in (("dut: {mode: pgwu, socket: {batch: 8}}\n", "dut.socket is given but dut.mode is 'pgwu'"),
                      ("dut: {mode: socket, socket: {batchsize: 8}}\n", "unknown knob"),
                      ("dut: {mode: socket, socket: {batch: 0}}\n", "batch: 0 is not an integer in 1..1024"),
                      ("dut: {mode: socket, socket: {threads: 65}}\n", "threads"),
                      ("dut: {mode: socket, socket: {reuseport: 1}}\n", "reuseport: 1 is not true or false"),
                      ("dut: {mode: socket, socket: {fanout: roundrobin}}\n", "fanout"),
                      ("dut: {mode: socket, socket: {prefer_busy_poll: true}}\n", "need busy_poll"),
                      ("dut: {mode: socket, socket: [1, 2]}\n", "must be a mapping")):
        f.write_text(text)
        with pytest.raises(UserError, match=msg):
            labconfig.load(str(f))
    f.write_text("dut: {mode: socket, socket: {threads: 2, batch: 1, reuseport: false, rcvbuf: 4194304, "
                 "busy_poll: 50, gro: true}}\n")
    k = labconfig.load(str(f)).socket_knobs
    assert k == SocketKnobs(threads=2, batch=1, reuseport=False, rcvbuf=4194304, busy_poll=50, gro=True)
    assert k.argv([1, 3]) == ["--threads", "2", "--batch", "1", "--reuseport", "off", "--fanout", "hash",
                              "--cpus", "1,3", "--rcvbuf", "4194304", "--busy-poll", "50", "--gro"]
    assert k.label() == "threads=2 batch=1 reuseport=off rcvbuf=4194304 busy_poll=50 gro=on"
    assert labconfig.load("embedded").socket_knobs == SocketKnobs()


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


@pytest.mark.parametrize("dut,ref,stats", [(1000.0, 1200.0, 900.0), (1000.0, 800.0, 1100.0)],
                         ids=["below-zero", "above-zero"])
def test_a_cost_difference_below_zero_is_not_reported_as_a_cost(dut, ref, stats):
    """Two trials' CPU ns/packet apart: a DUT cheaper than the reference forwarder, or bpf_stats that
    made it cheaper, is the trials' spread, not a cost: None, with a note giving the figures."""
    from gtplab.measure.runner import _cost_difference
    notes: list[str] = []
    above, bpf = _cost_difference(dut, ref, "above", notes), _cost_difference(stats, dut, "bpf_stats", notes)
    if dut < ref:
        assert above is None and bpf is None, (above, bpf)
        assert notes == ["above: 1000.0 - 1200.0 = -200.0 ns/packet, below zero: the trials' spread is larger "
                         "than the difference, which is not measured",
                         "bpf_stats: 900.0 - 1000.0 = -100.0 ns/packet, below zero: the trials' spread is larger "
                         "than the difference, which is not measured"], notes
    else:
        assert (above, bpf, notes) == (200.0, 100.0, [])
    assert _cost_difference(None, ref, "x", notes) is None


def test_a_case_states_its_premises_and_is_decided_only_when_all_held():
    """Issue 31.4: a sweep case lists what its result rests on with figures; decided only when every
    premise held (a host-busy, generator-bound, unbalanced or generator-only case claims nothing)."""
    from gtplab.measure.sweep import case_premises

    def trial(ok=True, scope="generator and DUT", disturbed=False, offered=1000.0):
        return {"conservation": {"ok": ok, "scope": scope}, "host": {"disturbed": disturbed}, "offered_pps": offered}

    def held(rec, trials):
        return {x["premise"]: x["held"] for x in case_premises(rec, trials)}

    good = held({"limit": "dut"}, [trial(), trial()])
    assert all(good.values()) and len(good) == 4
    assert held({"limit": "dut"}, [trial(), trial(ok=False)])["every packet located"] is False
    assert held({"limit": "dut"}, [trial(scope="generator only (dut.counters: none)")])["the DUT's counters read"] is False
    busy = case_premises({"limit": "host busy", "disturbance": {"disturbed": 3, "trials": 4}}, [trial()] * 4)
    assert busy[2] == {"premise": "the host left the lab's CPUs alone", "held": False, "figures": "3 of 4 trials disturbed"}
    gen = case_premises({"limit": "generator (transmit)", "generator_bound": True,
                         "search": {"generator_short": {"short": 2, "trials": 5}}}, [trial()])
    assert gen[3] == {"premise": "the generator sent the load asked", "held": False, "figures": "short in 2 of 5 trials"}
