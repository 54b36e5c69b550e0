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


# --n3 6: the cases built for GTP-U over IPv6 (cases.N3V6_CASES), every bearer's peer an IPv6 address
O5GS_N3V6_CASES = "uplink-gpdu,echo,downlink-gpdu-ipv6"
EXPECTED_N3V6 = {
    # the PGW-U's xdp_ul_n3v6 / xdp_dl_n3v6: every case byte for byte (the downlink's UDP checksum Scapy's)
    "embedded": ((), {n: "pass" for n in C.N3V6_CASES}),
    # eUPF a8d774a refuses an F-TEID V6 (cause 73): every row says so
    "embedded-eupf": (("--cases", "uplink-gpdu,downlink-gpdu"),
                      {"uplink-gpdu": "not supported", "downlink-gpdu": "not supported"}),
    # Open5GS 8f25f3b takes it: its departures as over IPv4 (the 2032-octet buffer; the Echo Response and
    # the G-PDUs from its socket: port 2152, the kernel's flow label), the rest the spec's
    "embedded-open5gs": (("--cases", O5GS_N3V6_CASES),
                         {"uplink-gpdu": "departs", "echo": "departs", "downlink-gpdu-ipv6": "departs"}),
}


@pytest.mark.parametrize("config", ["embedded", pytest.param("embedded-eupf", marks=pytest.mark.eupf),
                                    pytest.param("embedded-open5gs", marks=pytest.mark.open5gs)])
def test_conformance_over_n3_ipv6(config, tmp_path, runs):
    """`--n3 6`: a lab whose bearers' peers are IPv6, each case's G-PDUs over IPv6 to the UPF's N3
    IPv6 address and its expected N3 output over IPv6 (the oracle's, Scapy's checksums); every row
    says it ran over N3 IPv6; a UPF that refuses the sessions gets rows that say so, with its Cause."""
    if config != "embedded":
        from tests.lib import external_upf
        external_upf.lab_config(config)
    args, expected = EXPECTED_N3V6[config]
    out = tmp_path / "out"
    p = conformance("--lab-config", config, "--n3", "6", "-o", str(out), *args)
    assert p.returncode == 0, p.stdout + p.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "complete" and run["n3"] == ["6"] and leftovers(run["lab"]) == []
    recs = [json.loads(ln) for ln in (out / "cases.jsonl").read_text().splitlines()]
    got = {r["case"]: r["result"] for r in recs}
    assert got == expected, {k: (v, expected.get(k)) for k, v in got.items() if v != expected.get(k)}
    for r in recs:
        assert r["n3"] == "6" and f"{r['case']} (N3 IPv6) " in p.stdout, r
        if config == "embedded" and r["direction"] == "downlink":
            assert r["upf_counters"]["forwarded"] == r["sent"] == r["received"]["forwarded"], r
        if config == "embedded-eupf":
            assert "refused N3 over IPv6" in r["why"] and "cause 73" in r["why"], r
    runs[config + "-n3v6"] = out


def table_of(runs, keys: tuple[str, ...], what: str) -> list[str]:
    """`conformance table` of the module's runs keys (skipped, saying what, when one is missing): its lines."""
    missing = [c for c in keys if c not in runs]
    if missing:
        pytest.skip(f"needs {what}: {', '.join(missing)} skipped or failed")
    p = conformance("table", *(str(runs[k]) for k in keys))
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_table_with_the_n3_column(runs):
    lines = table_of(runs, ("embedded", "embedded-n3v6"), "the PGW-U's runs over N3 IPv4 and IPv6")
    assert lines[0] == "| case | N3 | clause | PGW-U | PGW-U |", lines[0]
    rows = [ln for ln in lines if ln.startswith("| uplink-gpdu |")]
    assert [r.split(" | ")[1] for r in rows] == ["IPv4", "IPv6"], rows
    assert rows[0].endswith("| pass | - |") and rows[1].endswith("| - | pass |"), rows
    frag = next(ln for ln in lines if ln.startswith("| uplink-outer-fragments |"))
    assert " | IPv4 | " in frag and not any(ln.startswith("| uplink-outer-fragments | IPv6") for ln in lines)


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
    lines = table_of(runs, ("embedded", "embedded-eupf"), "the conformance runs of the PGW-U and eUPF")
    assert lines[0].startswith("| case | clause | PGW-U | eUPF")
    row = next(ln for ln in lines if ln.startswith("| uplink-gpdu |"))
    assert row.endswith("| pass | departs: inner_ttl |"), row


def test_bad_input_is_one_line_exit_2(tmp_path):
    for args in (("--lab-config", "no-such-config"), ("table", str(tmp_path / "none")), (),
                 ("--lab-config", "embedded", "--cases", "nothing-*"), ("--lab-config", "embedded", "--n3", "6,6"),
                 ("--lab-config", "embedded", "--n3", "6", "--cases", "uplink-outer-fragments")):
        p = conformance(*args)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, (args, p.stderr)
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    p = conformance("--lab-config", "embedded", "-o", str(full))
    assert p.returncode == 2 and "not empty" in p.stderr
