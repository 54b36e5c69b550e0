"""Two generator hosts in one case (issue 34, item 5; gtplab/measure/pairs.py): two TRex servers, each
in a namespace of its own with one port pair, into one PGW-U attached to both pairs
(tests/lib/pairs_lab.py). Every trial's conservation is exact over the sums of both pairs, each
pair's packets come back on that pair, and background frames on one pair's links are counted on
that pair and balance the DUT's counters. One lab for the module (two TRex starts).

Skipped, with the reason shown, only when there is no TRex runtime."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from gtplab.dut.dataplane import pgwu_binary
from gtplab.lab import trex_server
from gtplab.measure.pairs import PairsRunner
from tests.lib import REPO
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
    metrics = subprocess.Popen(["nsenter", f"--net=/run/netns/{pairs_lab.dut}", "--", str(pgwu_binary()),
                                "-d", pairs_lab.pin, "metrics", "--listen", "127.0.0.1:19464"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        cfg = tmp_path / "pairs.yaml"
        cfg.write_text("backend: trex\ndut: {metrics_url: 'http://127.0.0.1:19464/metrics'}\ngenerators:\n" + "".join(
            f"  - {{trex_server: 127.0.0.1, ports: {{access: 0, sgi: 1}}, netns: {g}, sgw_base: 10.201.{k}.16, "
            f"pdn_base: 198.18.{64 * k}.1}}\n" for k, g in enumerate(pairs_lab.gen)))
        out, hook = tmp_path / "t.jsonl", tmp_path / "hook.log"
        cp = subprocess.run(["nsenter", f"--net=/run/netns/{pairs_lab.dut}", "--", sys.executable, "-m", "gtplab",
                             "pairs", "--lab-config", str(cfg), "--direction", "downlink", "--rate", str(RATE_PPS),
                             "--duration", str(DURATION_S), "--trials", "2", "-o", str(out),
                             "--on-trial-start", f"echo started >> {hook}"],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    finally:
        metrics.terminate()
        metrics.wait(timeout=10)
    assert cp.returncode == 0, cp.stderr[-3000:]
    trials = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(trials) == 2
    for t in trials:
        assert t["conservation"]["ok"] and t["tx_packets"] == t["dut"]["fwd_packets"] > 0, t["conservation"]
        assert [(p["pair"], p["netns"]) for p in t["pairs"]] == list(enumerate(pairs_lab.gen))
        assert all(p["rx_packets"] == p["tx_packets"] > 0 for p in t["pairs"]), t["pairs"]
    assert cp.stderr.count("conservation exact") == 2, cp.stderr
    assert hook.read_text().splitlines() == ["started"] * 2
