"""Several generator port pairs (issue 34, item 5; gtplab/lab/generators.py, gtplab/measure/pairs.py):
the lab config's `generators:` form, its bad forms refused in one line with exit 2, the bearers split
between pairs, and the balance over the pairs' sums (a pair left out of the sum fails it). The
trials with TRex are tests/trex/test_pairs.py's."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import textwrap

import pytest

from gtplab import cli
from gtplab.gtpu import bearers as bearer_files
from gtplab.lab import config as labconfig
from gtplab.measure import conservation
from gtplab.measure.pairs import aggregate, split_tunables
from tests.lib import REPO

GTPLAB = [sys.executable, "-m", "gtplab"]

TWO = """
backend: trex
dut: {metrics_url: "http://dut.example:9464/metrics"}
generators:
  - {trex_server: "trex-a:4501", ports: {access: 0, sgi: 1}}
  - {trex_server: "trex-b", ports: {access: 0, sgi: 1}, sgw_base: 10.201.7.16, pdn_base: 198.19.0.1}
"""


def _write(tmp_path, text: str):
    p = tmp_path / "lab.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_two_pairs_parsed(tmp_path):
    """Two pairs on two servers: each its server, ports and addresses (defaults for the first)."""
    cfg = labconfig.load(str(_write(tmp_path, TWO)))
    a, b = cfg.generators
    assert (a.server, a.access, a.sgi, a.sgw_base, a.pdn_base) == ("trex-a:4501", 0, 1, "10.201.0.16", "198.18.0.1")
    assert (b.server, b.access, b.sgi, b.sgw_base, b.pdn_base) == ("trex-b", 0, 1, "10.201.7.16", "198.19.0.1")
    assert cfg.ports == {"access": 0, "sgi": 1}


def test_one_pair_form_still_one_pair():
    """The shipped configs (ports + trex_server) are one pair."""
    cfg = labconfig.load("example-trex")
    (p,) = cfg.generators
    assert (p.server, p.access, p.sgi) == (cfg.trex_server, cfg.ports["access"], cfg.ports["sgi"])


BAD = {
    "pair_missing_a_port": ("""
        backend: trex
        generators:
          - {trex_server: a, ports: {access: 0, sgi: 1}}
          - {trex_server: b, ports: {access: 0}}
        """, "generators[1].ports has no sgi port"),
    "same_port_twice": ("""
        backend: trex
        trex_server: a
        generators:
          - {ports: {access: 0, sgi: 1}}
          - {ports: {access: 2, sgi: 1}}
        """, "generators[1].ports.sgi: port 1 of a is already generators[0]'s sgi port"),
    "same_port_twice_other_spelling": ("""
        backend: trex
        generators:
          - {trex_server: "a", ports: {access: 0, sgi: 1}}
          - {trex_server: "a:4501", ports: {access: 0, sgi: 3}}
        """, "generators[1].ports.access: port 0 of a:4501 is already generators[0]'s access port"),
    "different_servers_on_one_trex_lab": ("""
        backend: trex
        lab: {generator: trex}
        generators:
          - {trex_server: a, ports: {access: 0, sgi: 1}}
          - {trex_server: b, ports: {access: 0, sgi: 1}}
        """, "generators on different TRex servers, but this lab has one TRex"),
    "both_forms": ("""
        backend: trex
        ports: {access: 0, sgi: 1}
        generators:
          - {trex_server: a, ports: {access: 0, sgi: 1}}
        """, "give ports (one pair) or generators (several), not both"),
    "same_addresses": ("""
        backend: trex
        generators:
          - {trex_server: a, ports: {access: 0, sgi: 1}, sgw_base: 10.201.0.16}
          - {trex_server: b, ports: {access: 0, sgi: 1}, sgw_base: 10.201.0.16}
        """, "generators[1].sgw_base 10.201.0.16 is also generators[0]'s"),
    "engine_backend": ("""
        generators:
          - {ports: {access: 0, sgi: 1}}
        """, "generators (several port pairs) need backend: trex"),
    "unknown_key": ("""
        backend: trex
        generators:
          - {trex_server: a, ports: {access: 0, sgi: 1}, speed: 3}
        """, "generators[0]: unknown speed"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_generators_one_line_exit_2(tmp_path, case):
    """A bad generators: list -> one line naming the key, exit 2, no traceback, nothing written."""
    text, want = BAD[case]
    cp = subprocess.run(GTPLAB + ["sweep", "--lab-config", str(_write(tmp_path, text)), "--out", str(tmp_path / "o")],
                        capture_output=True, text=True, timeout=60, cwd=REPO)
    assert cp.returncode == 2, (cp.returncode, cp.stderr)
    assert want in cp.stderr and len(cp.stderr.strip().splitlines()) == 1 and "Traceback" not in cp.stderr, cp.stderr
    assert not (tmp_path / "o").exists()


# what the sweep cannot do over several pairs: (extra arguments, what its one line says)
SWEEP_REFUSED = {
    "latency": ([], "latency streams over several pairs are not built: add --no-latency"),
    "pcap": (["--no-latency"], "captures over several pairs are not built: add --pcap-limit 0"),
    "ipv6": (["--no-latency", "--pcap-limit", "0", "--ip", "6"], "--ip 6/4v6 and --n3 6 over several pairs"),
    "namespace lab": (["--no-latency", "--pcap-limit", "0", "--backend", "local"], "not on a namespace lab"),
    "trex-server": (["--no-latency", "--pcap-limit", "0", "--trex-server", "t"], "each pair names its server"),
}


@pytest.mark.parametrize("case", sorted(SWEEP_REFUSED))
def test_sweep_refuses_what_pairs_cannot_do(tmp_path, capsys, case):
    """A valid two-pair config given to the sweep with what it does not do over several pairs
    (latency streams, captures, IPv6, a namespace lab, one --trex-server): one line, exit 2, before
    anything runs (no results directory). In this process (gtplab.cli.main, as `gtplab` runs it): a
    subprocess each cost 4-5 s on a busy host."""
    extra, want = SWEEP_REFUSED[case]
    rc = cli.main(["sweep", "--lab-config", str(_write(tmp_path, TWO)), "--out", str(tmp_path / "o"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "2 generator pairs: " in err and want in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists(), err


def test_bearers_split_between_pairs(tmp_path):
    """Each pair's bearers are its own: UE addresses and TEIDs of the pairs do not overlap, SGWs and
    PDN addresses are the pair's."""
    pairs = labconfig.load(str(_write(tmp_path, TWO))).generators
    tuns = split_tunables({"size": 256, "flows": 8, "bearers": 8}, pairs, "uplink")
    seen_ue, seen_teid = set(), set()
    for p, t in zip(pairs, tuns):
        out = tmp_path / f"b{p.index}.txt"
        n = bearer_files.write_bearer_file("uplink", t, str(out))
        rows = [ln.split() for ln in out.read_text().splitlines() if not ln.startswith("#")]
        assert n == len(rows) == 8
        teids, ues, sgws = {int(r[0], 0) for r in rows}, {r[1] for r in rows}, {r[2] for r in rows}
        assert not teids & seen_teid and not ues & seen_ue
        seen_teid |= teids
        seen_ue |= ues
        net = ipaddress.ip_network(p.sgw_base + "/24", strict=False)
        assert all(ipaddress.ip_address(s) in net for s in sgws), (p, sgws)
        assert t["pdn_base"] == p.pdn_base


