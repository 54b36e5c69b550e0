"""Two generator hosts in one case (issue 34, item 5; gtplab/measure/pairs.py): two TRex servers, each
in a namespace of its own with one port pair, into one PGW-U attached to both pairs
(tests/lib/pairs_lab.py). Every trial's conservation is exact over the sums of both pairs, each
pair's packets come back on that pair, and background frames on one pair's links are counted on
that pair and balance the DUT's counters. One lab for the module (two TRex starts).

Skipped, with the reason shown, only when there is no TRex runtime."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from gtplab.lab import trex_server
from gtplab.measure.pairs import PairsRunner
from gtplab.results import push_metrics
from tests.lib.background import background_frames, packet_socket
from tests.lib.pairs_lab import PairsLab, _mac

pytestmark = [pytest.mark.trex, pytest.mark.lab]

RATE_PPS = 5000          # per pair
DURATION_S = 1.0


@pytest.fixture(scope="module")
def pairs_lab():
    try:
        runtime = trex_server.resolve()
    except trex_server.TrexUnavailable as e:
        pytest.skip(str(e))
    lab = PairsLab(runtime).up()
    try:
        yield lab
    finally:
        left = lab.down()
        assert not left, left


@pytest.fixture(scope="module")
def runner(pairs_lab):
    with PairsRunner(pairs_lab.pairs(), pairs_lab.counters, pairs_lab.install_bearers) as r:
        yield r


def test_pgwu_attached_to_both_pairs(pairs_lab):
    """`pgwu attach --access da0,da1 --sgi ds0,ds1`: xdp_access on both access ports, xdp_sgi on both
    SGi ports (`pgwu config`), accept_local on each SGi port."""
    conf = json.loads(pairs_lab.pgwu("config", "--json").stdout)
    assert sorted(conf["attached"]) == ["da0", "da1", "ds0", "ds1"], conf
    assert pairs_lab.attach_out.count("accept_local=1") == 2, pairs_lab.attach_out


@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_two_pairs_conservation_exact(runner, direction):
    """Two trials, both pairs started together: conservation exact over the sums (both pairs' tx =
    DUT rx, DUT forwarded = both pairs' rx), each pair sent and got back its own packets (rx == tx
    per pair: the DUT's routes sent each pair's packets out of that pair), the sums are the pairs'."""
    prep = runner.prepare(direction, {"size": 256, "flows": 8, "bearers": 8})
    for _ in range(2):
        t = runner.trial(prep, RATE_PPS, DURATION_S)
        c = t["conservation"]
        assert c["ok"], c["errors"]
        per = t["pairs"]
        assert [p["pair"] for p in per] == [0, 1]
        for p in per:
            assert p["tx_packets"] > 0.5 * RATE_PPS * DURATION_S, p
            assert p["rx_packets"] == p["tx_packets"], p
        assert t["tx_packets"] == c["gen_tx"] == sum(p["tx_packets"] for p in per)
        assert t["rx_packets"] == c["gen_rx"] == sum(p["rx_packets"] for p in per) == c["fwd"]
        assert t["dut"]["fwd_packets"] == c["dut_rx"] == t["tx_packets"]
        assert t["start_skew_s"] < 0.5, t["start_skew_s"]


