"""The relays to and from the CP function in the XDP PGW-U (issue 32 item 3), with BPF_PROG_TEST_RUN.

Open5GS's SMF gives each IPv6 session two more PDRs (src/smf/context.c
smf_sess_create_cp_up_data_forwarding): UP2CP, an uplink SDF PDR `permit out 58 from ff02::2/128 to
assigned` whose FAR forwards to the CP function in a GTP-U tunnel (Destination Interface
CP-function, Outer Header Creation: the SMF's address and TEID), which takes the UE's Router
Solicitations; and CP2UP, a PDR with Source Interface CP-function and its own F-TEID whose FAR is
the session's downlink FAR, which takes the SMF's Router Advertisements to the gNB. Here both are
made with `pgwu session add` (`--filter "ul 10 cp ADDR TEID flow ..."`, `--cp-teid T`), and every
frame out is compared octet for octet with the one Scapy builds (xdp_cp in pgwu.bpf.c; docs/ipv6.md).
"""

from __future__ import annotations

import os
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, ICMPv6ND_RA, ICMPv6ND_RS, ICMPv6NDOptPrefixInfo, IPv6
from scapy.packet import Raw

from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from tests.lib.pgwu import pgwu
from tests.lib.pgwu_config import BASE_CONFIG, NH_ACCESS, NH_SGI, stats_delta

pytestmark = pytest.mark.bpf

TEID, UE, UE64, GNB, GNB_TEID, QFI = 0x700, "10.45.0.7", "fd47:7470:0:7::/64", P.SGW_ADDR, 0x7007, 9
UE6 = "fd47:7470:0:7::10"
UE_LL = "fe80::7"                       # the UE's link-local address: where its RS comes from
SMF, SMF_LL, CP_TEID, CP2UP_TEID = "192.0.2.50", "fe80::1", 0xC0DE0007, 0x7100
RS_FLOW = "permit out 58 from ff02::2/128 to assigned"      # Open5GS's UP2CP filter, as the SMF sends it
FILTER = f"ul 10 cp {SMF} {CP_TEID} flow {RS_FLOW}; ul 255"    # UP2CP, and the default uplink PDR


@pytest.fixture(scope="module")
def cdp(dataplane):
    """The bearer with Open5GS's UP2CP PDR at precedence 10 (uplink) and a CP2UP tunnel, QFI 9."""
    dataplane.set_config(BASE_CONFIG)
    pgwu(dataplane.pin_dir, "session", "flush")
    pgwu(dataplane.pin_dir, "session", "add", "--teid", TEID, "--ue", UE, "--ue6", UE64, "--sgw", GNB,
         "--sgw-teid", GNB_TEID, "--qfi", QFI, "--cp-teid", CP2UP_TEID,
         "--filter", FILTER)
    yield dataplane
    pgwu(dataplane.pin_dir, "session", "flush")


def run(dp, f: bytes):
    """(verdict, {(reason, verdict)} counted, frame out) of one frame into xdp_access"""
    b0 = dp.stats()
    r = dp.run_access(f)
    b1 = dp.stats()
    return r.verdict, {k for k, v in b1.items() if b0.get(k) != v}, bytes(r.data)


def relay_usage(dp) -> dict[tuple[str, int], tuple[int, int]]:
    """{("up2cp", CP TEID) or ("cp2up", local TEID): (packets, bytes)} of cp_relay (struct pgwu_cp_relay)"""
    out = {}
    with bpf.Map.pinned(os.path.join(dp.pin_dir, "cp_relay")) as m:
        for k, v in m.items():
            rid, kind = struct.unpack("=II", k)
            _addr, teid, _prefix, packets, nbytes = struct.unpack("=4sIQQQ", v)
            key = ("up2cp", struct.unpack(">I", struct.pack("=I", teid))[0]) if kind == 0 else \
                ("cp2up", struct.unpack(">I", struct.pack("=I", rid))[0])
            out[key] = (packets, nbytes)
    return out


def rs() -> IPv6:
    """the UE's Router Solicitation (RFC 4861 6.3.7): link-local source, all-routers, hop limit 255"""
    return IPv6(src=UE_LL, dst="ff02::2", hlim=255) / ICMPv6ND_RS()


def ra() -> IPv6:
    """the SMF's Router Advertisement to the UE, with the session's /64"""
    return (IPv6(src=SMF_LL, dst=UE_LL, hlim=255) /
            ICMPv6ND_RA() / ICMPv6NDOptPrefixInfo(prefix="fd47:7470:0:7::", prefixlen=64))


def from_gnb(inner) -> bytes:
    """an uplink G-PDU of the bearer, with the UL PSC of its QFI"""
    return bytes(P.gtpu(inner, teid=TEID, ext=[P.pdu_session_container(QFI)]))


def from_smf(inner, teid: int = CP2UP_TEID) -> bytes:
    """the SMF's G-PDU to the CP2UP tunnel: no extension header (Open5GS send_router_advertisement)"""
    return bytes(P.gtpu(inner, teid=teid, src=SMF))


def out_access(inner, dst: str, teid: int, ext=()) -> bytes:
    """a G-PDU the PGW-U sends out of its access side (static next hop NH_ACCESS): IPv4 from its GTP-U
    address, id 0, TTL 64, UDP 2152 -> 2152 without a checksum"""
    return bytes(P.gtpu(inner, teid=teid, src=P.PGW_ADDR, dst=dst, src_mac=NH_ACCESS.smac,
                        dst_mac=NH_ACCESS.dmac, ext=ext))