def _pair(tx, rx_all, bg_rx=None, bg_in=None):
    return {"gen_tx": tx, "gen_rx_all": rx_all,
            "background": conservation.Background(gen_rx=bg_rx or {}, to_dut_in=bg_in or {}, to_dut_other={})}


def test_balance_is_over_every_pair():
    """Two pairs' counts against the DUT's one set of counters: exact with both in the sum; leaving
    either pair's tx, rx or background out unbalances it."""
    a = _pair(5000, 5001, bg_rx={"arp": 1})
    b = _pair(4000, 4000, bg_in={"lldp": 2})
    dut = conservation.DutDelta(rx_packets=9002, fwd_packets=9000, passed_by_reason={"pass_not_ipv4": 2})
    c = aggregate([a, b], dut)
    assert c.ok, c.errors
    assert (c.gen_tx, c.gen_rx, c.dut_rx, c.dut_background) == (9000, 9000, 9002, 2)
    for left in ([a], [b]):
        assert not aggregate(left, dut).ok


@pytest.mark.parametrize("access,sgi,want", [
    ("lo,lo", "lo", "lo is given twice"),
    ("lo", "lo", "lo is given twice"),
    ("lo,,lo", "lo", "--access lo,,lo: an empty or too long interface name"),
    ("lo,lo,lo,lo,lo", "lo", "--access lo,lo,lo,lo,lo: at most 4 interfaces"),
])
def test_pgwu_attach_bad_interface_lists(tmp_path, access, sgi, want):
    """`pgwu attach` with a bad --access/--sgi list: one line, exit 2, before anything is loaded
    (the pin dir given is not even on bpffs)."""
    from gtplab.dut.dataplane import pgwu_binary
    cp = subprocess.run([str(pgwu_binary()), "-d", str(tmp_path / "pins"), "attach", "--access", access, "--sgi", sgi],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2 and want in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert not (tmp_path / "pins").exists()
