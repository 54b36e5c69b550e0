"""`gtplab conformance` against the lab's UPFs, end to end: the command builds the lab of a lab config
(embedded: the PGW-U; embedded-eupf: eUPF; embedded-open5gs: Open5GS's UPF; the last two skipped
with the reason when their runtime is absent), runs every case, writes run.json and cases.jsonl,
exits 0 (1 when a case fails: Open5GS's downlink Packet Too Big); each case's result is the one expected here (the PGW-U passes every case; eUPF and Open5GS
depart as gtplab/conformance/departs.py says, case by case, and have none of the PGW-U's own knobs;
Open5GS has no 802.1Q case, as it never sees a frame). `conformance table` puts the two runs side by side. The lab is
the command's, always torn down (checked: no lab of the run is left)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gtplab.conformance import cases as C
from tests.lib import REPO
from tests.lib.lab import leftovers

pytestmark = pytest.mark.lab

PGWU_KNOBS = ("downlink-sport-fixed", "downlink-egress-vlan", "uplink-egress-vlan")
# Open5GS 8f25f3b: departs as departs.py's "open5gs" row says; 802.1Q is not its (NOT_SUPPORTED)
OPEN5GS_DEPARTS = ("uplink-gpdu", "uplink-unknown-ext-header", "echo", "error-indication", "uplink-ttl-expired",
                   "downlink-gpdu", "downlink-inner-udp-checksum-0", "qfi-downlink-psc", "downlink-too-big",
                   "downlink-df-too-big", "downlink-ttl-expired", "downlink-gpdu-ipv6",
                   # the kernel's ICMPv6 Time Exceeded (departs.py "ttl_expired"): its own flow label
                   "uplink-hop-limit-expired-ipv6", "downlink-hop-limit-expired-ipv6",
                   # the kernel's ICMPv6 Packet Too Big (departs.py "packet_too_big"), tunnelled by it
                   "uplink-packet-too-big-ipv6")
EXPECTED = {
    "embedded": {c.name: "pass" for c in C.CASES},
    # eUPF forwards no IPv6 (departs.py "ipv6"): a spoofed IPv6 source is not forwarded either
    "embedded-eupf": {**{c.name: "departs" for c in C.CASES}, **{n: "not supported" for n in PGWU_KNOBS},
                      "spoofed-source-ipv6": "pass"},
    "embedded-open5gs": {**{c.name: "pass" for c in C.CASES}, **{n: "departs" for n in OPEN5GS_DEPARTS},
                         **{n: "not supported" for n in PGWU_KNOBS + ("uplink-vlan", "downlink-vlan")},
                         # no Packet Too Big downlink: the G-PDU leaves in outer IPv4 fragments
                         "downlink-packet-too-big-ipv6": "fail"},
}


def conformance(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gtplab", "conformance", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {}


@pytest.mark.parametrize("config", ["embedded", pytest.param("embedded-eupf", marks=pytest.mark.eupf),
                                    pytest.param("embedded-open5gs", marks=pytest.mark.open5gs)])
def test_conformance_of_a_upf(config, tmp_path, runs):
    if config != "embedded":
        from tests.lib import external_upf
        external_upf.lab_config(config)             # skips, with the reason, without the UPF's runtime
    out = tmp_path / "out"
    p = conformance("--lab-config", config, "-o", str(out))
    assert p.returncode == (1 if "fail" in EXPECTED[config].values() else 0), p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "conformance" and run["status"] == "complete" and run["lab_config"] == config
    assert run["commit"] and run["host"] and run["started"] and run["ended"]
    assert leftovers(run["lab"]) == []
    recs = [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines()]
    got = {r["case"]: r["result"] for r in recs}
    assert got == EXPECTED[config], {k: (v, EXPECTED[config].get(k)) for k, v in got.items()
                                     if v != EXPECTED[config].get(k)}
    for r in recs:
        assert (r["case"] + " ") in p.stdout       # one line per case
        if r["result"] == "departs":
            assert r["cause"] and r["departs_from"], r
        if r["result"] == "fail":               # with what came out instead
            assert r["diff"]["why"] and r["received"], r
    runs[config] = out


def test_packet_too_big_on_the_socket_path(tmp_path):
    """The socket path (embedded.yaml with dut.mode socket) answers ICMPv6 Packet Too Big as the XDP
    path does (docs/socket.md): both cases pass, each big packet counted drop_too_big and answered
    (uplink: the raw IPv6 socket's EMSGSIZE, the SGi route's MTU, the error in the UE's tunnel;
    downlink: the access route's MTU less 36 for the sender), the one at the MTU forwarded. The
    lowered routes are gone with the lab."""
    cfg = tmp_path / "socket.yaml"
    text = (REPO / "gtplab/lab/labs/embedded.yaml").read_text()
    cfg.write_text(text.replace("name: embedded\n", "name: sockptb\n", 1).replace("  mode: pgwu ", "  mode: socket", 1))
    out = tmp_path / "out"
    p = conformance("--lab-config", str(cfg), "--cases", "*packet-too-big*", "-o", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert leftovers(run["lab"]) == []
    recs = {r["case"]: r for r in map(json.loads, (out / "cases.jsonl").read_text().splitlines())}
    ul, dl = recs["uplink-packet-too-big-ipv6"], recs["downlink-packet-too-big-ipv6"]
    assert ul["result"] == dl["result"] == "pass", (ul, dl)
    for r in (ul, dl):
        assert r["upf_counters"]["drops"] == {"drop_too_big": 3} and r["received"] == {"forwarded": 3, "back": 3}, r


def test_table_side_by_side(runs):
    missing = [c for c in ("embedded", "embedded-eupf") if c not in runs]
    if missing:
        pytest.skip(f"needs the conformance runs of the PGW-U and eUPF: {', '.join(missing)} skipped or failed")
    p = conformance("table", str(runs["embedded"]), str(runs["embedded-eupf"]))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("| case | clause | PGW-U | eUPF")
    row = next(ln for ln in lines if ln.startswith("| uplink-gpdu |"))
    assert row.endswith("| pass | departs: inner_ttl |"), row


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args in (("--lab-config", "no-such-config"), ("table", str(tmp_path / "none")), (),
                 ("--lab-config", "embedded", "--cases", "nothing-*")):
        p = conformance(*args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, (args, p.stderr)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    p = conformance("--lab-config", "embedded", "-o", str(full))
    assert p.returncode == 2 and "not empty" in p.stderr
