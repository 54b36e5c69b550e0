"""The TRex profiles (trex_profiles/gtpu_*.py) and the bearer files made for them (gtplab bearers).

Each profile is loaded by TRex's own client library (lbr-trex-client) in a subprocess
(gtplab.traffic.trex.worker), never in this process (its bundled Scapy 2.4.3 would shadow Scapy 2.8). Here,
with Scapy 2.8 and code of its own, the test checks every stream's JSON:
- the base packet: layers, field values, lengths (len == size - 4), checksums;
- every field-engine instruction: the offsets are compared with offsets found independently (by
  changing the field with Scapy and seeing which bytes move);
- the packets the program makes: a small reference implementation of TRex's field engine
  (run_program below: modular inc, split_to_cores phases, write / write-mask, IPv4 fix, hardware
  checksum fix done at transmit) generates two full cycles on 1, 2 and 3 cores, and every packet
  must belong to a bearer of the bearer file `gtplab bearers` writes for the same tunables, with
  valid checksums.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import uuid

import pytest
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from gtplab.cli import main as gtplab_main
from gtplab.dut.dataplane import PGWU_DIR
from tests.lib.pgwu import pgwu
from tests.lib import REPO
from tests.lib.trex_ref import (PROFILE, LoadError, TrexWorker, argv, binary, common, fold, params,  # noqa: F401
                                run_program)

UE_BASE = int(ipaddress.IPv4Address("10.64.0.1"))
SGW_BASE = int(ipaddress.IPv4Address("10.201.0.16"))
PGW = int(ipaddress.IPv4Address("10.201.0.1"))
PDN_BASE = int(ipaddress.IPv4Address("198.18.0.1"))


# ---------------------------------------------------------------------------------------------
# Independent checks: checksums, offsets


def ipv4_ok(b: bytes, off: int) -> bool:
    ihl = (b[off] & 15) * 4
    return fold(b[off:off + ihl]) == 0xFFFF


def l4_ok(b: bytes, ip_off: int) -> bool:
    """UDP/TCP checksum of the IPv4 packet at ip_off (a zero UDP checksum is NOT accepted here)."""
    total = int.from_bytes(b[ip_off + 2:ip_off + 4], "big")
    ihl = (b[ip_off] & 15) * 4
    proto = b[ip_off + 9]
    seg = b[ip_off + ihl:ip_off + total]
    pseudo = b[ip_off + 12:ip_off + 20] + bytes([0, proto]) + len(seg).to_bytes(2, "big")
    if proto == 17 and seg[6:8] == b"\0\0":
        return False
    return fold(pseudo + seg) == 0xFFFF


def field_offset(raw: bytes, mutate) -> tuple[int, int]:
    """(offset, length) of the bytes that change when mutate(packet) changes one field."""
    p = Ether(raw)
    mutate(p)
    new = bytes(p)
    assert len(new) == len(raw)
    diff = [i for i in range(len(raw)) if raw[i] != new[i]]
    assert diff, "mutation changed nothing"
    return diff[0], diff[-1] - diff[0] + 1


def inv_ip(a: str) -> str:
    return str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(a)) ^ 0xFFFFFFFF))


def layer_offset(raw: bytes, layer) -> int:
    return len(raw) - len(bytes(layer))


def uplink_offsets(raw: bytes) -> dict:
    p = Ether(raw)
    inner = p[GTP_U_Header][IP]
    off = {
        "outer_ip": layer_offset(raw, p[IP]),
        "inner_ip": layer_offset(raw, inner),
        "inner_l4": layer_offset(raw, inner.payload),
    }

    def setter(get, name, value):
        return lambda q: setattr(get(q), name, value)

    def outer(q):
        return q[IP]

    def gtp(q):
        return q[GTP_U_Header]

    def inn(q):
        return q[GTP_U_Header][IP]

    for key, get, name, value in (
            ("outer_src", outer, "src", inv_ip(p[IP].src)),
            ("outer_dst", outer, "dst", inv_ip(p[IP].dst)),
            ("teid", gtp, "teid", p[GTP_U_Header].teid ^ 0xFFFFFFFF),
            ("inner_src", inn, "src", inv_ip(inner.src)),
            ("inner_dst", inn, "dst", inv_ip(inner.dst))):
        o, n = field_offset(raw, setter(get, name, value))
        assert n == 4, key
        off[key] = o
    return off


def downlink_offsets(raw: bytes) -> dict:
    p = Ether(raw)
    off = {"ip": layer_offset(raw, p[IP]), "l4": layer_offset(raw, p[IP].payload)}
    off["src"] = field_offset(raw, lambda q: setattr(q[IP], "src", inv_ip(p[IP].src)))[0]
    off["dst"] = field_offset(raw, lambda q: setattr(q[IP], "dst", inv_ip(p[IP].dst)))[0]
    if Dot1Q in p:
        o, n = field_offset(raw, lambda q: setattr(q[Dot1Q], "vlan", p[Dot1Q].vlan ^ 0xFFF))
        assert n == 2
        off["tci"] = o
    return off


# ---------------------------------------------------------------------------------------------
# A reference implementation of the part of TRex's field engine the profiles use
# (trex-core src/stx/stl/trex_stl_stream_vm.h): flow_var inc/dec are modular over
# [min, max]; with split_to_cores each of C cores starts at init + c*step and steps C*step;
# the first packet carries the initial value; fix_checksum_hw is done by the NIC at transmit,
# i.e. after the whole program.


def test_reference_engine_matches_trex_semantics():
    """The reference engine itself, against values worked out by hand from TRex's inc_mod and
    StreamVmInstructionFlowMan::update (phase c, step C)."""
    ins = [{"type": "flow_var", "name": "v", "size": 1, "op": "inc", "split_to_cores": True,
            "init_value": 0, "min_value": 0, "max_value": 4, "step": 1},
           {"type": "write_flow_var", "name": "v", "pkt_offset": 0, "add_value": 10,
            "is_big_endian": True},
           {"type": "write_mask_flow_var", "name": "v", "pkt_offset": 1, "pkt_cast_size": 1,
            "mask": 0x0F, "shift": 0, "add_value": 1, "is_big_endian": True}]
    base = bytes([0, 0xF0])
    assert [p[0] for p in run_program(base, ins, 7)] == [10, 11, 12, 13, 14, 10, 11]
    assert [p[1] for p in run_program(base, ins, 3)] == [0xF1, 0xF2, 0xF3]
    assert [p[0] - 10 for p in run_program(base, ins, 5, core=0, cores=2)] == [0, 2, 4, 1, 3]
    assert [p[0] - 10 for p in run_program(base, ins, 5, core=1, cores=2)] == [1, 3, 0, 2, 4]
    dec = [dict(ins[0], op="dec", init_value=4), ins[1]]
    assert [p[0] - 10 for p in run_program(base, dec, 6)] == [4, 3, 2, 1, 0, 4]


# ---------------------------------------------------------------------------------------------
# Bearer files


BEARER_LINE = re.compile(r"^0x[0-9a-f]{8} (\d+\.){3}\d+ (\d+\.){3}\d+ 0x[0-9a-f]{8}( csum=(on|off))?$")


def bearer_file(tmp_path, profile, tunables, csum="default") -> dict:
    """Write the bearer file with the CLI; returns {TEID: (UE, SGW, SGW TEID)}."""
    path = tmp_path / f"bearers-{uuid.uuid4().hex[:8]}.txt"
    cmd = ["bearers", "--profile", profile, "-o", str(path), "--csum", csum]
    if tunables:
        cmd += ["-t", " ".join(tunables)]
    assert gtplab_main(cmd) == 0
    table = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        assert BEARER_LINE.match(line), line
        teid, ue, sgw, sgw_teid = line.split()[:4]
        assert int(teid, 16) not in table
        table[int(teid, 16)] = (int(ipaddress.IPv4Address(ue)), int(ipaddress.IPv4Address(sgw)),
                                int(sgw_teid, 16))
    return table


def test_bearer_file_follows_the_addressing_contract(tmp_path):
    table = bearer_file(tmp_path, "uplink", argv(flows=8, sgws=4, bearers=10))
    assert len(table) == 10
    for i in range(10):
        assert table[0x00010000 + i] == (UE_BASE + i, SGW_BASE + i % 4, 0x80000000 + i)
    assert set(bearer_file(tmp_path, "downlink", argv(flows=10, sgws=3)).items()) == {
        (0x00010000 + i, (UE_BASE + i, SGW_BASE + i % 3, 0x80000000 + i)) for i in range(10)}


def test_bearer_file_options_and_forms(tmp_path):
    out = tmp_path / "b.txt"
    # trex-console's k=v syntax with underscores, several -t, csum column
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "flows=6,sgws=3",
                        "-t", "teid_base=0x200,ue_base=10.70.0.1,sgw_teid_base=0x10",
                        "--csum", "on", "-o", str(out)]) == 0
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    assert lines[0] == "0x00000200 10.70.0.1 10.201.0.16 0x00000010 csum=on"
    assert lines[5] == "0x00000205 10.70.0.6 10.201.0.18 0x00000015 csum=on"
    assert len(lines) == 6
    assert out.read_text().startswith("# pgwu bearer file: gtplab bearers --profile uplink")
    # single flow mode: bearer 0 only
    assert list(bearer_file(tmp_path, "uplink", argv(flow_mode="single"))) == [0x00010000]


def test_bearer_file_bad_input_changes_nothing(tmp_path, capsys):
    out = tmp_path / "b.txt"
    out.write_text("keep me\n")
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "flows=10,sgws=4",
                        "-o", str(out)]) == 2
    assert "multiple of --sgws" in capsys.readouterr().err
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "bearers=5,flows=6",
                        "-o", str(out)]) == 2
    assert gtplab_main(["bearers", "--profile", "uplink", "-t", "teid_base=0xffffffff,flows=2,sgws=1",
                        "-o", str(out)]) == 2
    assert gtplab_main(["bearers", "--profile", "downlink", "-t", "nonsense",
                        "-o", str(out)]) == 2
    assert gtplab_main(["bearers", "--profile", "downlink", "-t", "flows=2",
                        "-o", str(tmp_path / "missing" / "b.txt")]) == 2
    assert out.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]


# ---------------------------------------------------------------------------------------------
# Tunables


@pytest.mark.parametrize("profile", ["uplink", "downlink"])
def test_every_tunable_has_a_default_and_help(profile):
    parser = common.build_parser(profile)
    opts = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(opts) >= 15
    for a in opts:
        assert a.help and len(a.help) > 10, a.dest
        assert a.default is not None or a.dest in ("size", "flows", "bearers"), a.dest
    # the defaults resolve to a valid profile
    a = common.parse(profile, [])
    assert a.flows == 1024 and a.bearers == 1024 and a.stats == "none"


def test_common_module_imports_neither_trex_nor_scapy():
    code = ("import sys; sys.path.insert(0, 'trex_profiles'); import gtpu_common; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('trex', 'scapy', 'lbr_trex_client')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_console_style_tunables_reach_get_streams():
    """`start -f trex_profiles/gtpu_uplink.py -t size=1424,teid_base=0x20000` exactly as
    trex-console passes it (trex_stl_client.start_line: decode_tunables, then the list form and
    the keyword arguments both), and the old keyword-only form of STLProfile.load."""
    code = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import lbr_trex_client
from trex.stl.api import STLProfile
from trex.utils import parsing_opts
line = "size=1424,teid_base=0x20000,flows=8,sgws=2"
d = parsing_opts.decode_tunables(line)
d["tunables"] = parsing_opts.convert_old_tunables_to_new_tunables(line)
a = STLProfile.load(sys.argv[1], direction=0, port_id=0, **d)
b = STLProfile.load(sys.argv[1], direction=0, port_id=0, size=200, flows=4, sgws=4)
print(json.dumps([[s.to_json() for s in p.get_streams()] for p in (a, b)]))
"""
    r = subprocess.run([sys.executable, "-c", code, PROFILE["uplink"]], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    a, b = json.loads(r.stdout)
    pa = Ether(binary(a[0]))
    assert len(binary(a[0])) == 1420 and pa[GTP_U_Header].teid == 0x20000
    assert a[0]["vm"]["instructions"][0]["max_value"] == 7
    assert len(binary(b[0])) == 196 and b[0]["vm"]["instructions"][0]["max_value"] == 3


# ---------------------------------------------------------------------------------------------
# Uplink


def check_uplink_base(stream, a, size):
    raw = binary(stream)
    assert len(raw) == size - 4
    p = Ether(raw)
    inner_l4 = UDP if a.l4 == "udp" else TCP
    layers = [type(x) for x in p.iterpayloads()]
    assert layers == [Ether, IP, UDP, GTP_U_Header, IP, inner_l4, Raw] or (
        layers == [Ether, IP, UDP, GTP_U_Header, IP, inner_l4] and size == common.min_frame_size(
            "uplink", a.l4)), layers
    o, g, i = p[IP], p[GTP_U_Header], p[GTP_U_Header][IP]
    assert (o.src, o.dst) == (str(ipaddress.IPv4Address(a.sgw_base)),
                              str(ipaddress.IPv4Address(a.pgw_addr)))
    assert o.len == size - 4 - 14 and o.flags == 0 and o.frag == 0 and o.ttl == 64
    assert (p[UDP].sport, p[UDP].dport, p[UDP].len) == (2152, 2152, size - 4 - 34)
    assert (g.version, g.PT, g.E, g.S, g.PN, g.gtp_type) == (1, 1, 0, 0, 0, 255)
    assert g.length == size - 4 - 50 and g.teid == a.teid_base
    assert (i.src, i.dst) == (str(ipaddress.IPv4Address(a.ue_base)),
                              str(ipaddress.IPv4Address(a.pdn_base)))
    assert i.len == size - 4 - 50 and i.ttl == 64
    assert (i[inner_l4].sport, i[inner_l4].dport) == (a.sport, a.dport)
    assert ipv4_ok(raw, 14) and ipv4_ok(raw, 50) and l4_ok(raw, 50)
    if a.outer_udp_csum == "zero":
        assert p[UDP].chksum == 0
    else:
        assert l4_ok(raw, 14)
    assert stream["flags"] == 0  # MACs from the port configuration, not from the packet
    return raw


def check_uplink_program(stream, a):
    raw = binary(stream)
    off = uplink_offsets(raw)
    ins = stream["vm"]["instructions"]
    if a.flows == 1:
        assert [x["type"] for x in ins] == (["fix_checksum_hw"] if a.stats == "latency" else [])
        return off
    period = min(a.sgws, a.flows)
    sw = common.sw_checksum(a, len(raw) - off["inner_l4"] - (8 if a.l4 == "udp" else 20))
    var = {x["name"]: x for x in ins if x["type"] == "flow_var"}
    names = {"bearer", "sgw"} if period > 1 else {"bearer"}
    if sw:
        names |= {n + "_c" for n in names}
    assert set(var) == names
    for name, n in (("bearer", a.flows), ("sgw", period)):
        if name in var:
            v = var[name]
            assert (v["op"], v["size"], v["step"], v["min_value"], v["max_value"], v["init_value"]) \
                == ("inc", 4, 1, 0, n - 1, 0), v
        if name + "_c" in var:   # the same sequence downwards: n-1-i
            v = var[name + "_c"]
            assert (v["op"], v["step"], v["min_value"], v["max_value"], v["init_value"]) \
                == ("dec", 1, 0, n - 1, n - 1), v
    writes = {(x["name"], x["pkt_offset"], x["add_value"] % (1 << 32))
              for x in ins if x["type"] == "write_flow_var"}
    want = {("bearer", off["teid"], a.teid_base), ("bearer", off["inner_src"], a.ue_base)}
    if period > 1:
        want |= {("sgw", off["outer_src"], a.sgw_base), ("sgw", off["inner_dst"], a.pdn_base)}
    l4_hdr = 8 if a.l4 == "udp" else 20
    if sw:
        comp = off["inner_l4"] + l4_hdr
        d = int.from_bytes(raw[comp:comp + 4], "big") - (a.flows - 1)
        want.add(("bearer_c", comp, d))
        if period > 1:
            ck = off["inner_l4"] + (6 if a.l4 == "udp" else 16)
            assert raw[ck:ck + 2] == b"\xff\xfe"
            want.add(("sgw_c", ck, 0xFFFE - (period - 1)))
    assert writes == want
    fixes = [x for x in ins if x["type"].startswith("fix_")]
    if sw:
        want_fix = [{"type": "fix_checksum_ipv4", "pkt_offset": off["inner_ip"]}]
    else:
        want_fix = [{"type": "fix_checksum_hw", "l2_len": off["inner_ip"],
                     "l3_len": off["inner_l4"] - off["inner_ip"],
                     "l4_type": 11 if a.l4 == "udp" else 13}]
    if period > 1:
        want_fix.insert(0, {"type": "fix_checksum_ipv4", "pkt_offset": off["outer_ip"]})
    assert fixes == want_fix
    assert len(ins) == len(var) + len(writes) + len(fixes)
    return off


def check_uplink_packets(stream, a, table):
    """Two full cycles on 1, 2 and 3 cores: every packet is one bearer's, consistent, valid."""
    raw, ins = binary(stream), stream["vm"]["instructions"]
    off = uplink_offsets(raw)
    n = 2 * a.flows
    for cores in (1, 2, 3):
        seen = set()
        for core in range(cores):
            for k, pkt in enumerate(run_program(raw, ins, n, core, cores)):
                teid = int.from_bytes(pkt[off["teid"]:off["teid"] + 4], "big")
                ue = int.from_bytes(pkt[off["inner_src"]:off["inner_src"] + 4], "big")
                sgw = int.from_bytes(pkt[off["outer_src"]:off["outer_src"] + 4], "big")
                dst = int.from_bytes(pkt[off["inner_dst"]:off["inner_dst"] + 4], "big")
                i = teid - a.teid_base
                assert 0 <= i < a.flows
                if cores == 1:
                    assert i == k % a.flows
                assert table[teid][:2] == (ue, sgw), (k, core, cores, teid, ue, sgw)
                assert ue == a.ue_base + i and sgw == a.sgw_base + i % a.sgws
                assert dst == a.pdn_base + i % a.sgws
                assert ipv4_ok(pkt, off["outer_ip"]) and ipv4_ok(pkt, off["inner_ip"])
                assert l4_ok(pkt, off["inner_ip"])
                if a.outer_udp_csum == "valid":
                    assert l4_ok(pkt, off["outer_ip"]), (k, core, cores)
                else:
                    assert pkt[off["outer_ip"] + 26:off["outer_ip"] + 28] == b"\0\0"
                seen.add(i)
        assert seen == set(range(a.flows))


UPLINK_CASES = [
    argv(flows=64, sgws=4),
    argv(size=300, flows=12, sgws=4, l4="tcp", outer_udp_csum="valid"),
    argv(size=82, flows=3, sgws=8),
    argv(size=1424, flows=40, sgws=8, teid_base=0xF0000000, ue_base="10.64.255.250",
         sgw_base="10.201.0.16", pdn_base="198.18.255.254", outer_udp_csum="valid"),
    argv(flows=16, sgws=16, outer_udp_csum="valid", stats="latency", pg_id=7),
]


@pytest.mark.parametrize("tunables", UPLINK_CASES, ids=lambda t: " ".join(t))
def test_uplink_profile(trex, tmp_path, tunables):
    a = params("uplink", tunables)
    (stream,) = trex.streams("uplink", tunables)
    check_uplink_base(stream, a, a.size)
    check_uplink_program(stream, a)
    table = bearer_file(tmp_path, "uplink", tunables)
    assert len(table) == a.bearers
    check_uplink_packets(stream, a, table)


def test_uplink_single_flow(trex):
    for t in (argv(flow_mode="single"), argv(flow_mode="single", stats="latency", size=200)):
        a = params("uplink", t)
        (s,) = trex.streams("uplink", t)
        check_uplink_base(s, a, a.size)
        check_uplink_program(s, a)


UPLINK_SIZES = sorted(set(range(82, 200)) | set(range(200, 3025, 61)) | {
    256, 512, 1024, 1280, 1424, 1500, 1518, 1522, 1554, 2048, 3023, 3024})


def test_uplink_frame_sizes(trex):
    """len == size - 4 from the minimum to 3024 (every size up to 200, then a stride of 61 and the
    usual sweep sizes), base packet valid at each."""
    for size in UPLINK_SIZES:
        t = argv(size=size, flows=4, sgws=2)
        (s,) = trex.streams("uplink", t)
        check_uplink_base(s, params("uplink", t), size)
    for size in (94, 95, 1500, 3024):
        t = argv(size=size, l4="tcp", flows=4, sgws=2)
        (s,) = trex.streams("uplink", t)
        check_uplink_base(s, params("uplink", t), size)


def test_uplink_too_small_or_too_large(trex):
    with pytest.raises(LoadError, match=r"size 64 is too small.* 82 bytes"):
        trex.streams("uplink", argv(size=64))
    with pytest.raises(LoadError, match=r"size 93 is too small.*TCP is 94 bytes"):
        trex.streams("uplink", argv(size=93, l4="tcp"))
    with pytest.raises(LoadError, match=r"out of range 64\.\.3024"):
        trex.streams("uplink", argv(size=3025))
    # --clamp: the minimum frame, without payload
    (s,) = trex.streams("uplink", argv(size=64, clamp="yes", flows=4, sgws=2))
    assert len(binary(s)) == 78
    assert Raw not in Ether(binary(s))


def test_uplink_bad_tunables(trex):
    for t, msg in ((argv(flows=10, sgws=4), "multiple of --sgws"),
                   (argv(flow_mode="single", flows=5), "needs --flow-mode multi"),
                   (argv(imix="yes", size=128), "exclude each other"),
                   (argv(flows=8, bearers=4), "every flow needs a bearer"),
                   (["--no-such-tunable", "1"], "unrecognized arguments"),
                   (argv(l4="sctp"), "invalid choice")):
        with pytest.raises(LoadError, match=msg):
            trex.streams("uplink", t)


def test_uplink_imix_and_stats(trex, tmp_path):
    t = argv(imix="yes", flows=8, sgws=4, stats="stats", pg_id=30)
    a = params("uplink", t)
    streams = trex.streams("uplink", t)
    table = bearer_file(tmp_path, "uplink", t)
    assert [(len(binary(s)) + 4, s["mode"]["rate"], s["isg"]) for s in streams] == [
        (r["ip_len"] + 54, {"type": "pps", "value": r["pps"]}, r["isg"]) for r in common.IMIX_TABLE]
    assert [s["flow_stats"] for s in streams] == [
        {"enabled": True, "stream_id": 30 + n, "vxlan": False, "ieee_1588": False,
         "rule_type": "stats"} for n in range(3)]
    for s, row in zip(streams, common.IMIX_TABLE):
        check_uplink_base(s, a, row["ip_len"] + 54)
        assert Ether(binary(s))[GTP_U_Header][IP].len == row["ip_len"]
        check_uplink_program(s, a)
        check_uplink_packets(s, a, table)


# ---------------------------------------------------------------------------------------------
# Downlink


def check_downlink_base(stream, a, size):
    raw = binary(stream)
    assert len(raw) == size - 4
    p = Ether(raw)
    l4 = UDP if a.l4 == "udp" else TCP
    want = [Ether, Dot1Q, IP, l4] if a.vlans else [Ether, IP, l4]
    layers = [type(x) for x in p.iterpayloads()]
    assert layers in (want, want + [Raw]), layers
    if a.vlans:
        assert (p[Dot1Q].prio, p[Dot1Q].dei, p[Dot1Q].vlan, p[Dot1Q].type) == (0, 0, a.vlan_base, 0x800)
    ip = p[IP]
    assert (ip.src, ip.dst) == (str(ipaddress.IPv4Address(a.pdn_base)),
                                str(ipaddress.IPv4Address(a.ue_base)))
    assert ip.len == size - 4 - (18 if a.vlans else 14) and ip.ttl == 64
    assert (ip[l4].sport, ip[l4].dport) == (a.sport, a.dport)
    ip_off = 18 if a.vlans else 14
    assert ipv4_ok(raw, ip_off) and l4_ok(raw, ip_off)
    assert stream["flags"] == 0
    return raw


def check_downlink_program(stream, a):
    raw = binary(stream)
    off = downlink_offsets(raw)
    ins = stream["vm"]["instructions"]
    multi = a.flow_mode == "multi"
    var = {x["name"]: x for x in ins if x["type"] == "flow_var"}
    want_vars = {}
    if a.flows > 1:
        want_vars["bearer"] = (4, a.flows)
    if multi and a.pdn_addrs > 1:
        want_vars["src"] = (4, a.pdn_addrs)
    if multi and a.vlans > 1:
        want_vars["vlan"] = (2, a.vlans)
    assert {k: (v["size"], v["max_value"] + 1) for k, v in var.items()} == want_vars
    for v in var.values():
        assert (v["op"], v["step"], v["min_value"], v["init_value"]) == ("inc", 1, 0, 0)
    writes = {(x["name"], x["pkt_offset"], x["add_value"] % (1 << 32))
              for x in ins if x["type"] == "write_flow_var"}
    want = set()
    if "bearer" in want_vars:
        want.add(("bearer", off["dst"], a.ue_base))
    if "src" in want_vars:
        want.add(("src", off["src"], a.pdn_base))
    assert writes == want
    masks = [x for x in ins if x["type"] == "write_mask_flow_var"]
    if "vlan" in want_vars:
        assert masks == [{"type": "write_mask_flow_var", "name": "vlan", "pkt_offset": off["tci"],
                          "pkt_cast_size": 2, "mask": 0x0FFF, "shift": 0,
                          "add_value": a.vlan_base, "is_big_endian": True}]
    else:
        assert masks == []
    fixes = [x for x in ins if x["type"].startswith("fix_")]
    if want_vars or a.stats == "latency":
        assert fixes == [{"type": "fix_checksum_hw", "l2_len": off["ip"],
                          "l3_len": off["l4"] - off["ip"], "l4_type": 11 if a.l4 == "udp" else 13}]
        assert ins[-1] == fixes[0]
    else:
        assert ins == []
    return off


def check_downlink_packets(stream, a, table):
    raw, ins = binary(stream), stream["vm"]["instructions"]
    off = downlink_offsets(raw)
    ues = {v[0] for v in table.values()}
    vlans = max(a.vlans, 1)
    cycle = math.lcm(a.flows, a.pdn_addrs, vlans)
    for cores in (1, 2):
        seen = set()
        for core in range(cores):
            for k, pkt in enumerate(run_program(raw, ins, 2 * cycle, core, cores)):
                dst = int.from_bytes(pkt[off["dst"]:off["dst"] + 4], "big")
                src = int.from_bytes(pkt[off["src"]:off["src"] + 4], "big")
                i = dst - a.ue_base
                assert dst in ues and 0 <= i < a.flows
                assert a.pdn_base <= src < a.pdn_base + a.pdn_addrs
                if cores == 1:
                    assert (i, src - a.pdn_base) == (k % a.flows, k % a.pdn_addrs)
                if a.vlans:
                    tci = int.from_bytes(pkt[off["tci"]:off["tci"] + 2], "big")
                    assert tci >> 12 == 0
                    assert a.vlan_base <= (tci & 0xFFF) < a.vlan_base + a.vlans
                    if cores == 1:
                        assert (tci & 0xFFF) - a.vlan_base == k % a.vlans
                assert ipv4_ok(pkt, off["ip"]) and l4_ok(pkt, off["ip"])
                seen.add(i)
        assert seen == set(range(a.flows))


DOWNLINK_CASES = [
    argv(flows=32, pdn_addrs=5, vlans=3),
    argv(size=1500, flows=10, l4="tcp", pdn_addrs=4),
    argv(size=64, flows=7, pdn_addrs=1, vlans=1, vlan_base=4094),
    argv(size=3024, flows=16, sgws=3, bearers=100, ue_base="10.64.255.200", vlans=2,
         stats="latency"),
]


@pytest.mark.parametrize("tunables", DOWNLINK_CASES, ids=lambda t: " ".join(t))
def test_downlink_profile(trex, tmp_path, tunables):
    a = params("downlink", tunables)
    (stream,) = trex.streams("downlink", tunables)
    check_downlink_base(stream, a, a.size)
    check_downlink_program(stream, a)
    table = bearer_file(tmp_path, "downlink", tunables)
    assert len(table) == a.bearers
    check_downlink_packets(stream, a, table)


def test_downlink_single_flow(trex):
    for t in (argv(flow_mode="single", vlans=4), argv(flow_mode="single")):
        a = params("downlink", t)
        (s,) = trex.streams("downlink", t)
        check_downlink_base(s, a, a.size)
        check_downlink_program(s, a)


def test_downlink_frame_sizes(trex):
    for size in sorted(set(range(64, 160)) | set(range(160, 3025, 67)) | {1518, 1522, 3024}):
        t = argv(size=size, flows=4, pdn_addrs=2)
        (s,) = trex.streams("downlink", t)
        check_downlink_base(s, params("downlink", t), size)
    for size in (64, 65, 1522, 3024):
        t = argv(size=size, flows=4, vlans=2, l4="tcp")
        (s,) = trex.streams("downlink", t)
        check_downlink_base(s, params("downlink", t), size)


def test_downlink_imix_and_errors(trex):
    t = argv(imix="on", flows=4, vlans=2, stats="latency")
    a = params("downlink", t)
    streams = trex.streams("downlink", t)
    assert [len(binary(s)) + 4 for s in streams] == [68, 598, 1522]
    assert [s["flow_stats"]["stream_id"] for s in streams] == [20, 21, 22]
    assert {s["flow_stats"]["rule_type"] for s in streams} == {"latency"}
    for s in streams:
        check_downlink_base(s, a, len(binary(s)) + 4)
        check_downlink_program(s, a)
    with pytest.raises(LoadError, match="latency needs 16 bytes of payload.* has 2: use --size >= 78"):
        trex.streams("downlink", argv(size=64, vlans=2, l4="tcp", stats="latency"))
    with pytest.raises(LoadError, match="stats needs 16 bytes of payload.* has 0: use --size >= 98"):
        trex.streams("uplink", argv(size=82, stats="stats"))
    # 64-byte untagged UDP downlink leaves 18 bytes: room for the stats trailer
    (s,) = trex.streams("downlink", argv(size=64, stats="stats"))
    assert len(binary(s)) == 60 and len(Ether(binary(s))[Raw].load) == 18
    with pytest.raises(LoadError, match="out of range 1..4094"):
        trex.streams("downlink", argv(vlans=2, vlan_base=4094))


# ---------------------------------------------------------------------------------------------
# The PGW-U accepts the bearer file


@pytest.fixture(scope="module")
def pgwu_built():
    """dataplane/pgwu, built (make is a no-op when it is up to date)."""
    if os.geteuid() != 0:
        pytest.skip("pgwu load needs root (BPF)")
    r = subprocess.run(["make", "-s", "-C", str(PGWU_DIR)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"make -C {PGWU_DIR} failed:\n{r.stdout}{r.stderr}"


@pytest.mark.bpf
def test_pgwu_loads_the_bearer_file(pgwu_built, tmp_path):
    tunables = argv(flows=64, sgws=4, bearers=100)
    table = bearer_file(tmp_path, "uplink", tunables, csum="off")
    path = next(tmp_path.glob("bearers-*.txt"))
    pin = f"/sys/fs/bpf/gtplab-test-prof-{uuid.uuid4().hex[:8]}"

    def run(*args):
        return pgwu(pin, *args, check=False)

    try:
        r = run("load", "--max-bearers", "1024")
        assert r.returncode == 0, r.stderr
        r = run("session", "load", str(path))
        assert r.returncode == 0, r.stderr
        r = run("session", "list", "--json")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["uplink"] == got["downlink"] == 100
        installed = {b["teid"]: (int(ipaddress.IPv4Address(b["ue"])),
                                 int(ipaddress.IPv4Address(b["sgw"])), b["sgw_teid"])
                     for b in got["bearers"]}
        assert installed == table
        assert {b["csum"] for b in got["bearers"]} == {"off"}
    finally:
        run("unload")
        if os.path.exists(pin):
            shutil.rmtree(pin, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# --order random (issue 13): a random bearer per packet, TRex's op=random


@pytest.mark.parametrize("tunables", [argv(flows=64, sgws=4, order="random"),
                                      argv(size=300, flows=40, sgws=8, l4="tcp", order="random",
                                           outer_udp_csum="zero", seed=7),
                                      argv(flows=1 << 20, sgws=4, order="random")],
                         ids=lambda t: " ".join(t))
def test_uplink_random_order(trex, tmp_path, tunables):
    """Every packet is one bearer's (TEID, UE, SGW = bearer file), the inner destination is
    pdn_base, checksums valid after the (hardware) fix; the streams carry --seed as random_seed;
    in 30 x flows packets (at most 2 M) every bearer turns up (P(miss) < flows * e^-30)."""
    import random
    a = params("uplink", tunables)
    (stream,) = trex.streams("uplink", tunables)
    assert stream.get("random_seed") == a.seed
    raw, ins = binary(stream), stream["vm"]["instructions"]
    var = [x for x in ins if x["type"] == "flow_var"]
    assert [(v["name"], v["op"], v["min_value"], v["max_value"]) for v in var] == \
        [("bearer", "random", 0, a.flows - 1)]
    assert [x["type"] for x in ins if x["type"].startswith("fix")] == \
        ["fix_checksum_ipv4", "fix_checksum_hw"]
    off = uplink_offsets(raw)
    table = bearer_file(tmp_path, "uplink", tunables)
    n = min(30 * a.flows, 2_000_000) if a.flows <= 4096 else 20_000
    seen = set()
    for pkt in run_program(raw, ins, n, rand=random.Random(a.seed)):
        teid = int.from_bytes(pkt[off["teid"]:off["teid"] + 4], "big")
        ue = int.from_bytes(pkt[off["inner_src"]:off["inner_src"] + 4], "big")
        sgw = int.from_bytes(pkt[off["outer_src"]:off["outer_src"] + 4], "big")
        dst = int.from_bytes(pkt[off["inner_dst"]:off["inner_dst"] + 4], "big")
        i = teid - a.teid_base
        assert 0 <= i < a.flows and table[teid][:2] == (ue, sgw), (teid, ue, sgw)
        assert sgw == a.sgw_base + i % a.sgws and dst == a.pdn_base
        assert ipv4_ok(pkt, off["outer_ip"]) and ipv4_ok(pkt, off["inner_ip"])
        assert l4_ok(pkt, off["inner_ip"])
        seen.add(i)
    if a.flows <= 4096:
        assert seen == set(range(a.flows))
    else:   # 20 k draws from 1 M: nearly all distinct, spread over the whole range
        assert len(seen) > 19_000 and min(seen) < a.flows // 50 and max(seen) > a.flows * 49 // 50


def test_downlink_random_order(trex, tmp_path):
    import random
    tunables = argv(flows=50, pdn_addrs=3, vlans=2, order="random")
    a = params("downlink", tunables)
    (stream,) = trex.streams("downlink", tunables)
    assert stream.get("random_seed") == a.seed
    raw, ins = binary(stream), stream["vm"]["instructions"]
    assert {x["name"]: x["op"] for x in ins if x["type"] == "flow_var"} == \
        {"bearer": "random", "src": "inc", "vlan": "inc"}
    off = downlink_offsets(raw)
    ues = {v[0] for v in bearer_file(tmp_path, "downlink", tunables).values()}
    seen = set()
    for pkt in run_program(raw, ins, 30 * a.flows, rand=random.Random(1)):
        dst = int.from_bytes(pkt[off["dst"]:off["dst"] + 4], "big")
        assert dst in ues and ipv4_ok(pkt, off["ip"]) and l4_ok(pkt, off["ip"])
        seen.add(dst)
    assert seen == ues


def test_random_order_bad_sgws():
    for t in (argv(flows=48, sgws=3, order="random"),
              argv(flows=64, sgws=4, sgw_base="10.201.0.17", order="random")):
        with pytest.raises(common.ProfileError, match="--order random needs --sgws a power of two"):
            params("uplink", t)
    params("uplink", argv(flows=64, sgws=4, sgw_base="10.201.0.17"))   # seq: any base


# ---------------------------------------------------------------------------------------------
# The uplink profile with the TEIDs a UPF chose (--teid-file), through TRex's own client library


def _teid_file(tmp_path, teids):
    f = tmp_path / "teids.txt"
    f.write_text("# TEID UE SGW SGW_TEID\n" + "".join(
        f"{t:#010x} {common.ip(UE_BASE + i)} {common.ip(SGW_BASE + i % 4)} {0x80000000 + i:#010x}\n" for i, t in enumerate(teids)))
    return f


@pytest.mark.parametrize("extra", [[], ["--outer-udp-csum", "valid"], ["--checksum", "hw", "--l4", "tcp"]],
                         ids=["sw", "outer-valid", "hw-tcp"])
def test_uplink_profile_sends_the_teids_of_the_file(tmp_path, extra):
    """Every packet of two cycles, on 1, 2 and 3 cores (TRex's split), carries bearer i's TEID
    from the file with bearer i's UE, and every checksum stays valid (outer UDP too)."""
    rnd = random.Random(3)
    teids = [rnd.randrange(1, 1 << 32) for _ in range(24)] + [0xFFFFFFFF, 1]
    flows = 24
    path = _teid_file(tmp_path, teids)
    tun = ["--flows", str(flows), "--sgws", "4", "--bearers", "26", "--teid-file", str(path)] + extra
    w = TrexWorker()
    try:
        (stream,) = w.streams("uplink", tun)
    finally:
        w.close()
    raw, ins = binary(stream), stream["vm"]["instructions"]
    assert any(x.get("value_list") == teids[:flows] for x in ins if x["type"] == "flow_var")
    off = uplink_offsets(raw)
    a = params("uplink", tun)
    for cores in (1, 2, 3):
        seen = set()
        for core in range(cores):
            for pkt in run_program(raw, ins, 2 * flows, core, cores):
                teid = int.from_bytes(pkt[off["teid"]:off["teid"] + 4], "big")
                ue = int.from_bytes(pkt[off["inner_src"]:off["inner_src"] + 4], "big")
                i = ue - UE_BASE
                assert 0 <= i < flows and teid == teids[i], (cores, core, i, hex(teid))
                assert ipv4_ok(pkt, off["outer_ip"]) and ipv4_ok(pkt, off["inner_ip"])
                if "--checksum" not in extra:
                    assert l4_ok(pkt, off["inner_ip"])
                if a.outer_udp_csum == "valid":
                    assert l4_ok(pkt, off["outer_ip"]), (cores, core, i)
                seen.add(i)
        assert seen == set(range(flows))
    # the embedded engine compiles it (value lists of up to vm.MAX_LIST values)
    from gtplab.traffic.engine import vm
    cs = vm.compile_stream(stream)
    assert teids[:flows] in cs.lists.values()


def test_teid_file_errors(tmp_path):
    for text, msg in (("0x10\n", "1 TEIDs for 4 bearers"), ("zz\n", "not a TEID"), ("0\n0\n0\n0\n", "is 0")):
        f = tmp_path / "t.txt"
        f.write_text(text)
        with pytest.raises(common.ProfileError, match=msg):
            common.parse("uplink", ["--flows", "4", "--sgws", "4", "--teid-file", str(f)])
    with pytest.raises(common.ProfileError, match="No such file"):
        common.parse("uplink", ["--teid-file", str(tmp_path / "none")])
    # bounded whatever the file is (issue 35): what is not a regular file, an endless line, a NUL
    os.mkfifo(tmp_path / "fifo")
    for path, msg in (("/dev/zero", "/dev/zero: not a regular file"), (str(tmp_path / "fifo"), "not a regular file")):
        with pytest.raises(common.ProfileError, match=msg):
            common.parse("uplink", ["--flows", "4", "--sgws", "4", "--teid-file", path])
    big = tmp_path / "sparse.txt"
    with open(big, "wb") as out:
        out.write(b"0x10\n")
        out.truncate(2 << 30)                   # 2 GiB of NULs after one TEID
    with pytest.raises(common.ProfileError, match=r"sparse.txt:2: binary data \(a NUL byte\): not a TEID file"):
        common.parse("uplink", ["--flows", "4", "--sgws", "4", "--teid-file", str(big)])
    f.write_text("0x10\n" + "7" * 8192 + "\n")
    with pytest.raises(common.ProfileError, match=r":2: a line over 4096 bytes: not a TEID file"):
        common.parse("uplink", ["--flows", "4", "--sgws", "4", "--teid-file", str(f)])
    f.write_text("1\n2\n3\n4\n")
    with pytest.raises(common.ProfileError, match="--teid-file needs --order seq"):
        common.parse("uplink", ["--flows", "4", "--sgws", "4", "--order", "random", "--teid-file", str(f)])