def test_background_on_one_pair_counted_on_it(pairs_lab, runner):
    """Background frames on pair 1's links only (into the DUT's pair-1 access port from the generator
    side, onto generator 1's receiving port from the DUT's side) during an uplink trial: counted on
    pair 1, none on pair 0, and the balance over both pairs exact with them."""
    prep = runner.prepare("uplink", {"size": 256, "flows": 8, "bearers": 8})
    gen1 = pairs_lab.gen[1]
    to_dut = background_frames(_mac(pairs_lab.id, 1, "a", False), _mac(pairs_lab.id, 1, "a", True),
                               "10.201.1.16", "10.201.1.1")
    to_gen = background_frames(_mac(pairs_lab.id, 1, "s", True), _mac(pairs_lab.id, 1, "s", False),
                               "10.202.1.1", "10.202.1.2")
    s_gen, s_dut = packet_socket(gen1, "pa1"), packet_socket(pairs_lab.dut, "ds1")

    def send():
        time.sleep(0.3)
        for kinds, s in ((to_dut, s_gen), (to_gen, s_dut)):
            for frames in kinds.values():
                for f in frames:
                    s.send(f)
    runner.on_start = send
    try:
        t = runner.trial(prep, RATE_PPS, DURATION_S)
    finally:
        runner.on_start = None
        s_gen.close()
        s_dut.close()
    c = t["conservation"]
    assert c["ok"], c["errors"]
    p0, p1 = t["pairs"]
    assert not any(p0["background"].values()), p0
    assert p1["background"]["to_dut_ingress"] == {k: len(v) for k, v in to_dut.items()}, p1
    assert all(p1["background"]["generator_rx"].get(k, 0) >= len(v) for k, v in to_gen.items()), p1
    assert sum(t["dut"]["passed_by_reason"].values()) == c["dut_background"] > 0, (t["dut"], c)
    assert p0["rx_packets"] == p0["tx_packets"] and p1["rx_packets"] == p1["tx_packets"], t["pairs"]


def test_gtplab_pairs_command(pairs_lab, runner, tmp_path):
    """`gtplab pairs --lab-config FILE --trials 2`: the lab config's generators (each TRex client in its
    server's namespace), the DUT read through its `pgwu metrics` URL (the command runs in the DUT's
    namespace to reach it), one JSON line per trial, conservation exact in both, exit 0; its
    --on-trial-start command run once in each trial (tools/multihost/lab.py's background hook)."""
    runner.prepare("downlink", {"size": 256, "flows": 8, "bearers": 8})     # the bearers (no dut.ssh here)
    out, hook = tmp_path / "t.jsonl", tmp_path / "hook.log"
    with pairs_lab.metrics():
        cp = pairs_lab.gtplab("pairs", "--lab-config", str(pairs_lab.lab_config(tmp_path / "pairs.yaml")),
                              "--direction", "downlink", "--rate", str(RATE_PPS), "--duration", str(DURATION_S),
                              "--trials", "2", "-o", str(out),
                              "--on-trial-start", f"echo started >> {hook}")
    assert cp.returncode == 0, cp.stderr[-3000:]
    trials = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(trials) == 2
    for t in trials:
        assert t["conservation"]["ok"] and t["tx_packets"] == t["dut"]["fwd_packets"] > 0, t["conservation"]
        assert [(p["pair"], p["netns"]) for p in t["pairs"]] == list(enumerate(pairs_lab.gen))
        assert all(p["rx_packets"] == p["tx_packets"] > 0 for p in t["pairs"]), t["pairs"]
    assert cp.stderr.count("conservation exact") == 2, cp.stderr
    assert hook.read_text().splitlines() == ["started"] * 2


SWEEP_MIN_PPS, SWEEP_MAX_PPS = 10000, 40000      # the search's loads, both pairs together
SWEEP_GOALS = ("[{preset: ndr, final_trial_duration: 0.5, duration_sum: 0.5, initial_trial_duration: 0.25, "
               "width: 0.5}, {preset: pdr, loss_ratio: 0.1, final_trial_duration: 0.5, duration_sum: 0.5, "
               "initial_trial_duration: 0.25, width: 0.5}]")


