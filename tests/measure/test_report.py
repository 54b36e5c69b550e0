"""gtplab report: built from results directories written here by hand, following docs/results.md.

The synthetic sweep has a known cost model (CPU ns/packet = intercept + slope * frame size per
direction), so the fitted slope, intercept and R^2 the report prints can be checked exactly; a
second run with known ratios checks the comparison's percentages.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from gtplab import cli
from gtplab.results import analysis, report
from gtplab.results import store as results
from tests.lib.synthetic_results import (COST, CSUM_NS_PER_BYTE, OFFERED_PPS, SIZES, make_case, sweep_cases,
                                         write_results)
from tests.lib import REPO

class Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        if tag == "a" and not a.get("href", "#").startswith("#"):
            self.links.append(a["href"])


def refs(index: Path) -> Refs:
    p = Refs()
    p.feed(index.read_text())
    return p


def assert_all_referenced_files_exist(index: Path) -> Refs:
    r = refs(index)
    for ref in r.imgs + r.links:
        f = (index.parent / ref).resolve()
        assert f.is_file(), f"{index} references {ref}, which does not exist"
        assert f.stat().st_size > 0, f"{ref} is empty"
    for png in r.imgs:
        assert (index.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    return r


def test_report_from_results_dir(tmp_path):
    d = write_results(tmp_path / "run1", sweep_cases())
    # a flame graph for one case, where `gtplab sweep --flamegraph` puts it
    fg = d / "flamegraphs" / "case-uplink-64-1000-on.svg"
    fg.parent.mkdir()
    fg.write_text('<svg xmlns="http://www.w3.org/2000/svg"><rect width="1" height="1"/></svg>\n')

    index = report.build_report(d)
    assert index == d / "report" / "index.html"
    r = assert_all_referenced_files_exist(index)
    want = {"throughput_mpps.png", "throughput_gbps.png", "loss.png", "latency.png", "cpu_cost.png",
            "checksum.png", "flows.png"}
    assert set(r.imgs) == want
    assert set(p.name for p in index.parent.glob("*.png")) == want  # no PNG the page does not show
    assert "../flamegraphs/case-uplink-64-1000-on.svg" in r.links
    text = index.read_text()
    for c in sweep_cases():
        assert f"<td>{c['case_id']}</td>" in text
    summary = json.loads((index.parent / "summary.json").read_text())
    assert summary["plots"] and set(summary["plots"]) == want
    # the checksum-off and single-flow cases exist at 512 B only: their series cannot be fitted, and
    # the page says so (2 metrics x 2 directions x 2 series); every other plot has its data
    assert len(summary["notes"]) == 8
    assert all("not fitted: needs at least 2 frame sizes, has 1" in n and ("checksum off" in n or "1 flow (single)" in n)
               for n in summary["notes"])
    # no temporary or old directories left next to the report
    assert sorted(p.name for p in d.iterdir()) == ["cases.csv", "cases.jsonl", "flamegraphs", "report", "run.json"]


def test_regression_exact_on_linear_data(tmp_path):
    # only the fixed-parameter cases: the data is exactly linear in the frame size per direction
    d = write_results(tmp_path / "lin", [make_case(dr, s) for dr in ("uplink", "downlink") for s in SIZES])
    index = report.build_report(d)
    regs = json.loads((index.parent / "summary.json").read_text())["regressions"]
    assert len(regs) == 4
    text = index.read_text()
    for g in regs:
        a, b, c, dd = COST[g["series"]]
        slope, intercept = ((b, a) if g["metric"] == "dut.cpu_ns_per_packet" else (dd + CSUM_NS_PER_BYTE, c))
        assert g["n"] == len(SIZES) and g["sizes"] == len(SIZES)
        assert g["slope"] == pytest.approx(slope, rel=1e-9)
        assert g["intercept"] == pytest.approx(intercept, rel=1e-9)
        assert g["r2"] == pytest.approx(1.0, abs=1e-12)
        # the numbers are on the page, as formatted there
        row = f"<td>{g['slope']:.4g}</td><td>{g['intercept']:.4g}</td><td>{g['r2']:.4f}</td>"
        assert row in text
    assert "<td>0.052</td><td>310</td><td>1.0000</td>" in text


def test_regression_with_noise_and_too_few_sizes(tmp_path):
    cases = [make_case("uplink", s) for s in SIZES]
    for c, noise in zip(cases, (5.0, -5.0, 5.0, -5.0, 5.0, -5.0)):
        c["dut"]["cpu_ns_per_packet"] += noise
    cases.append(make_case("downlink", 512))  # one size only: no fit
    d = write_results(tmp_path / "noisy", cases)
    index = report.build_report(d)
    regs = {(g["metric"], g["series"]): g for g in json.loads((index.parent / "summary.json").read_text())["regressions"]}
    up = regs[("dut.cpu_ns_per_packet", "uplink")]
    assert 0.9 < up["r2"] < 1.0
    assert up["slope"] == pytest.approx(COST["uplink"][1], rel=0.05)
    down = regs[("dut.cpu_ns_per_packet", "downlink")]
    assert down["slope"] is None and down["r2"] is None and "at least 2 frame sizes" in down["note"]
    assert "not fitted: needs at least 2 frame sizes, has 1" in index.read_text()
    assert_all_referenced_files_exist(index)


def test_missing_data_gives_notes_not_empty_plots(tmp_path):
    # no latency, no DUT counters, checksum on only, multi flow only
    cases = [make_case(dr, s, latency=False, dut=False) for dr in ("uplink", "downlink") for s in SIZES]
    d = write_results(tmp_path / "sparse", cases)
    index = report.build_report(d)
    r = assert_all_referenced_files_exist(index)
    assert set(r.imgs) == {"throughput_mpps.png", "throughput_gbps.png", "loss.png"}
    assert set(p.name for p in index.parent.glob("*.png")) == set(r.imgs)
    text = index.read_text()
    assert "No latency was measured" in text
    assert "the DUT cost was not measured" in text
    assert "No checksum on vs off comparison: the cases have checksum on only (no off)" in text
    assert "No single vs multi flow comparison: the cases have flow_mode multi only (no single)" in text
    assert "No flame graphs" in text


def test_comparison_percent_changes(tmp_path):
    a = write_results(tmp_path / "a", sweep_cases())
    # B: every cost 25% higher -> rx_pps 20% lower where the DUT saturates, CPU ns/packet +25%
    b_cases = sweep_cases(scale=1.25)
    b_cases = [c for c in b_cases if c["case_id"] != "downlink-1518-1000-on"]  # only in A
    b_cases.append(make_case("uplink", 1280, scale=1.25))  # only in B
    b = write_results(tmp_path / "b", b_cases, uuid="3f2c9a1e-0000-4000-8000-000000000002")
    index = report.build_report(a, b)
    assert index == a / "report-vs-b" / "index.html"
    r = assert_all_referenced_files_exist(index)
    assert "change.png" in r.imgs and "cpu_cost.png" in r.imgs
    summary = json.loads((index.parent / "summary.json").read_text())
    assert summary["only_a"] == ["downlink-1518-1000-on"]
    assert summary["only_b"] == ["uplink-1280-1000-on"]
    assert len(summary["changes"]) == len(sweep_cases()) - 1
    for ch in summary["changes"]:
        ca = next(c for c in sweep_cases() if c["case_id"] == ch["case_a"])
        cpu_a, cpu_b, cpu_pct = ch["values"]["dut.cpu_ns_per_packet"]
        assert cpu_pct == pytest.approx(25.0)
        rx_a, rx_b, rx_pct = ch["values"]["rx_pps"]
        expect = (min(OFFERED_PPS, 1e9 / (cpu_a * 1.25)) - ca["rx_pps"]) / ca["rx_pps"] * 100
        assert rx_pct == pytest.approx(expect)
        assert ch["values"]["latency_us.p99"][2] == pytest.approx(0.0)
    saturated = [ch for ch in summary["changes"] if ch["values"]["rx_pps"][0] < OFFERED_PPS]
    assert saturated and all(ch["values"]["rx_pps"][2] == pytest.approx(-20.0) for ch in saturated)
    text = index.read_text()
    assert "+25.0%" in text and "-20.0%" in text
    # the loss of an unsaturated case is 0 in A: its change is n/a, not a division by zero
    assert any(ch["values"]["loss_ratio"][0] == 0 and ch["values"]["loss_ratio"][2] is None
               for ch in summary["changes"])


def test_pct_change():
    assert analysis.pct_change(2.0, 3.0) == pytest.approx(50.0)
    assert analysis.pct_change(4.0, 3.0) == pytest.approx(-25.0)
    assert analysis.pct_change(0.0, 3.0) is None
    assert analysis.pct_change(None, 3.0) is None


@pytest.mark.parametrize("name, content, message", [
    ("not json", '{"case_id": "x", "direction": "uplink", "frame_size": 64}\n{oops\n', r"cases.jsonl:2: not JSON"),
    ("missing field", '{"case_id": "x", "direction": "uplink"}\n', r"cases.jsonl:1: missing frame_size"),
    ("bad direction", '\n{"case_id": "x", "direction": "sideways", "frame_size": 64}\n',
     r"cases.jsonl:2: direction is 'sideways'"),
    ("bad size", '{"case_id": "x", "direction": "uplink", "frame_size": "64"}\n',
     r"cases.jsonl:1: frame_size is not a positive integer"),
    ("bad number", '{"case_id": "x", "direction": "uplink", "frame_size": 64, "rx_pps": "fast"}\n',
     r"cases.jsonl:1: rx_pps is not a number"),
    ("bad latency", '{"case_id": "x", "direction": "uplink", "frame_size": 64, "latency_us": {"p99": [1]}}\n',
     r"cases.jsonl:1: latency_us.p99 is not a number"),
    ("duplicate id", '{"case_id": "x", "direction": "uplink", "frame_size": 64}\n'
                     '{"case_id": "x", "direction": "uplink", "frame_size": 128}\n',
     r"cases.jsonl:2: case_id 'x' already on line 1"),
    ("no cases", "\n", r"cases.jsonl: no cases"),
])
def test_malformed_input(tmp_path, capsys, name, content, message):
    d = write_results(tmp_path / "bad", sweep_cases())
    (d / "cases.jsonl").write_text(content)
    with pytest.raises(results.ResultsError, match=message):
        report.build_report(d)
    assert sorted(p.name for p in d.iterdir()) == ["cases.csv", "cases.jsonl", "run.json"]  # nothing written
    # the CLI: one line naming the file and line, exit status 2
    assert cli.main(["report", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err) and str(d / "cases.jsonl") in err


def test_failure_keeps_the_previous_report(tmp_path):
    d = write_results(tmp_path / "r", sweep_cases())
    report.build_report(d)
    before = {p.name: p.read_bytes() for p in (d / "report").iterdir()}
    with open(d / "cases.jsonl", "a") as f:
        f.write('{"case_id": "late", "direction": "uplink", "frame_size": 0}\n')
    with pytest.raises(results.ResultsError, match=rf"cases.jsonl:{len(sweep_cases()) + 1}: frame_size is not a positive integer: 0"):
        report.build_report(d)
    assert {p.name: p.read_bytes() for p in (d / "report").iterdir()} == before
    assert sorted(p.name for p in d.iterdir()) == ["cases.csv", "cases.jsonl", "report", "run.json"]


def test_not_a_results_dir(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["report", str(tmp_path / "empty")]) == 2
    assert "run.json: no such file (not a gtplab results directory?)" in capsys.readouterr().err
    assert list((tmp_path / "empty").iterdir()) == []
    assert cli.main(["report", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_refuses_to_replace_a_foreign_directory(tmp_path):
    d = write_results(tmp_path / "r", sweep_cases())
    (d / "report").mkdir()
    (d / "report" / "notes.txt").write_text("mine")
    with pytest.raises(results.ResultsError, match="not a gtplab report"):
        report.build_report(d)
    assert [p.name for p in (d / "report").iterdir()] == ["notes.txt"]


def test_cli_prints_index_path_and_replaces_old_report(tmp_path, capsys):
    d = write_results(tmp_path / "r", [make_case("uplink", s) for s in (64, 1518)])
    out = tmp_path / "elsewhere" / "rep"
    assert cli.main(["report", str(d), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    (out / "stale.png").write_bytes(b"x")
    assert cli.main(["report", str(d), "-o", str(out)]) == 0
    assert not (out / "stale.png").exists()
    assert_all_referenced_files_exist(out / "index.html")
    assert sorted(p.name for p in out.parent.iterdir()) == ["rep"]




@pytest.mark.lab
def test_report_from_a_real_sweep(tmp_path):
    """A tiny real `gtplab sweep --flamegraph` (embedded lab, two sizes, both directions, 5 s searches)
    ends by printing its report's path; the report and a comparison of the run with itself are
    complete, and every case has a flame graph, with the DUT's XDP program in it, linked from the report."""
    import subprocess
    import sys
    rdir = tmp_path / "sweep"
    cp = subprocess.run([sys.executable, "-m", "gtplab", "sweep", "--no-scale", "--sizes", "128,512", "--flows", "64",
                         "--search", "time_budget=5,latency_duration=0.2", "--pcap-limit", "0", "--flamegraph",
                         "--out", str(rdir)],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    index = rdir / "report" / "index.html"
    assert f"report: {index}" in cp.stdout.splitlines(), cp.stdout
    r = assert_all_referenced_files_exist(index)
    assert {"throughput_mpps.png", "throughput_gbps.png", "loss.png", "cpu_cost.png"} <= set(r.imgs)
    # the search's plot when a goal has a relevant bound; a host that disturbed every trial (the suite's
    # labs share CPUs with other labs) leaves none, and the report says so instead
    bounded = any(g.get("lower_pps") is not None or g.get("upper_pps") is not None
                  for c in results.read_cases(rdir) for g in (c.get("goals") or {}).values())
    assert ("search.png" in r.imgs) == bounded
    if not bounded:
        assert "No case has a relevant bound" in index.read_text()
    # 128 and 512 B have room for the latency trailer: latency at the PDR's shares, unless no PDR was found
    if any((c.get("latency_pdr") or {}).get("points") for c in results.read_cases(rdir)):
        assert "latency_pdr.png" in r.imgs
    assert set(p.name for p in index.parent.glob("*.png")) == set(r.imgs)
    cases = results.read_cases(rdir)
    assert len(cases) == 4
    text = index.read_text()
    # how the DUT CPUs were kept out of halt on this host (cpuidle states off with a cpuidle driver,
    # the spinner without one), in run.json and in the report's layout sentence
    aw = results.read_run(rdir)["cpu_layout"]["awake"]
    assert aw["method"] in ("cpuidle", "spinner") and aw["applied"], aw
    assert "the DUT CPUs kept out of halt by " in " ".join(re.sub(r"<[^>]+>", " ", text).split())
    assert all(c["cost"]["dut_cpu_ns_per_packet"] for c in cases), [c["cost"] for c in cases]
    for c in cases:
        assert f"<td>{c['case_id']}</td>" in text
        svg = rdir / c["flamegraph"]
        assert svg.stat().st_size > 0 and svg.parent.name == "flamegraphs"
        assert os.path.relpath(svg, index.parent) in text, f"flame graph of {c['case_id']} not linked"
        prog = "xdp_access" if c["direction"] == "uplink" else "xdp_sgi"
        assert prog in svg.with_suffix(".folded").read_text(), f"{prog} not in the profile of {c['case_id']}"
    summary = json.loads((index.parent / "summary.json").read_text())
    fits = [g for g in summary["regressions"] if g["metric"] == "dut.ns_per_packet"]
    assert {g["series"] for g in fits} == {"uplink", "downlink"}
    assert all(g["slope"] is not None and g["sizes"] == 2 for g in fits)
    # the run against itself: every case matched, every change 0 %
    index2 = report.build_report(rdir, rdir, tmp_path / "self")
    assert_all_referenced_files_exist(index2)
    changes = json.loads((index2.parent / "summary.json").read_text())["changes"]
    assert len(changes) == 4
    assert all(v[2] in (None, 0.0) for ch in changes for v in ch["values"].values())
    assert all(ch["values"]["rx_pps"][2] == 0.0 for ch in changes)


def ndr_case(direction: str, size: int, ndr: float | None, limit: str) -> dict:
    """A case of an NDR sweep as it is written now: the claim, and which side set it."""
    c = make_case(direction, size)
    c["rate_mode"] = "ndr"
    c["ndr_pps"] = ndr
    c["limit"] = limit
    c["generator_bound"] = ndr is None
    c["ndr"] = ({"mpps": ndr / 1e6, "gbps_l1": ndr * (size + 20) * 8 / 1e9, "gbps_l2": ndr * size * 8 / 1e9}
                if ndr else {"mpps": None, "gbps_l1": None, "gbps_l2": None})
    c["trials"] = [{"offered_pps": 2e6, "passed": False}, {"offered_pps": ndr or 2e6, "passed": True}]
    return c


def test_report_says_which_side_was_the_limit_and_compares_with_the_forwarder(tmp_path):
    lay = {"generator": [0], "dut": [1], "honoured": True, "notes": [], "threads": {}}
    pg = write_results(tmp_path / "pgwu", [ndr_case("uplink", 64, 600e3, "dut"),
                                           ndr_case("downlink", 64, None, "generator (receive)")])
    fw = write_results(tmp_path / "fwd", [ndr_case("uplink", 64, 1.5e6, "dut"),
                                          ndr_case("downlink", 64, 1.6e6, "dut")],
                       uuid="3f2c9a1e-0000-4000-8000-000000000002")
    for d, mode in ((pg, "pgwu"), (fw, "fwd")):
        run = json.loads((d / "run.json").read_text())
        (d / "run.json").write_text(json.dumps({**run, "dut_mode": mode, "cpu_layout": lay}))
    index = report.build_report(pg, fw)
    page = index.read_text()
    text = re.sub(r"<[^>]+>", " ", page)
    assert "The layout was honoured" in text
    assert "DUT: loss began at the DUT above this rate" in text
    assert "generator (receive): no NDR claimed" in text
    summary = json.loads((index.parent / "summary.json").read_text())
    ratios = {(r["direction"], r["frame_size"]): r for r in summary["reference_ratios"]}
    assert ratios[("uplink", 64)]["ratio"] == pytest.approx(0.4)
    assert ratios[("downlink", 64)]["ratio"] is None and "PGW-U" in ratios[("downlink", 64)]["note"]
    # a run whose layout was not honoured says so at the top
    run = json.loads((pg / "run.json").read_text())
    (pg / "run.json").write_text(json.dumps({**run, "cpu_layout": {**lay, "honoured": False,
                                                                   "notes": ["CPU(s) 0 run both"]}}))
    text = re.sub(r"<[^>]+>", " ", report.build_report(pg).read_text())
    assert "NOT honoured" in text and "CPU(s) 0 run both" in text


def test_report_layout_sentence_says_what_was_not_applied_and_what_it_cost(tmp_path):
    """Issue 26: the layout sentence says what of the measurement model this host applied (threads
    pinned, the DUT CPUs kept out of halt and how, CPUs to itself), what it did not, and what the run
    measured of the cost (disturbed trials, the DUT threads' run-queue wait, others on the DUT CPUs)."""
    def host(disturbed, wait, others, shared=()):
        return {"disturbed": disturbed, "reasons": [], "dut": {"wait_ratio": wait, "others_ratio": others},
                "generator": {}, "shared_with": list(shared)}
    other = {"lab": "b0b", "pid": 4242, "cpus": [1], "shared": False}
    case = ndr_case("uplink", 64, 600e3, "dut")
    case["trials"] = [{"offered_pps": 2e6, "passed": False, "host": host(True, 0.2, 0.5, [other])},
                      {"offered_pps": 6e5, "passed": True, "host": host(False, 0.01, 0.0)},
                      {"offered_pps": 5e5, "passed": True, "host": host(False, 0.03, 0.02)}]
    d = write_results(tmp_path / "r", [case])
    lay = {"generator": [0], "dut": [1], "honoured": True, "notes": [], "threads": {},
           "awake": {"method": "none", "applied": False, "notes": ["no cpuidle states on CPU(s) 1"]},
           "claim": {"cpus": [0, 1], "shared": True, "shared_with": []}}
    run = json.loads((d / "run.json").read_text())
    (d / "run.json").write_text(json.dumps({**run, "cpu_layout": lay}))
    text = " ".join(re.sub(r"<[^>]+>", " ", report.build_report(d).read_text()).split())
    assert "Not applied: the DUT CPUs kept out of halt (no cpuidle states on CPU(s) 1)" in text, text
    assert "CPUs to itself: shared with lab b0b (pid 4242)" in text
    assert "over 3 trials: 1 disturbed by the host" in text and "waited runnable a median 3.0%" in text
    assert "(waking a halted CPU is part of it)" in text and "The layout was honoured in part" in text
    # all of it applied, nothing disturbed: the DUT's numbers, said as before
    lay.update(awake={"method": "spinner", "applied": True, "notes": []})
    case["trials"] = [t for t in case["trials"] if not t["host"]["disturbed"]]
    d2 = write_results(tmp_path / "r2", [case])
    run = json.loads((d2 / "run.json").read_text())
    (d2 / "run.json").write_text(json.dumps({**run, "cpu_layout": lay}))
    text = " ".join(re.sub(r"<[^>]+>", " ", report.build_report(d2).read_text()).split())
    assert "kept out of halt by a SCHED_IDLE spinner" in text and "CPU(s) 0, 1 held by this lab alone" in text
    assert "The layout was honoured: every rate and CPU cost below is the DUT's" in text


def test_report_shows_the_dut_cost_above_the_reference_forwarder(tmp_path):
    """Issue 26 item 5: each case's CPU ns/packet above the reference forwarder's (Runner.case_costs,
    the case's "cost") is in the report's table of cases and in cases.csv; a case without it shows
    nothing there rather than a number."""
    a, b = ndr_case("uplink", 64, 600e3, "dut"), ndr_case("downlink", 64, 500e3, "dut")
    a["cost"] = {"dut_cpu_ns_per_packet": 1234.0, "reference_cpu_ns_per_packet": 1000.5,
                 "above_reference_ns_per_packet": 233.5, "xdp_ns_per_packet": 210.0, "notes": [], "trials": []}
    b["cost"] = {"dut_cpu_ns_per_packet": 900.0, "reference_cpu_ns_per_packet": None,
                 "above_reference_ns_per_packet": None, "xdp_ns_per_packet": None, "notes": [], "trials": []}
    d = write_results(tmp_path / "r", [a, b])
    page = report.build_report(d).read_text()
    head = re.search(r'<table class="cases"><tr>(.*?)</tr>', page).group(1)
    cols = re.findall(r"<th>(.*?)</th>", head)
    i, j = cols.index("CPU ns/pkt above ref"), cols.index("ref CPU ns/pkt")
    rows = {r[0]: r for r in (re.findall(r"<td>(.*?)</td>", tr) for tr in re.findall(r"<tr>(<td>.*?)</tr>", page))
            if r}
    assert (rows[a["case_id"]][i], rows[a["case_id"]][j]) == ("233.5", "1000"), rows[a["case_id"]]
    assert (rows[b["case_id"]][i], rows[b["case_id"]][j]) == ("–", "–")
    import csv
    results.write_csv(d / "cases.csv", results.read_cases(d))      # as the sweep writes it
    with open(d / "cases.csv") as f:
        got = {r["case_id"]: r for r in csv.DictReader(f)}
    assert got[a["case_id"]]["cost.above_reference_ns_per_packet"] == "233.5"
    assert got[b["case_id"]]["cost.above_reference_ns_per_packet"] == ""


def test_report_shows_bearer_scale_ratio(tmp_path):
    """Issue 13: the 1 M random-order case next to the 1024-bearer case of the same size, their
    NDR ratio against the 0.7 target, and no mix-up with the forwarder comparison."""
    seq_up = ndr_case("uplink", 64, 800e3, "dut")
    rnd_up = {**ndr_case("uplink", 64, 500e3, "dut"), "case_id": "up-64-1M", "flows": 1_000_000,
              "bearers": 1_000_000, "order": "random"}
    seq_dn = ndr_case("downlink", 64, 900e3, "dut")
    rnd_dn = {**ndr_case("downlink", 64, 720e3, "dut"), "case_id": "dn-64-1M", "flows": 1_000_000,
              "bearers": 1_000_000, "order": "random"}
    lone = {**ndr_case("uplink", 512, 400e3, "dut"), "case_id": "up-512-1M", "order": "random",
            "flows": 1_000_000}
    d = write_results(tmp_path / "r", [seq_up, seq_dn, rnd_up, rnd_dn, lone])
    index = report.build_report(d)
    rows = {(r["direction"], r["frame_size"]): r
            for r in json.loads((index.parent / "summary.json").read_text())["scale_ratios"]["A"]}
    assert rows[("uplink", 64)]["ratio"] == pytest.approx(0.625)
    assert rows[("downlink", 64)]["ratio"] == pytest.approx(0.8)
    assert rows[("uplink", 512)]["ratio"] is None and "no sequential" in rows[("uplink", 512)]["note"]
    text = re.sub(r"<[^>]+>", " ", index.read_text())
    assert "Bearer scale" in text and "0.625 not met" in text and "0.8 met" in text
    # against a forwarder run, only the sequential cases are compared
    fw = write_results(tmp_path / "f", [ndr_case("uplink", 64, 1.6e6, "dut")],
                       uuid="3f2c9a1e-0000-4000-8000-000000000003")
    for x, mode in ((d, "pgwu"), (fw, "fwd")):
        run = json.loads((x / "run.json").read_text())
        (x / "run.json").write_text(json.dumps({**run, "dut_mode": mode}))
    index = report.build_report(d, fw)
    ref = json.loads((index.parent / "summary.json").read_text())["reference_ratios"]
    assert [(r["direction"], r["dut_ndr_pps"]) for r in ref] == [("uplink", 800e3)]


def test_report_of_a_searched_run_states_goals_bounds_latency_and_host_busy(tmp_path):
    """Cases as `gtplab sweep` writes them with rate mode search (run_case with a fake runner): the
    report opens with the search (the method, the deviations from RFC 2544's trial, every goal
    attribute, per case and goal the bounds and regularity) and the latency at the PDR's shares,
    plots both, names each claim's goal; the case the host mostly disturbed says host busy, with
    its figures, and no limit of the DUT."""
    from gtplab.lab import config as labconfig
    from gtplab.measure import plan, sweep
    from tests.lib.fake_runner import FakeRunner

    spec = plan.validate({"frame_sizes": [128, 512], "directions": ["uplink", "downlink"], "rate_mode": "search",
                           "pcap_limit": 0, "search": {"latency_duration": 0.1}})
    cases, _ = plan.plan(spec)
    d = tmp_path / "r"
    run = {"uuid": "3f2c9a1e-0000-4000-8000-0000000000b1", "started": "2026-01-02T03:04:05+00:00",
           "backend": "local", "lab": "embedded", "host": "h", "spec": spec}
    results.write_run(d, run)
    busy = lambda n, pps: {"disturbed": n % 4 != 3, "reasons": ["other tasks took 40 % of DUT CPU 1"]}  # noqa: E731
    for i, p in enumerate(cases):
        fr = FakeRunner(capacity=300e3 + 100e3 * i, host=busy if i == 0 else None)
        rec = sweep.run_case(fr, p, spec, labconfig.load("embedded"), None, None)
        results.append_case(d, {**rec, "run_uuid": run["uuid"]})
    index = report.build_report(d)
    r = assert_all_referenced_files_exist(index)
    assert {"search.png", "latency_pdr.png"} <= set(r.imgs)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", index.read_text()))
    assert "Search results per goal (MLRsearch, RFC 9971)" in text
    assert "Deviations from RFC 2544's trial (RFC 9971 4.4.3): trials of 0.5 s instead of 60 s" in text
    assert "excluded from Load Classification (measured again)" in text
    assert "when it sent at most 1 % less than the load asked" in text       # the shortfall forgiven
    # every goal attribute, both goals, each with RFC 9971's dense code beside its short name
    assert "NDR 0.5f1d0l50e 0 % 50 % 0.5 s 1 s 2 % 0.5 s" in text
    assert "PDR0.5 0.5f1d0.5l50e 0.5 % 50 % 0.5 s 1 s 2 % 0.5 s" in text
    first, *others = results.read_cases(d)
    assert first["limit"] == "host busy"
    assert re.search(rf"{first['case_id']} NDR \[0.5f1d0l50e\] – – – [\d.]+ host busy: \d+ of \d+ trials disturbed \(\d+% of the trial "
                     r"time\): other tasks took 40 % of DUT CPU 1; nothing claimed", text), text[:3000]
    for c in others:
        assert c["limit"] == "dut"
        g = c["goals"]["PDR0.5"]
        assert f"{c['case_id']} PDR0.5 [0.5f1d0.5l50e] {g['lower_pps'] / 1e6:.4g} {g['upper_pps'] / 1e6:.4g}" in text
    assert "Latency at 0, 10, 50 and 90 % of the PDR" in text and "idle: load Mpps" in text
    summary = json.loads((index.parent / "summary.json").read_text())
    assert summary["goals"] == ["NDR", "PDR0.5"]
    assert summary["goal_labels"] == {"NDR": "NDR [0.5f1d0l50e]", "PDR0.5": "PDR0.5 [0.5f1d0.5l50e]"}
    assert "NDR [0.5f1d0l50e] lower Mpps" in text and "PDR0.5 [0.5f1d0.5l50e] lower Mpps" in text  # all cases



def test_report_of_three_runs_names_each_dut_and_puts_them_side_by_side(tmp_path):
    """`gtplab report PGWU EUPF FWD`: each run named by the DUT it measured (the header, every plot's
    title, the tables), their NDR and costs in one table per direction and size, the change from A to
    each other run, and each UPF divided by the reference forwarder."""
    lay = {"generator": [0], "dut": [1], "honoured": True, "notes": [], "threads": {}}
    pg = write_results(tmp_path / "pgwu", [ndr_case("uplink", 64, 600e3, "dut"), ndr_case("downlink", 64, 700e3, "dut")])
    eu = write_results(tmp_path / "eupf", [ndr_case("uplink", 64, 300e3, "dut"),
                                           ndr_case("downlink", 64, None, "generator (receive)")],
                       uuid="3f2c9a1e-0000-4000-8000-000000000005")
    fw = write_results(tmp_path / "fwd", [ndr_case("uplink", 64, 1.5e6, "dut"), ndr_case("downlink", 64, 1.4e6, "dut"),
                                          ndr_case("uplink", 512, 1.2e6, "dut")],
                       uuid="3f2c9a1e-0000-4000-8000-000000000006")
    for d, extra in ((pg, {"dut_mode": "pgwu"}),
                     (eu, {"dut_mode": "external", "dut_name": "eUPF a8d774a", "lab": "embedded-eupf",
                           "dut_counters": "eupf", "dut_provision": "pfcp",
                           "cpu_layout": {**lay, "upf": {"pid": 4242, "cpus": [1], "threads": 6}}}),
                     (fw, {"dut_mode": "fwd"})):
        run = json.loads((d / "run.json").read_text())
        (d / "run.json").write_text(json.dumps({"cpu_layout": lay, **run, **extra}))
    index = report.build_report(pg, [eu, fw])
    assert index == pg / "report-vs-eupf-fwd" / "index.html"
    summary = json.loads((index.parent / "summary.json").read_text())
    assert summary["duts"] == {"A": "PGW-U", "B": "eUPF a8d774a", "C": "reference forwarder"}
    side = {(r["direction"], r["frame_size"]): r["runs"] for r in summary["side_by_side"]}
    assert [k for k in side] == [("uplink", 64), ("uplink", 512), ("downlink", 64)]
    assert side[("uplink", 64)]["B"]["ndr_pps"] == 300e3 and side[("uplink", 512)]["A"] is None
    assert side[("downlink", 64)]["B"]["ndr_pps"] is None and "generator (receive)" in side[("downlink", 64)]["B"]["limit"]
    by_run = summary["reference_ratios_by_run"]
    assert set(by_run) == {"A", "B"}                       # every UPF against the forwarder, not the forwarder
    up = {r["direction"]: r for r in by_run["B"]}
    assert up["uplink"]["ratio"] == pytest.approx(0.2) and up["downlink"]["ratio"] is None
    assert "eUPF a8d774a: " in up["downlink"]["note"]
    assert summary["reference_ratios"] == by_run["A"] and by_run["A"][0]["ratio"] == pytest.approx(0.4)
    assert len(summary["changes"]) == 2 and set(summary["changes_from_a"]) == {"C"}
    page = index.read_text()
    text = re.sub(r"<[^>]+>", " ", page)
    for words in ("PGW-U (veth-lab", "eUPF a8d774a (embedded-eupf", "A: PGW-U", "B: eUPF a8d774a",
                  "C: reference forwarder", "The DUTs side by side", "eUPF a8d774a (B) against the reference forwarder (C)",
                  "PGW-U (A) against the reference forwarder (C)", "Change from A (PGW-U) to B (eUPF a8d774a)",
                  "Change from A (PGW-U) to C (reference forwarder)", "an external UPF in the namespace lab",
                  "the UPF's own process (pid 4242, 6 threads"):
        assert words in text, words
    assert (index.parent / "change.png").is_file() and (index.parent / "change-C.png").is_file()
    assert report.do_report(SimpleNamespace(results_dir=str(pg), other_dirs=[str(eu), str(fw)], out=None)) == 0
