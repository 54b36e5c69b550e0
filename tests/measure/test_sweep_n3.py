"""The sweep's outer-family dimension (issue 32 item 2, GTP-U over IPv6): `--n3 4,6` / spec key `n3`
in the plan, the cases' tunables, ids and smallest sizes, bad values and the zero checksum over IPv6
(one line, exit 2), the PGW-U refused as the DUT of `--n3 6` (one line, exit 2, nothing built), the
`n3` field in the results (record, CSV column, report table, Pushgateway label, results written
before it read as 4). No lab: the sweep through a UPF that takes N3 over IPv6 is
tests/lab/test_open5gs.py::test_n3_over_ipv6_through_open5gs_both_ways_packet_for_packet."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.measure import plan, sweep
from gtplab.results import analysis, html, push
from gtplab.results.store import ResultsError
from tests.lib import REPO


def _spec(**kw):
    return plan.validate({"frame_sizes": [64, 128], "directions": ["uplink", "downlink"], **kw})


def test_default_plan_is_n3_ipv4_and_unchanged():
    cases, _ = plan.plan(plan.load_spec(None))
    assert {c.n3 for c in cases} == {"4"} and plan.load_spec(None)["n3"] == ["4"]
    assert all("-n3v" not in c.case_id and "n3" not in c.tunables() for c in cases)


def test_n3_dimension_multiplies_the_grid_with_its_own_minimum():
    cases, _ = plan.plan(_spec(n3=[4, 6], ip=[4, 6]))
    assert len(cases) == 2 * 2 * 2 * 2
    by = {(c.direction, c.frame_size, c.ip, c.n3): c for c in cases}
    assert by["uplink", 64, "4", "6"].actual_size == 102 and by["uplink", 64, "6", "6"].actual_size == 122
    assert by["uplink", 64, "4", "4"].actual_size == 82 and by["downlink", 64, "4", "6"].actual_size == 64
    c = by["uplink", 128, "6", "6"]
    assert c.case_id == "uplink-128-multi1024-csumon-ip6-n3v6-fixed"
    assert c.tunables()["n3"] == "6" and c.tunables()["outer_udp_csum"] == "valid"
    assert by["downlink", 128, "4", "6"].case_id == "downlink-128-multi1024-csumon-n3v6-fixed"
    # latency needs 16 payload bytes: 128 - 4 - 122 + 4 leaves 6 over IPv6 with inner IPv6
    assert c.tunables()["stats"] == "none" and by["uplink", 128, "4", "6"].tunables()["stats"] == "latency"


def test_undersize_skip_and_error_over_ipv6():
    _, skipped = plan.plan(_spec(n3=["6"], frame_sizes=[100, 128], undersize="skip"))
    assert [(s["direction"], s["frame_size"], s["n3"]) for s in skipped] == [("uplink", 100, "6")]
    assert "over IPv6 (GTP-U)" in skipped[0]["note"]
    with pytest.raises(UserError, match="below the uplink minimum 102 over IPv6"):
        _spec(n3=["6"], frame_sizes=[100], undersize="error")


@pytest.mark.parametrize("bad", [[5], ["v6"], [], [6, 6], [True], ["4v6"]])
def test_bad_n3_in_the_spec_is_one_error(bad):
    with pytest.raises(UserError, match="^sweep spec: n3 "):
        _spec(n3=bad)


def test_a_zero_checksum_over_ipv6_is_refused():
    with pytest.raises(UserError, match=r"checksum off with n3 6: a UDP checksum is mandatory over IPv6 \(RFC 8200"):
        _spec(n3=[4, 6], checksum=["on", "off"])
    assert _spec(n3=[6], checksum=["off"], directions=["downlink"])["n3"] == ["6"]   # no uplink: no outer UDP sent


def _sweep(*args, tmp):
    return subprocess.run([sys.executable, "-m", "gtplab", "sweep", *args, "--out", str(tmp / "o")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,words", [(["--n3", "5"], "n3"),
                                        (["--n3", "6", "--checksum", "off"], "RFC 8200")])
def test_bad_n3_on_the_command_line_exits_2_with_one_line(args, words, tmp_path):
    """Refused before anything is built."""
    cp = _sweep(*args, tmp=tmp_path)
    assert cp.returncode == 2, cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_cli_override_reaches_the_plan():
    ns = argparse.Namespace(**{k: None for k in ("sizes", "directions", "flow_modes", "flows", "bearers",
                                                 "checksum", "rate_mode", "rate", "duration", "goals",
                                                 "search", "max_trials", "pcap_limit", "ip")},
                            no_latency=False, no_scale=True, n3="4,6")
    s = plan.apply_overrides(plan.load_spec(None), ns)
    assert s["n3"] == ["4", "6"] and {c.n3 for c in plan.plan(s)[0]} == {"4", "6"}


def test_scale_cases_stay_on_n3_ipv4():
    cases, _ = plan.plan(_spec(n3=["6"], scale={"flows": 1000, "order": "random", "frame_sizes": [128]}))
    assert [c.n3 for c in cases if c.order == "random"] == ["4", "4"]


def test_n3_in_the_results():
    run = {"uuid": "u", "backend": "local"}
    case = {"direction": "uplink", "case_id": "x", "frame_size": 128, "flows": 4, "checksum": "on"}
    assert push.grouping_key(run, {**case, "n3": "6"})["n3"] == "6"
    assert push.grouping_key(run, case)["n3"] == "4"              # results written before it
    assert ("n3", "N3", 1.0) in html.CASE_COLUMNS and "n3" in analysis.VARIANT_DIMS
    assert analysis.dim_label("n3", "6") == "GTP-U over IPv6"


def test_results_without_n3_read_as_4_and_a_bad_one_is_refused(tmp_path):
    from tests.lib.synthetic_results import sweep_cases, write_results
    d = write_results(tmp_path / "r", sweep_cases())
    assert {c["n3"] for c in analysis.load(d).cases} == {"4"}
    lines = (d / "cases.jsonl").read_text().splitlines()
    (d / "cases.jsonl").write_text("\n".join([json.dumps({**json.loads(lines[0]), "n3": "5"})] + lines[1:]) + "\n")
    with pytest.raises(ResultsError, match="n3 is .5., not 4 or 6"):
        analysis.load(d)


def test_a_pfcp_upf_without_an_n3_ipv6_address_is_one_line_before_any_session():
    """dut.pfcp.n3 with only an IPv4 address: a case over IPv6 stops with one line before a session
    is asked for (each would need the UPF's IPv6 F-TEID)."""
    from types import SimpleNamespace
    from gtplab.measure.runner import Runner
    from gtplab.pfcp import provision as prov
    installed = []
    stub = SimpleNamespace(ports=lambda d: (0, 1), install_bearers=lambda p, t: installed.append(p),
                           dut=SimpleNamespace(cfg=prov.parse_config({"upf": "10.203.0.1", "n3": "10.201.0.1",
                                                                     "n6": "10.202.0.1"}, "x")))
    (c,) = plan.plan(plan.validate({"frame_sizes": [256], "directions": ["uplink"], "n3": [6]}))[0]
    with pytest.raises(UserError, match=r"^--n3 6: dut.pfcp.n3 has no IPv6 address of the UPF"):
        Runner.prepare(stub, c)
    assert installed == []