def test_router_solicitation_relayed_to_the_cp_function(cdp):
    """An RS the UP2CP PDR matches: in a G-PDU of its own to the SMF's address and TEID (no extension
    header), the RS itself unchanged (hop limit 255 still), counted ul_cp_fwd and in the relay's usage."""
    u0 = relay_usage(cdp)
    v, moved, out = run(cdp, from_gnb(rs()))
    assert (v, moved) == ("redirect", {("ul_cp_fwd", "redirect")})
    assert out == out_access(rs(), SMF, CP_TEID), f"out {out.hex()}"
    u1 = relay_usage(cdp)
    assert u1[("up2cp", CP_TEID)][0] - u0[("up2cp", CP_TEID)][0] == 1
    assert u1[("up2cp", CP_TEID)][1] - u0[("up2cp", CP_TEID)][1] == len(rs())


def test_router_advertisement_relayed_to_the_ue_with_its_qfi(cdp):
    """The SMF's RA to the CP2UP TEID: to the gNB's address and the bearer's downlink TEID, with the
    DL PDU Session Container of the session's QFI (TS 38.415 PDU type 0), the RA unchanged."""
    u0 = relay_usage(cdp)
    v, moved, out = run(cdp, from_smf(ra()))
    assert (v, moved) == ("redirect", {("dl_cp_fwd", "redirect")})
    assert out == out_access(ra(), GNB, GNB_TEID, ext=[P.pdu_session_container(QFI, uplink=False)]), \
        f"out {out.hex()}"
    u1 = relay_usage(cdp)
    assert u1[("cp2up", CP2UP_TEID)][0] - u0[("cp2up", CP2UP_TEID)][0] == 1


OTHER = [
    ("icmpv6-echo", lambda: IPv6(src=UE6, dst="2001:db8:5::7") / ICMPv6EchoRequest(id=1, seq=1)),
    ("udp", lambda: IPv6(src=UE6, dst="2001:db8:5::7") / UDP(sport=40000, dport=5001) / Raw(b"\x5a" * 40)),
    ("udp-to-ff02::2", lambda: IPv6(src=UE6, dst="ff02::2") / UDP(sport=40000, dport=5001)),
]


@pytest.mark.parametrize("name,inner", OTHER, ids=[o[0] for o in OTHER])
def test_other_ipv6_not_taken(cdp, name, inner):
    """The UE's other IPv6 packets (ICMPv6 elsewhere, UDP, UDP to ff02::2) are not the CP function's:
    decapsulated and forwarded to N6 as without the UP2CP PDR (ul_fwd), or left to the kernel (a
    multicast destination: pass_fib_other), never in the CP function's tunnel."""
    v, moved, out = run(cdp, from_gnb(inner()))
    assert not {r for r, _ in moved} & {"ul_cp_fwd", "dl_cp_fwd"}, moved
    if name == "udp-to-ff02::2":
        return
    want = IPv6(bytes(inner()))
    want.hlim -= 1
    assert (v, moved) == ("redirect", {("ul_fwd", "redirect")})
    assert out[14:] == bytes(want) and out[:14] == bytes.fromhex(NH_SGI.dmac.replace(":", "") +
                                                                  NH_SGI.smac.replace(":", "") + "86dd")


def test_cp2up_tunnel_takes_no_ipv4(cdp):
    """An IPv4 T-PDU to the CP2UP TEID is no uplink traffic of the UE: dropped (drop_spoofed: the
    tunnel's half has the source no packet has, 255.255.255.255)."""
    v, moved, _ = run(cdp, from_smf(IP(src=UE, dst="198.51.100.10") / UDP(sport=1, dport=2)))
    assert (v, moved) == ("drop", {("drop_spoofed", "drop")})


def test_session_del_removes_both_relays(cdp):
    """After `session del`, no cp_relay entry is left and the CP2UP TEID is unknown again."""
    pgwu(cdp.pin_dir, "session", "del", "--teid", TEID)
    try:
        assert relay_usage(cdp) == {}
        v, moved, _ = run(cdp, from_smf(ra()))
        assert moved == {("drop_unknown_teid", "tx")} or moved == {("drop_unknown_teid", "drop")}, moved
    finally:
        pgwu(cdp.pin_dir, "session", "add", "--teid", TEID, "--ue", UE, "--ue6", UE64, "--sgw", GNB,
             "--sgw-teid", GNB_TEID, "--qfi", QFI, "--cp-teid", CP2UP_TEID,
             "--filter", FILTER)


BAD = [
    (["--filter", f"dl 10 cp {SMF} 1 flow {RS_FLOW}"], "cp: an uplink PDR's"),
    (["--filter", f"ul 10 cp 2001:db8::1 1 flow {RS_FLOW}"], "cp: expected the CP function's IPv4 address"),
    (["--filter", f"ul 10 cp {SMF} 0 flow {RS_FLOW}"], "cp: expected the CP function's IPv4 address"),
    (["--cp-teid", "0x7200"], "--cp-teid: needs --ue6"),
]


@pytest.mark.parametrize("extra,why", BAD, ids=["cp-downlink", "cp-ipv6", "cp-teid-0", "cp-teid-without-ue6"])
def test_bad_cp_option_is_one_line_exit_2(cdp, extra, why):
    args = ["session", "add", "--teid", 0x7300, "--ue", "10.45.0.73", "--sgw", GNB, "--sgw-teid", 1] + extra
    cp = pgwu(cdp.pin_dir, *args, check=False)
    assert cp.returncode == 2 and why in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert "Traceback" not in cp.stderr