def test_gtplab_sweep_over_both_pairs(pairs_lab, runner, tmp_path):
    """`gtplab sweep` over the two pairs: one uplink case at 128 B, its MLRsearch (0.5 s final trials,
    50 % width, loads 10-40 kpps aggregate) and its cost trials, every trial driving both pairs at half
    the load asked. Pair 1's last bearer is not on the DUT, so the DUT drops 1 of pair 1's 8 flows at
    every load: the NDR search goes down to min load, the PDR (10 %) holds at max load. The result
    is exact (every trial's conservation over the sums, the drops located on the DUT's counters), the
    case record says 2 pairs, and each trial's record has both pairs' figures adding up to its sums,
    each pair sending its share of the load, pair 0 losing nothing and pair 1 its 8th."""
    runner.prepare("uplink", {"size": 128, "flows": 8, "bearers": 8}, csum="on")   # the sweep's bearers
    lines = (Path(runner._tmp.name) / "bearers.txt").read_text().splitlines(keepends=True)
    assert len(lines) == 16, lines
    fewer = tmp_path / "bearers-15.txt"
    fewer.write_text("".join(lines[:-1]))           # pair 1's bearers follow pair 0's: its last one left out
    pairs_lab.install_bearers(str(fewer))
    rdir = tmp_path / "r"
    with pairs_lab.metrics():
        cp = pairs_lab.gtplab("sweep", "--lab-config", str(pairs_lab.lab_config(tmp_path / "pairs.yaml")),
                              "--out", str(rdir), "--sizes", "128", "--directions", "uplink", "--flows", "8",
                              "--bearers", "8", "--no-latency", "--pcap-limit", "0", "--no-scale",
                              "--goals", SWEEP_GOALS,
                              "--search", f"min_load={SWEEP_MIN_PPS},max_load={SWEEP_MAX_PPS},time_budget=6")
    assert cp.returncode == 0, cp.stderr[-3000:]
    cases = [json.loads(x) for x in (rdir / "cases.jsonl").read_text().splitlines()]
    assert len(cases) == 1, cases
    c = cases[0]
    assert c["pairs"] == 2 and c["conservation_ok"], c["notes"]
    assert c["premises"][0] == {"premise": "every packet located", "held": True,
                                "figures": f"0 of {len(c['trials'])} trials unbalanced"}, c["premises"]
    assert "search: 2 pairs, " in cp.stderr, cp.stderr[-2000:]
    ndr, pdr = c["goals"].values()             # the goals in the spec's order: NDR, PDR 10 %
    assert ndr["lower_pps"] is None and pdr["lower_pps"] >= SWEEP_MIN_PPS, c["goals"]
    search = [t for t in c["trials"] if t.get("phase") == "search"]
    assert len({t["rate_asked_pps"] for t in search}) >= 2, [t["rate_asked_pps"] for t in search]
    for t in c["trials"]:
        per = t["pairs"]
        assert [p["pair"] for p in per] == [0, 1], per
        assert t["conservation"]["ok"], t["conservation"]["errors"]
        assert t["tx_packets"] == sum(p["tx_packets"] for p in per) == t["conservation"]["gen_tx"]
        assert t["rx_packets"] == sum(p["rx_packets"] for p in per) == t["conservation"]["fwd"]
        assert t["tx_packets"] - t["rx_packets"] == t["loss"]["dut_dropped"] > 0, t["loss"]
        assert t["rate_split"] == {"pairs": 2, "how": "even", "per_pair_pps": t["rate_asked_pps"] / 2}, t
        p0, p1 = per
        assert p0["rx_packets"] == p0["tx_packets"] > 0 and 0 < p1["rx_packets"] < p1["tx_packets"], per
        # each pair sent its half of the load asked (TRex on af_packet reaches it here: docs/ansible.md)
        for p in per:
            assert p["offered_pps"] > 0.5 * t["rate_asked_pps"] / 2, (t["rate_asked_pps"], per)
    with open(rdir / "cases.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["pairs"] for r in rows] == ["2"], rows
    # the report's cases table and the Pushgateway's metrics say it too
    assert "generator pairs</th>" in (rdir / "report" / "index.html").read_text()
    run = json.loads((rdir / "run.json").read_text())
    assert [p["netns"] for p in run["generator_pairs"]] == pairs_lab.gen, run["generator_pairs"]
    reg = push_metrics.case_registry(run, c, now=0.0)
    assert [s.value for m in reg.collect() for s in m.samples if s.name == "gtplab_case_generator_pairs"] == [2.0]
