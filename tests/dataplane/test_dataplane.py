"""The XDP PGW-U tested in place (BPF_PROG_TEST_RUN), table-driven, from the data-path spec.

Each row: a name, an input frame (gtplab.gtpu.packets), config/bearer changes, the expected verdict and
reason, and the expected output frame built independently (tests/lib/oracle.py) -- never copied from
the program. Every row also checks that the stats map counted exactly this one packet under
(reason, verdict) with the frame's length, and the bearers' usage counters.

Unit tests: static next hops (config.nexthop) on interface indexes that do not exist (a test run
never sends), so nothing depends on the host's routes. The test run's ingress device is lo
(ifindex 1) unless a row says otherwise.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from dataclasses import dataclass, field

import pytest

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import (PGWU_DIR, PGWU_H, PGWU_OBJ, REASON, REASONS, STRUCT_SIZES, VERDICTS, Config, Nexthop,
                                  parse_reasons, usual_verdicts)
from tests.lib import oracle as O
from tests.lib.pgwu_config import (BASE_CONFIG, NH_ACCESS, NH_ACCESS_IF, NH_SGI, NH_SGI_IF,  # noqa: F401
                                   ROUTER_SGI_MAC, cfg_of, stats_delta)

LO_IF = 1
SGW_MAC = P.SGW_MAC

# (local TEID, UE, SGW, SGW TEID, per-bearer csum)
UE_DEF, UE_ON, UE_OFF = P.UE_ADDR, "10.45.0.3", "10.45.0.4"
TEID_DEF, TEID_ON, TEID_OFF = P.TEID_UL, 0x00000300, 0x00000400
BEARERS = [
    (TEID_DEF, UE_DEF, P.SGW_ADDR, P.TEID_DL, None),
    (TEID_ON, UE_ON, "192.0.2.3", 0x0A0B0C0D, True),
    (TEID_OFF, UE_OFF, "192.0.2.4", 0xFFFFFFFE, False),
]
# 5G N3 bearers with a QFI: (local TEID, UE, SGW, SGW TEID, QFI)
QFI_BEARERS = [(0x500, "10.45.0.5", "192.0.2.5", 0x5555, 9), (0x600, "10.45.0.6", "192.0.2.6", 0x6666, 63)]
QFI_OF = {b[1]: b[4] for b in QFI_BEARERS}
SGW_OF = {b[1]: (b[2], b[3]) for b in BEARERS + QFI_BEARERS}

SIZES_DL = (64, 128, 512, 1024, 1424, 1518, 3024)
SIZES_UL = (128, 512, 1024, 1424, 1518, 3024)  # a G-PDU frame of 64 bytes cannot carry IPv4/UDP


@dataclass
class Row:
    name: str
    prog: str                     # "access" | "sgi"
    frame: bytes
    reason: str
    verdict: str
    expected: bytes | None = None  # None: output not checked (drops)
    cfg: dict = field(default_factory=dict)
    usage: tuple | None = None     # ("ul", teid, bytes) | ("dl", ue, bytes)
    any_ip_id: bool = False        # encap without DF: outer IP id may be any value
    csum: bool | None = None       # encap: outer UDP checksum expected on (True) / zero (False)
    ingress_ifindex: int = 0
    after: object = None           # callable(dp): checks of the maps a row changes (peers, sig_rx)
    reassembler: bool = False      # a `pgwu reassemble` registered (fib_gen[3] != 0)


ROWS: list[Row] = []


def row(*a, **kw):
    ROWS.append(Row(*a, **kw))


def untouched(name, prog, pkt, reason, **kw):
    b = bytes(pkt)
    row(name, prog, b, reason, "pass", expected=b, **kw)


def mac(s):
    return P.mac_bytes(s)


# ---- expected outputs (spec), independent of the program ----------------------------------------
def ul_expect(frame: bytes, cfg: Config) -> bytes:
    nh = cfg.nexthop[1]
    return O.decap_expected(O.gpdu_inner(frame), mac(nh.smac), mac(nh.dmac), cfg.egress_vlan[1] or None)


def dl_expect(frame: bytes, cfg: Config, ue: str, csum: bool, ip_id: int = 0) -> bytes:
    nh = cfg.nexthop[0]
    sgw, teid = SGW_OF[ue]
    ip = O.ip_payload(frame)
    return O.encap_expected(ip, smac=mac(nh.smac), dmac=mac(nh.dmac),
                            vlan=cfg.egress_vlan[0] or None, local=cfg.local_addr, sgw=sgw, teid=teid,
                            csum=csum, ip_id=ip_id,
                            sport=O.sport_of_flow(ip) if cfg.sport_entropy else O.GTPU_PORT, qfi=QFI_OF.get(ue))


def ul_fwd(name, pkt, cfg=None, teid=TEID_DEF, verdict="redirect", **kw):
    cfg = cfg or {}
    b = bytes(pkt)
    inner = O.gpdu_inner(b)
    row(name, "access", b, "ul_fwd", verdict, expected=ul_expect(b, cfg_of(cfg)), cfg=cfg,
        usage=("ul", teid, len(inner)), **kw)


def dl_fwd(name, pkt, cfg=None, ue=UE_DEF, verdict="redirect", **kw):
    cfg = cfg or {}
    c = cfg_of(cfg)
    b = bytes(pkt)
    per_bearer = {UE_ON: True, UE_OFF: False}.get(ue)
    csum = c.csum if per_bearer is None else per_bearer
    ip = O.ip_payload(b)
    df = bool(ip[6] & 0x40)
    row(name, "sgi", b, "dl_fwd", verdict, expected=dl_expect(b, c, ue, csum), cfg=cfg,
        usage=("dl", ue, len(ip)), any_ip_id=not df, csum=csum, **kw)


def drop(name, prog, pkt, reason, **kw):
    row(name, prog, bytes(pkt), reason, "drop", **kw)


def with_ip(frame: bytes, l2: int, **fields) -> bytes:
    """Rewrite outer IPv4 fields (tot_len, ihl byte, flags_frag, ttl, proto) and fix the checksum."""
    b = bytearray(frame)
    ihl = (b[l2] & 0xF) * 4
    if "ver_ihl" in fields:
        b[l2] = fields["ver_ihl"]
    if "tot_len" in fields:
        b[l2 + 2:l2 + 4] = struct.pack("!H", fields["tot_len"])
    if "frag" in fields:
        b[l2 + 6:l2 + 8] = struct.pack("!H", fields["frag"])
    b[l2 + 10:l2 + 12] = b"\0\0"
    b[l2 + 10:l2 + 12] = struct.pack("!H", O.csum16(bytes(b[l2:l2 + ihl])))
    return bytes(b)


def set_u16(frame: bytes, off: int, v: int) -> bytes:
    b = bytearray(frame)
    b[off:off + 2] = struct.pack("!H", v)
    return bytes(b)


def consistent_cut(frame: bytes, cut: int) -> bytes:
    """frame[:cut] with outer IP tot_len, UDP len and GTP length rewritten to what is left (where those
    fields are still in the frame), so each deeper check sees a packet that ends at the cut."""
    l2, _ = O.l2_split(frame)
    b = bytearray(frame[:cut])
    ihl = (frame[l2] & 0xF) * 4
    tot = cut - l2
    b[l2 + 2:l2 + 4] = struct.pack("!H", tot)
    b[l2 + 10:l2 + 12] = b"\0\0"
    b[l2 + 10:l2 + 12] = struct.pack("!H", O.csum16(bytes(b[l2:l2 + ihl])))
    u = l2 + ihl
    if cut >= u + 6:
        b[u + 4:u + 6] = struct.pack("!H", tot - ihl)
    if cut >= u + 16:
        b[u + 10:u + 12] = struct.pack("!H", tot - ihl - 16)
    return bytes(b)


# ================================ xdp_access rows ================================================
# -- uplink decapsulation
for size in SIZES_UL:
    for l4 in ("udp", "tcp", "icmp"):
        ul_fwd(f"ul {l4} {size}", P.gpdu(size=size, l4=l4))
ul_fwd("ul udp csum 0", P.gpdu(size=200, inner_udp_csum=False))
ul_fwd("ul inner DF tos", P.gpdu(size=200, df=True, tos=0xB8))
ul_fwd("ul ttl 2 -> 1", P.gpdu(size=128, ttl=2))
ul_fwd("ul S flag", P.gpdu(size=128, seq=0x1234))
ul_fwd("ul PN flag", P.gpdu(size=128, npdu=0x42))
ul_fwd("ul S+PN", P.gpdu(size=128, seq=0xFFFF, npdu=0xFF))
ul_fwd("ul E with PDU session container", P.gpdu(size=256, ext=[P.pdu_session_container(9)]))
ul_fwd("ul E+S PSC", P.gpdu(size=256, seq=7, ext=[P.pdu_session_container(5)]))
ul_fwd("ul ext chain 2", P.gpdu(size=256, ext=[P.pdu_session_container(9), P.ext_header(P.EXT_UDP_PORT, b"\x08\x68")]))
ul_fwd("ul ext chain 3", P.gpdu(size=256, ext=[P.pdu_session_container(9), P.ext_header(P.EXT_UDP_PORT, b"\x08\x68"),
                                             P.ext_header(P.EXT_LONG_PDCP_PDU_NUMBER, bytes(6))]))
ul_fwd("ul ext long header (L=3)", P.gpdu(size=256, ext=[P.ext_header(0x81, bytes(10))]))
# TS 29.281 5.2.1: the two high bits of an unknown type: 0x (skip), 10/11 (comprehension required)
ul_fwd("ul ext unknown type 0x21 (00: skipped)", P.gpdu(size=256, ext=[P.ext_header(0x21, b"\x01\x02")]))
ul_fwd("ul ext unknown type 0x7f (01: skipped)", P.gpdu(size=256, ext=[P.ext_header(0x7F, b"\x01\x02")]))
for _t in O.KNOWN_EXT_TYPES:   # include/gtpu.h GTPU_EXT_KNOWN (tests/dataplane/test_ext_list.py)
    ul_fwd(f"ul ext known type {_t:#04x}", P.gpdu(size=256, ext=[P.ext_header(_t, bytes(6))]))


def supp_ext_row(name, pkt, cfg=None):
    cfg = cfg or {}
    b = bytes(pkt)
    row(name, "access", b, "drop_gtp_ext_unsupported", "tx",
        expected=O.supp_ext_notification_expected(b, cfg_of(cfg).local_addr), cfg=cfg)


for _t in (0x86, 0xA0, 0xBF, 0xC1, 0xE0, 0xFF):
    supp_ext_row(f"ul ext unknown type {_t:#04x} (comprehension required)",
                 P.gpdu(size=256, ext=[P.ext_header(_t, b"\x01\x02")]))
supp_ext_row("ul ext unknown 0xe0 after a PSC", P.gpdu(size=256, ext=[P.pdu_session_container(9),
                                                                      P.ext_header(0xE0, b"\x01\x02")]))
supp_ext_row("ul ext unknown 0xa0, sport 40000 (reply to 40000)",
             P.gpdu(size=256, sport=40000, ext=[P.ext_header(0xA0, b"\x01\x02")]))
supp_ext_row("ul ext unknown 0xa0, vlan", P.gpdu(size=256, vlan=12, ext=[P.ext_header(0xA0, b"\x01\x02")]))
supp_ext_row("ul ext unknown 0xa0 on an unknown TEID", P.gpdu(teid=0xDEAD, size=256,
                                                             ext=[P.ext_header(0xA0, b"\x01\x02")]))
supp_ext_row("ul ext unknown 0xa0, bad length: the type is judged first",
             P.gpdu(size=256, ext=[P.ext_header(0xA0, b"\x01\x02", length=0)]))
supp_ext_row("ul end marker with unknown 0xc1", P.end_marker(ext=[P.ext_header(0xC1, b"\x01\x02")]))
drop("ul ext unknown 0xa0, replies off", "access", P.gpdu(size=256, ext=[P.ext_header(0xA0, b"\x01\x02")]),
     "drop_gtp_ext_unsupported", cfg={"err_ind": False})
drop("ul ext unknown 0xa0 from 127.0.0.1", "access",
     P.gpdu(size=256, outer_src="127.0.0.1", ext=[P.ext_header(0xA0, b"\x01\x02")]), "drop_gtp_ext_unsupported")
ul_fwd("ul ext chain 8 (limit)", P.gpdu(size=512, ext=[P.ext_header(0x20 + i, b"\x01\x02") for i in range(8)]))
drop("ul ext chain 9 (over limit)", "access", P.gpdu(size=512, ext=[P.ext_header(0x20 + i, b"\x01\x02") for i in range(9)]),
     "drop_gtp_bad_ext")
drop("ul ext length 0", "access", P.gpdu(size=256, ext=[P.ext_header(0x40, b"\x01\x02", length=0)]), "drop_gtp_bad_ext")
drop("ul ext length past GTP end", "access",
     P.gpdu(inner=b"", ext=[P.ext_header(0x40, b"\x01\x02", length=3)]), "drop_gtp_bad_ext")
drop("ul ext chain 2, 2nd length past GTP end", "access",
     P.gpdu(inner=b"", ext=[P.pdu_session_container(9), P.ext_header(0x40, b"\x01\x02", length=2)]), "drop_gtp_bad_ext")
ul_fwd("ul vlan in", P.gpdu(size=256, vlan=100))
ul_fwd("ul vlan in, egress vlan 300", P.gpdu(size=256, vlan=100), cfg={"egress_vlan": (0, 300)})
ul_fwd("ul egress vlan 4094", P.gpdu(size=256), cfg={"egress_vlan": (7, 4094)})
ul_fwd("ul egress vlan, 3024", P.gpdu(size=3024, l4="tcp"), cfg={"egress_vlan": (0, 12)})
# the shortest inner packets: the decapsulated frame (34-37 octets) is below Ethernet's minimum, as the
# packet is; forwarded and counted, never counted and then dropped
ul_fwd("ul inner IP header only (20 octets)", P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, l4=59)))
ul_fwd("ul inner of 23 octets", P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, l4=253, payload_len=3)))
ul_fwd("ul ethernet padding removed", P.with_trailer(P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR)), 20))
ul_fwd("ul inner ip options", P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, options=b"\x94\x04\x00\x00",
                                                       payload_len=40)))
ul_fwd("ul other bearer (csum on)", P.gpdu(teid=TEID_ON, ue=UE_ON, size=300), teid=TEID_ON)
ul_fwd("ul egress == ingress -> TX", P.gpdu(size=200), verdict="tx",
       cfg={"nexthop": (NH_ACCESS, Nexthop(LO_IF, P.PGW_SGI_MAC, ROUTER_SGI_MAC))}, ingress_ifindex=LO_IF)
ul_fwd("ul inner ttl 255", P.gpdu(size=128, ttl=255))

# outer IPv4 options (IHL 6): valid, options are ignored on decap
_opt = bytearray(bytes(P.gpdu(size=200)))
_o = bytes(_opt[:14]) + bytes([0x46]) + bytes(_opt[15:34]) + b"\x01\x01\x01\x00" + bytes(_opt[34:])
_o = with_ip(_o, 14, tot_len=len(_o) - 14)
ul_fwd("ul outer ip options (IHL 6)", _o)

# -- 5G N3, TS 38.415: a bearer with a QFI requires an UL PDU Session Container carrying it
for _teid, _ue, _sgw, _st, _q in QFI_BEARERS:
    ul_fwd(f"ul qfi {_q}, UL PSC qfi {_q}", P.gpdu(teid=_teid, ue=_ue, size=256, ext=[P.pdu_session_container(_q)]),
           teid=_teid)
    ul_fwd(f"ul qfi {_q}, S + UL PSC + UDP port ext", P.gpdu(teid=_teid, ue=_ue, size=256, seq=3, ext=[
        P.ext_header(P.EXT_UDP_PORT, b"\x08\x68"), P.pdu_session_container(_q)]), teid=_teid)
    drop(f"ul qfi {_q}, no PSC", "access", P.gpdu(teid=_teid, ue=_ue, size=256), "drop_qfi_mismatch")
    drop(f"ul qfi {_q}, PSC of another QFI", "access",
         P.gpdu(teid=_teid, ue=_ue, size=256, ext=[P.pdu_session_container((_q + 1) % 64)]), "drop_qfi_mismatch")
    drop(f"ul qfi {_q}, DL PSC (type 0)", "access",
         P.gpdu(teid=_teid, ue=_ue, size=256, ext=[P.pdu_session_container(_q, uplink=False)]), "drop_qfi_mismatch")
    drop(f"ul qfi {_q}, other extension header only", "access",
         P.gpdu(teid=_teid, ue=_ue, size=256, ext=[P.ext_header(P.EXT_UDP_PORT, b"\x08\x68")]), "drop_qfi_mismatch")

# -- anti-spoofing, TEID, TTL
drop("ul spoofed source", "access", P.gpdu(size=200, ue="10.45.0.99"), "drop_spoofed")
drop("ul other bearer's UE as source", "access", P.gpdu(teid=TEID_DEF, ue=UE_ON, size=200), "drop_spoofed")


def err_ind_row(name, pkt, cfg=None):
    """A G-PDU for an unknown TEID: counted drop_unknown_teid, the frame turned into an Error Indication."""
    cfg = cfg or {}
    b = bytes(pkt)
    row(name, "access", b, "drop_unknown_teid", "tx",
        expected=O.error_indication_expected(b, cfg_of(cfg).local_addr), cfg=cfg)


err_ind_row("ul unknown TEID -> error indication", P.gpdu(teid=0xDEAD, size=200))
err_ind_row("ul TEID 0 G-PDU -> error indication", P.gpdu(teid=0, size=200))
err_ind_row("ul byte-swapped TEID -> error indication", P.gpdu(teid=0x00010000, size=200))
err_ind_row("ul unknown TEID, vlan -> error indication", P.gpdu(teid=0xDEAD, size=200, vlan=33))
err_ind_row("ul unknown TEID, short G-PDU (reply longer)", P.gpdu(teid=0xDEAD, inner=b""))
err_ind_row("ul unknown TEID, 3024 B", P.gpdu(teid=0xABCDEF01, size=3024))
err_ind_row("ul unknown TEID, sport 40000 (reply still to 2152)", P.gpdu(teid=0xDEAD, size=128, sport=40000))
err_ind_row("ul unknown TEID, S+PSC", P.gpdu(teid=0xDEAD, size=256, seq=9, ext=[P.pdu_session_container(9)]))
drop("ul unknown TEID, error indication off", "access", P.gpdu(teid=0xDEAD, size=200), "drop_unknown_teid",
     cfg={"err_ind": False})
for _src in ("0.0.0.0", "127.0.0.1", "224.0.0.9", "255.255.255.255", "240.1.2.3", P.PGW_ADDR):
    drop(f"ul unknown TEID from {_src}: no error indication", "access",
         P.gpdu(teid=0xDEAD, size=128, outer_src=_src), "drop_unknown_teid")


def ttl_ul_row(name, pkt, cfg=None, teid=TEID_DEF):
    """An uplink inner packet whose TTL expired: ICMP Time Exceeded to its UE through the bearer's tunnel."""
    cfg = cfg or {}
    b = bytes(pkt)
    ue = socket.inet_ntoa(O.gpdu_inner(b)[12:16])
    sgw, sgw_teid = SGW_OF[ue]
    row(name, "access", b, "drop_ttl_expired", "tx",
        expected=O.time_exceeded_ul_expected(b, cfg_of(cfg).local_addr, sgw, sgw_teid, QFI_OF.get(ue)), cfg=cfg)


ttl_ul_row("ul inner ttl 1 -> time exceeded", P.gpdu(size=128, ttl=1))
ttl_ul_row("ul inner ttl 0 -> time exceeded", P.gpdu(size=128, ttl=0))
ttl_ul_row("ul inner ttl 1, 3024 B", P.gpdu(size=3024, ttl=1, l4="tcp"))
ttl_ul_row("ul inner ttl 1, vlan", P.gpdu(size=256, ttl=1, vlan=77))
ttl_ul_row("ul inner ttl 1, S+PSC", P.gpdu(size=256, ttl=1, seq=4, ext=[P.pdu_session_container(9)]))
ttl_ul_row("ul inner ttl 1, inner options", P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, ttl=1, payload_len=30,
                                                                      options=b"\x94\x04\x00\x00")))
ttl_ul_row("ul inner ttl 1, 4 bytes after the header", P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, ttl=1,
                                                                                l4=47, payload=b"abcd")))
ttl_ul_row("ul inner ttl 1, other bearer", P.gpdu(teid=TEID_ON, ue=UE_ON, size=200, ttl=1), teid=TEID_ON)
ttl_ul_row("ul inner ttl 1, qfi bearer (PSC in the reply)", P.gpdu(
    teid=QFI_BEARERS[0][0], ue=QFI_BEARERS[0][1], size=256, ttl=1, ext=[P.pdu_session_container(QFI_BEARERS[0][4])]),
    teid=QFI_BEARERS[0][0])
drop("ul inner ttl 1, replies off", "access", P.gpdu(size=128, ttl=1), "drop_ttl_expired", cfg={"err_ind": False})
drop("ul inner ttl 1 from 127.0.0.1", "access", P.gpdu(size=128, ttl=1, outer_src="127.0.0.1"), "drop_ttl_expired")
drop("ul spoof checked before ttl", "access", P.gpdu(size=128, ttl=1, ue="10.45.0.99"), "drop_spoofed")

# -- outer IPv4 / UDP / GTP header errors
_g = bytes(P.gpdu(size=128))
drop("ul outer IHL 4", "access", with_ip(_g, 14, ver_ihl=0x44), "drop_bad_ip")
drop("ul outer version 6 in IPv4 ethertype", "access", with_ip(_g, 14, ver_ihl=0x65), "drop_bad_ip")
drop("ul outer tot_len > frame", "access", with_ip(_g, 14, tot_len=len(_g) - 14 + 1), "drop_bad_ip")
drop("ul outer tot_len < IHL*4", "access", with_ip(_g, 14, tot_len=19), "drop_bad_ip")
drop("ul outer IHL 15 > frame", "access", with_ip(_g[:14 + 40], 14, ver_ihl=0x4F, tot_len=40), "drop_trunc_ip")
drop("ul udp len + 1", "access", set_u16(_g, 38, len(_g) - 34 + 1), "drop_bad_udp_len")
drop("ul udp len - 1", "access", set_u16(_g, 38, len(_g) - 34 - 1), "drop_bad_udp_len")
drop("ul udp len 7", "access", set_u16(_g, 38, 7), "drop_bad_udp_len")
drop("ul gtp len + 1", "access", set_u16(_g, 44, len(_g) - 50 + 1), "drop_gtp_bad_len")
drop("ul gtp len - 1", "access", set_u16(_g, 44, len(_g) - 50 - 1), "drop_gtp_bad_len")
# udp len consistent with tot_len, but shorter than the frame: trailing bytes are padding
_gp = P.with_trailer(P.gpdu(size=128), 8)
ul_fwd("ul trailing padding after consistent lengths", _gp)
# S set, gtp.length 2 (< 4), the optional bytes are in the buffer (Ethernet padding after tot_len)
_sb = bytearray(bytes(P.gpdu(inner=b"", seq=1)))  # 14+20+8+12 = 54 bytes, gtp.length 4
_sb[44:46] = struct.pack("!H", 2)               # gtp.length 2
_sb[38:40] = struct.pack("!H", 8 + 8 + 2)        # udp.len
_sb = with_ip(bytes(_sb) + bytes(6), 14, tot_len=20 + 8 + 8 + 2)
drop("ul S set, gtp length 2 (< 4), bytes present", "access", _sb, "drop_gtp_bad_len")
for v in (0, 2, 7):
    drop(f"ul gtp version {v}", "access", P.gpdu(size=128, flags=(v << 5) | 0x10), "drop_gtp_version")
drop("ul gtp PT=0 (GTP')", "access", P.gpdu(size=128, flags=0x20), "drop_gtp_version")
drop("ul echo with version 2", "access", P.echo_request(5, flags=0x52), "drop_gtp_version")
for t in (3, 16, 100, 253, 0):
    drop(f"ul unknown message type {t}", "access", P.gtp_message(t, b"\x00\x00\x00\x00"), "drop_gtp_unknown_msg")

# -- outer fragments of GTP-U to us
_f = bytes(P.gpdu(size=200))
drop("ul outer MF", "access", with_ip(_f, 14, frag=0x2000), "drop_outer_frag")
drop("ul outer offset 185", "access", with_ip(_f, 14, frag=185), "drop_outer_frag")
drop("ul outer MF+DF+offset", "access", with_ip(_f, 14, frag=0x6001), "drop_outer_frag")
ul_fwd("ul outer DF only is fine", with_ip(_f, 14, frag=0x4000))
untouched("ul fragment to another address", "access",
          with_ip(bytes(P.gpdu(size=200, outer_dst="192.0.2.77")), 14, frag=0x2000), "pass_not_gtpu")
drop("ul outer fragment, not GTP port", "access",
     with_ip(bytes(P.gpdu(size=200, dport=53)), 14, frag=0x2000), "drop_outer_frag")
# ... while a `pgwu reassemble` is registered: the kernel gets them, unchanged, to reassemble
for _n, _fr in (("MF", 0x2000), ("offset 185", 185), ("MF+DF+offset", 0x6001)):
    untouched(f"ul outer {_n}, reassembler registered", "access", with_ip(_f, 14, frag=_fr),
              "pass_outer_frag", reassembler=True)
untouched("ul outer fragment, not GTP port, reassembler registered", "access",
          with_ip(bytes(P.gpdu(size=200, dport=53)), 14, frag=0x2000), "pass_outer_frag", reassembler=True)
ul_fwd("ul whole G-PDU, reassembler registered: still XDP's", _f, reassembler=True)
untouched("ul fragment to another address, reassembler registered", "access",
          with_ip(bytes(P.gpdu(size=200, outer_dst="192.0.2.77")), 14, frag=0x2000), "pass_not_gtpu",
          reassembler=True)

# -- inner packet errors
drop("ul empty G-PDU", "access", P.gpdu(inner=b""), "drop_inner_not_ipv4")
drop("ul inner IPv6", "access", P.gpdu(inner=bytes.fromhex("60000000000011400000") + bytes(30)), "drop_inner_not_ipv4")
drop("ul inner PPP junk", "access", P.gpdu(inner=b"\xff\x03\x00\x21" + bytes(40)), "drop_inner_not_ipv4")
_in = bytearray(bytes(P.ip_packet(P.UE_ADDR, P.PDN_ADDR, payload_len=20)))
_bad = bytearray(_in); _bad[0] = 0x44
drop("ul inner IHL 4", "access", P.gpdu(inner=bytes(_bad)), "drop_inner_bad")
_bad = bytearray(_in); _bad[2:4] = struct.pack("!H", len(_in) + 1)
drop("ul inner tot_len + 1", "access", P.gpdu(inner=bytes(_bad)), "drop_inner_bad")
_bad = bytearray(_in); _bad[2:4] = struct.pack("!H", len(_in) - 1)
drop("ul inner tot_len - 1", "access", P.gpdu(inner=bytes(_bad)), "drop_inner_bad")
drop("ul inner 19 bytes", "access", P.gpdu(inner=bytes(_in[:19])), "drop_inner_bad")
_bad = bytearray(_in); _bad[0] = 0x4F
drop("ul inner IHL 15 > inner", "access", P.gpdu(inner=bytes(_bad)), "drop_inner_bad")
err_ind_row("ul unknown TEID before inner check", P.gpdu(teid=0xBEEF, inner=bytes(3)))

# -- inner IPv4 header checksum (RFC 1812 5.2.2): checked unless config turns it off
_ic = bytearray(bytes(P.ip_packet(P.UE_ADDR, P.PDN_ADDR, payload_len=20)))
_ic[10] ^= 0x01
drop("ul inner header checksum wrong", "access", P.gpdu(inner=bytes(_ic)), "drop_inner_csum")
_ic0 = bytearray(_ic); _ic0[10:12] = b"\0\0"
drop("ul inner header checksum 0", "access", P.gpdu(inner=bytes(_ic0)), "drop_inner_csum")
_ico = bytearray(bytes(P.ip_packet(P.UE_ADDR, P.PDN_ADDR, options=b"\x94\x04\x00\x00", payload_len=8)))
_ico[21] ^= 0x10                                 # an option byte: the checksum covers options too
drop("ul inner header checksum wrong in options", "access", P.gpdu(inner=bytes(_ico)), "drop_inner_csum")
drop("ul spoofed + bad inner checksum: checksum first", "access",
     P.gpdu(inner=bytes(_ic[:12]) + socket.inet_aton("10.45.0.99") + bytes(_ic[16:])), "drop_inner_csum")
_icg = bytes(P.gpdu(inner=bytes(_ic)))
_icx = NH_SGI
row("ul inner checksum wrong, check off: forwarded as is", "access", _icg, "ul_fwd", "redirect",
    expected=O.l2_header(mac(NH_SGI.dmac), mac(NH_SGI.smac), None) + O.ttl_dec_incremental(bytes(_ic)),
    cfg={"inner_csum_check": False}, usage=("ul", TEID_DEF, len(_ic)))

# -- signalling received: consumed, and what it says is kept (peers, sig_rx)
def _expect_peer(addr, **want):
    def check(dp):
        got = dp.peers()
        assert set(got) == {addr}, got
        for k, v in want.items():
            assert got[addr][k] == v, (k, got[addr])
        assert got[addr]["rsp_ns"] > 0
    return check


def _expect_sig(key, packets=1, frm=P.SGW_ADDR):
    def check(dp):
        got = dp.sig_rx()
        assert set(got) == {key}, got
        assert (got[key]["packets"], got[key]["from"]) == (packets, frm), got
    return check


def _expect_nothing_kept(dp):
    assert dp.peers() == {} and dp.sig_rx() == {}


drop("ul signalling: echo response with recovery", "access",
     P.echo_response(3, restart_counter=7, src=P.SGW_ADDR, dst=P.PGW_ADDR, src_mac=P.SGW_MAC,
                     dst_mac=P.PGW_ACCESS_MAC),
     "sig_echo_response", after=_expect_peer(P.SGW_ADDR, responses=1, rsp_seq=3, restart_counter=7,
                                             has_recovery=1, restarts=0))
drop("ul signalling: echo response without recovery", "access",
     P.gtpu(b"", teid=0, gtp_type=2, seq=0x1234), "sig_echo_response",
     after=_expect_peer(P.SGW_ADDR, responses=1, rsp_seq=0x1234, has_recovery=0))
drop("ul signalling: error indication", "access", P.error_indication(teid=P.TEID_DL), "sig_error_ind",
     after=_expect_sig((26, P.TEID_DL, P.SGW_ADDR)))
drop("ul signalling: error indication, peer IE another address", "access",
     P.error_indication(teid=0x0A0B0C0D, peer="192.0.2.3"), "sig_error_ind",
     after=_expect_sig((26, 0x0A0B0C0D, "192.0.2.3")))
drop("ul signalling: error indication without IEs", "access", P.gtpu(b"", teid=0, gtp_type=26, seq=0),
     "sig_error_ind", after=_expect_nothing_kept)
drop("ul signalling: end marker", "access", P.end_marker(), "sig_end_marker",
     after=_expect_sig((254, P.TEID_UL, P.SGW_ADDR)))
drop("ul signalling: end marker vlan", "access", P.end_marker(vlan=5), "sig_end_marker",
     after=_expect_sig((254, P.TEID_UL, P.SGW_ADDR)))
drop("ul signalling: supported ext headers notification", "access", P.supported_ext_headers_notification(),
     "sig_supp_ext_notif", after=_expect_nothing_kept)


def echo_row(name, req, cfg=None, **resp):
    cfg = cfg or {}
    c = cfg_of(cfg)
    b = bytes(req)
    exp = P.echo_response(restart_counter=c.restart_counter, src=c.local_addr, **resp)
    row(name, "access", b, "echo_reply", "tx", expected=bytes(exp), cfg=cfg)


echo_row("echo with S", P.echo_request(0x1234), seq=0x1234)
echo_row("echo seq 0xffff", P.echo_request(0xFFFF), seq=0xFFFF)
echo_row("echo without S", P.echo_request(None), seq=0)
echo_row("echo vlan", P.echo_request(77, vlan=42), seq=77, vlan=42)
echo_row("echo restart counter 200", P.echo_request(1), cfg={"restart_counter": 200}, seq=1)
echo_row("echo with recovery IE + extra bytes cut", P.echo_request(9, recovery=5, extra=b"\xff\x00\x04abcd"), seq=9)
echo_row("echo from sport 33333, other SGW", P.echo_request(2, sport=33333, src="192.0.2.50", src_mac="02:00:00:00:01:50"),
         seq=2, dport=33333, dst="192.0.2.50", dst_mac="02:00:00:00:01:50")
echo_row("echo with ethernet padding", P.with_trailer(P.echo_request(3), 12), seq=3)
_eo = bytes(P.echo_request(4))
_eo = _eo[:14] + bytes([0x46]) + _eo[15:34] + b"\x01\x01\x01\x00" + _eo[34:]
echo_row("echo with outer ip options (dropped)", with_ip(_eo, 14, tot_len=len(_eo) - 14), seq=4)
echo_row("echo with PN flag", P.echo_request(8, npdu=3), seq=8)
for _src, _why in (("0.0.0.0", "this host"), ("0.1.2.3", "this network"), ("127.0.0.1", "loopback"),
                   ("127.9.9.9", "loopback"), ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"),
                   ("255.255.255.255", "broadcast"), ("240.0.0.1", "reserved"), (P.PGW_ADDR, "our own address")):
    drop(f"echo from {_src} ({_why}): not answered", "access", P.echo_request(1, src=_src), "drop_echo_bad_src")
drop("echo from our own address, vlan: not answered", "access", P.echo_request(1, src=P.PGW_ADDR, vlan=3),
     "drop_echo_bad_src")
echo_row("echo from 223.255.255.254 (unicast) answered", P.echo_request(5, src="223.255.255.254"), seq=5,
         dst="223.255.255.254")
echo_row("echo from 1.0.0.1 answered", P.echo_request(5, src="1.0.0.1"), seq=5, dst="1.0.0.1")

# -- not for us / not IPv4
untouched("access ARP", "access", P.arp_request(), "pass_not_ipv4")
untouched("access ARP vlan", "access", P.arp_request(vlan=9), "pass_not_ipv4")
untouched("access IPv6", "access", P.ipv6_packet(), "pass_not_ipv4")
_q = bytes(P.gpdu(size=200, vlan=10))
untouched("access QinQ 0x88a8", "access", _q[:12] + b"\x88\xa8" + _q[14:], "pass_not_ipv4")
untouched("access double 802.1Q", "access", _q[:12] + b"\x81\x00\x00\x0b" + _q[12:], "pass_not_ipv4")
untouched("access other UDP to us", "access", P.gpdu(size=200, dport=53), "pass_not_gtpu")
untouched("access UDP sport 2152 dport 9999", "access", P.gpdu(size=200, dport=9999), "pass_not_gtpu")
untouched("access GTP-U to another address", "access", P.gpdu(size=200, outer_dst="192.0.2.9"), "pass_not_gtpu")
untouched("access echo to another address", "access", P.echo_request(1, dst="192.0.2.9"), "pass_not_gtpu")
untouched("access TCP to us", "access",
          P.Ether(src=SGW_MAC, dst=P.PGW_ACCESS_MAC) / P.ip_packet(P.SGW_ADDR, P.PGW_ADDR, l4="tcp", dport=2152),
          "pass_not_gtpu")
untouched("access ICMP to us", "access",
          P.Ether(src=SGW_MAC, dst=P.PGW_ACCESS_MAC) / P.ip_packet(P.SGW_ADDR, P.PGW_ADDR, l4="icmp"), "pass_not_gtpu")
untouched("access local_addr 0 -> nothing is for us", "access", P.gpdu(size=200), "pass_not_gtpu",
          cfg={"local_addr": "0.0.0.0"})
untouched("access downlink-looking packet", "access", P.downlink_ip(size=128), "pass_not_gtpu")
drop("access truncated UDP header to us", "access", consistent_cut(bytes(P.gpdu(size=128)), 14 + 20 + 5), "drop_trunc_udp")

# -- truncation: raw cuts (IP lengths now lie) and consistent cuts (lengths follow the cut)
_T = bytes(P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, payload_len=4), seq=0x55,
                  ext=[P.pdu_session_container(9), P.ext_header(P.EXT_UDP_PORT, b"\x08\x68")], vlan=3))
_TP = bytes(P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, payload_len=4)))
# _T layout: eth 0-13, vlan 14-17, ip 18-37, udp 38-45, gtp 46-53, opt 54-57, psc 58-61, ext2 62-65, inner 66-
_T_INNER = 66


def trunc_rows(tmpl: bytes, tag: str, l2: int, inner_at: int, gtp_at: int, exts: list[tuple[int, int]]):
    for cut in range(14, len(tmpl)):  # a test run refuses frames < 14 bytes (EINVAL)
        if cut < l2:
            drop(f"trunc {tag} raw {cut} (in eth/vlan)", "access", tmpl[:cut], "drop_trunc_eth")
        elif cut < l2 + 20:
            drop(f"trunc {tag} raw {cut} (in ip)", "access", tmpl[:cut], "drop_trunc_ip")
        else:
            drop(f"trunc {tag} raw {cut} (ip tot_len > frame)", "access", tmpl[:cut], "drop_bad_ip")
    for cut in range(l2 + 20, len(tmpl)):
        f = consistent_cut(tmpl, cut)
        if cut < l2 + 28:
            reason, where = "drop_trunc_udp", "udp"
        elif cut < gtp_at + 8:
            reason, where = "drop_trunc_gtp", "gtp"
        elif cut < gtp_at + 12 and tmpl[gtp_at] & 7:
            reason, where = "drop_trunc_gtp", "gtp optional"
        elif any(s <= cut < e for s, e in exts):
            reason, where = "drop_gtp_bad_ext", "ext header"
        elif cut == inner_at:
            reason, where = "drop_inner_not_ipv4", "empty inner"
        else:
            reason, where = "drop_inner_bad", "inner ip"
        drop(f"trunc {tag} consistent {cut} (in {where})", "access", f, reason)


trunc_rows(_T, "vlan+S+ext", 18, _T_INNER, 46, [(58, 62), (62, 66)])
trunc_rows(_TP, "plain", 14, 14 + 36, 14 + 28, [])

# sanity of the hand-computed layout above (a broken template would make the rows meaningless)
assert O.gpdu_inner(_T) == bytes(P.ip_packet(P.UE_ADDR, P.PDN_ADDR, payload_len=4))
assert _T[_T_INNER] == 0x45 and _T[58] == 1 and _T[62] == 1 and _T[57] == 0x85

# ================================ xdp_sgi rows ===================================================
for size in SIZES_DL:
    for l4, kw in (("udp", {}), ("tcp", {}), ("icmp", {}), ("udp", {"udp_csum": False})):
        nm = "udp csum0" if kw else l4
        for csum in (True, False):
            dl_fwd(f"dl {nm} {size} csum {'on' if csum else 'off'}", P.downlink_ip(size=size, l4=l4, **kw),
                   cfg={"csum": csum})
for size in (128, 1518, 3024):
    for l4 in ("udp", "tcp", "icmp"):
        dl_fwd(f"dl {l4} {size} first fragment (MF)", P.downlink_ip(size=size, l4=l4, mf=True))
        dl_fwd(f"dl {l4} {size} non-first fragment", P.downlink_ip(size=size, l4=l4, frag=100))
for size in (64, 1518):
    dl_fwd(f"dl bearer csum on, global off {size}", P.downlink_ip(UE_ON, size=size, l4="tcp"), ue=UE_ON,
           cfg={"csum": False})
    dl_fwd(f"dl bearer csum off, global on {size}", P.downlink_ip(UE_OFF, size=size, l4="tcp"), ue=UE_OFF,
           cfg={"csum": True})
dl_fwd("dl inner DF -> outer DF, id 0", P.downlink_ip(size=512, l4="tcp", df=True))
dl_fwd("dl inner DF + tos copied", P.downlink_ip(size=512, l4="udp", df=True, tos=0xB8))
dl_fwd("dl tos copied, no DF", P.downlink_ip(size=512, tos=0x2E << 2))
dl_fwd("dl ttl 2 -> 1", P.downlink_ip(size=128, ttl=2))
dl_fwd("dl vlan in", P.downlink_ip(size=256, vlan=200))
dl_fwd("dl vlan in, egress vlan 300", P.downlink_ip(size=256, vlan=200), cfg={"egress_vlan": (300, 0)})
dl_fwd("dl egress vlan 1, 3024", P.downlink_ip(size=3024, l4="tcp"), cfg={"egress_vlan": (1, 4000)})
dl_fwd("dl ethernet padding removed", P.with_trailer(P.downlink_ip(payload=b"", l4="udp"), 18))
dl_fwd("dl ethernet padding removed, csum off", P.with_trailer(P.downlink_ip(payload=b"ab", l4="udp"), 16),
       cfg={"csum": False})
dl_fwd("dl inner ip options", P.downlink_ip(payload=bytes(30), options=b"\x94\x04\x00\x00", l4="tcp"))
dl_fwd("dl other protocol (GRE) full sum", P.downlink_ip(size=300, l4=47))
dl_fwd("dl ue pool /0", P.downlink_ip(size=128), cfg={"ue_pool": "0.0.0.0/0"})
dl_fwd("dl egress == ingress -> TX", P.downlink_ip(size=200), verdict="tx",
       cfg={"nexthop": (Nexthop(LO_IF, P.PGW_ACCESS_MAC, SGW_MAC), NH_SGI)}, ingress_ifindex=LO_IF)
dl_fwd("dl local addr other", P.downlink_ip(size=200), cfg={"local_addr": "203.0.113.7"})
# udp payload chosen so the outer checksum sums to 0 is rare; covered by the full check on every row

# TS 29.281 4.4.2.0: the outer source port should vary; by default (every dl row above) it comes
# from the inner flow (oracle.sport_of_flow), with --sport-entropy off it is 2152
for _l4 in ("udp", "tcp", "icmp", 47):
    dl_fwd(f"dl sport entropy, {_l4}", P.downlink_ip(size=300, l4=_l4))
    dl_fwd(f"dl sport entropy, {_l4}, checksum off", P.downlink_ip(size=300, l4=_l4), cfg={"csum": False})
dl_fwd("dl sport entropy, udp first fragment (no ports)", P.downlink_ip(size=300, l4="udp", mf=True))
dl_fwd("dl sport entropy, tcp non-first fragment", P.downlink_ip(size=300, l4="tcp", frag=50))
dl_fwd("dl sport entropy, other ports", P.downlink_ip(size=300, l4="udp", sport=1234, dport=4321))
dl_fwd("dl sport entropy, inner ip options", P.downlink_ip(payload=bytes(30), options=b"\x94\x04\x00\x00",
                                                           l4="tcp"))
dl_fwd("dl sport entropy, udp header cut to 3 bytes", with_ip(bytes(P.downlink_ip(size=128, l4="udp"))[:14 + 23],
                                                              14, tot_len=23), cfg={"csum": False})
_FIXED = {"sport_entropy": False}
for _l4 in ("udp", "tcp", "icmp", 47):
    dl_fwd(f"dl sport fixed 2152, {_l4}", P.downlink_ip(size=300, l4=_l4), cfg=_FIXED)
    dl_fwd(f"dl sport fixed 2152, {_l4}, checksum off", P.downlink_ip(size=300, l4=_l4), cfg=dict(_FIXED, csum=False))
dl_fwd("dl sport fixed 2152, vlan out", P.downlink_ip(size=300), cfg=dict(_FIXED, egress_vlan=(7, 0)))
dl_fwd("dl sport fixed 2152, qfi 9", P.downlink_ip(QFI_BEARERS[0][1], size=300, l4="tcp"), ue=QFI_BEARERS[0][1],
       cfg=_FIXED)
# 5G N3, TS 38.415: a bearer with a QFI
for _teid, _ue, _sgw, _st, _q in QFI_BEARERS:
    for _size in (64, 512, 1518, 3024):
        for _cs in (True, False):
            dl_fwd(f"dl qfi {_q}, {_size}, csum {'on' if _cs else 'off'}", P.downlink_ip(_ue, size=_size, l4="tcp"),
                   ue=_ue, cfg={"csum": _cs})
    dl_fwd(f"dl qfi {_q}, udp csum 0 (full sum)", P.downlink_ip(_ue, size=300, udp_csum=False), ue=_ue)
    dl_fwd(f"dl qfi {_q}, vlan out", P.downlink_ip(_ue, size=300), ue=_ue, cfg={"egress_vlan": (7, 0)})
untouched("dl outside UE pool", "sgi", P.downlink_ip("203.0.113.5", size=128), "pass_not_ue")
untouched("dl outside UE pool, vlan", "sgi", P.downlink_ip("10.46.0.1", size=128, vlan=4), "pass_not_ue")
untouched("dl pool /32 other", "sgi", P.downlink_ip(UE_ON, size=128), "pass_not_ue", cfg={"ue_pool": f"{UE_DEF}/32"})
drop("dl unknown UE in pool", "sgi", P.downlink_ip("10.45.9.9", size=128), "drop_unknown_ue")
drop("dl pool /0, unknown UE", "sgi", P.downlink_ip("203.0.113.5", size=128), "drop_unknown_ue",
     cfg={"ue_pool": "0.0.0.0/0"})


def ttl_dl_row(name, pkt, cfg=None):
    cfg = cfg or {}
    b = bytes(pkt)
    row(name, "sgi", b, "drop_ttl_expired", "tx", expected=O.time_exceeded_dl_expected(b, cfg_of(cfg).local_addr),
        cfg=cfg)


ttl_dl_row("dl ttl 1 -> time exceeded", P.downlink_ip(size=128, ttl=1))
ttl_dl_row("dl ttl 0 -> time exceeded", P.downlink_ip(size=128, ttl=0))
ttl_dl_row("dl ttl 1, tcp 1518", P.downlink_ip(size=1518, ttl=1, l4="tcp"))
ttl_dl_row("dl ttl 1, vlan", P.downlink_ip(size=256, ttl=1, vlan=200))
ttl_dl_row("dl ttl 1, ip options", P.downlink_ip(payload=bytes(30), options=b"\x94\x04\x00\x00", l4="tcp", ttl=1))
ttl_dl_row("dl ttl 1, 2 bytes after the header", P.downlink_ip(payload=b"ab", l4=47, ttl=1))
ttl_dl_row("dl ttl 1, ethernet padding", P.with_trailer(P.downlink_ip(payload=b"", l4="udp", ttl=1), 18))
drop("dl ttl 1, replies off", "sgi", P.downlink_ip(size=128, ttl=1), "drop_ttl_expired", cfg={"err_ind": False})
drop("dl ttl 1 from 224.0.0.1", "sgi", P.downlink_ip(src="224.0.0.1", size=128, ttl=1), "drop_ttl_expired")
drop("dl ttl 1, no GTP-U address to answer from", "sgi", P.downlink_ip(size=128, ttl=1), "drop_ttl_expired",
     cfg={"local_addr": "0.0.0.0"})
_d = bytes(P.downlink_ip(size=128))
drop("dl IHL 4", "sgi", with_ip(_d, 14, ver_ihl=0x44), "drop_bad_ip_dl")
drop("dl version 5", "sgi", with_ip(_d, 14, ver_ihl=0x55), "drop_bad_ip_dl")
drop("dl tot_len > frame", "sgi", with_ip(_d, 14, tot_len=len(_d) - 13), "drop_bad_ip_dl")
drop("dl tot_len < IHL*4", "sgi", with_ip(_d, 14, tot_len=16), "drop_bad_ip_dl")
drop("dl IHL 15 > frame", "sgi", with_ip(_d[:14 + 50], 14, ver_ihl=0x4F, tot_len=50), "drop_bad_ip_dl")
untouched("sgi ARP", "sgi", P.arp_request(src="198.51.100.1", target="198.51.100.2"), "pass_not_ipv4")
# IPv6 on SGi goes to xdp_sgi6 (test_dataplane_ipv6.py): 2001:db8::1's /64 has no bearer
drop("sgi IPv6", "sgi", P.ipv6_packet(), "drop_unknown_ue")
_dq = bytes(P.downlink_ip(size=128, vlan=10))
untouched("sgi QinQ", "sgi", _dq[:12] + b"\x88\xa8" + _dq[14:], "pass_not_ipv4")
untouched("sgi double 802.1Q", "sgi", _dq[:12] + b"\x81\x00\x00\x0b" + _dq[12:], "pass_not_ipv4")
untouched("sgi GTP-U arriving on SGi for a non-UE address", "sgi", P.gpdu(size=200), "pass_not_ue")
for cut in range(14, 18):
    drop(f"sgi vlan trunc {cut}", "sgi", _dq[:cut], "drop_trunc_eth")
for cut in range(18, len(_dq)):
    drop(f"sgi trunc raw {cut}", "sgi", _dq[:cut], "drop_bad_ip_dl")
for cut in range(14 + 20, 14 + 20 + 30):  # consistent cuts: the IP packet is shorter but valid
    _c = with_ip(_d[:cut], 14, tot_len=cut - 14)
    dl_fwd(f"dl consistent cut {cut}, csum off", _c, cfg={"csum": False})

IDS = [r.name for r in ROWS]
assert len(set(IDS)) == len(IDS), "row names must be unique"


# ================================ the test =======================================================
@pytest.fixture(scope="module")
def dp(dataplane):
    return dataplane


def setup_row(dp, r: Row):
    dp.set_config(cfg_of(r.cfg))
    dp.flush_bearers()
    for m in ("reply_budget", "peers", "sig_rx"):
        dp.clear_map(m)
    # PGWU_REG_REASM: a registered reassembler's tgid (any non-zero value to the XDP program)
    dp.maps["fib_gen"].update(struct.pack("=I", 3), struct.pack("=Q", 1 if r.reassembler else 0))
    for teid, ue, sgw, sgw_teid, csum in BEARERS:
        dp.add_bearer(teid, ue, sgw, sgw_teid, csum=csum)
    for teid, ue, sgw, sgw_teid, qfi in QFI_BEARERS:
        dp.add_bearer(teid, ue, sgw, sgw_teid, qfi=qfi)


def usage_now(dp) -> dict:
    out = {}
    for teid, ue, *_ in BEARERS + QFI_BEARERS:
        u, d = dp.ul_bearer(teid), dp.dl_bearer(ue)
        out[("ul", teid)] = (u.packets, u.bytes)
        out[("dl", ue)] = (d.packets, d.bytes)
    return out


def run_row(dp, r: Row):
    setup_row(dp, r)
    before = dp.stats_array()
    res = (dp.run_access if r.prog == "access" else dp.run_sgi)(r.frame, ingress_ifindex=r.ingress_ifindex)
    after = dp.stats_array()
    return res, stats_delta(before, after)


@pytest.mark.parametrize("r", ROWS, ids=IDS)
@pytest.mark.bpf
def test_row(dp, r: Row):
    res, delta = run_row(dp, r)
    got_reason = ", ".join(f"{k[0]}/{k[1]}" for k in delta) or "nothing counted"
    assert (res.verdict, delta) == (r.verdict, {(r.reason, r.verdict): (1, len(r.frame))}), (
        f"{r.name}: expected {r.reason}/{r.verdict}, got verdict {res.verdict}, counted {got_reason} {delta}\n"
        + O.describe("input", r.frame))
    if r.expected is not None:
        actual = res.data
        expected = r.expected
        if r.any_ip_id and len(actual) == len(expected):
            # outer IP id is "any value" without DF: take the program's id, rebuild the expected frame
            l2, _ = O.l2_split(expected)
            ip_id = struct.unpack("!H", actual[l2 + 4:l2 + 6])[0]
            ue = O.ip_payload(r.frame)[16:20]
            import socket
            expected = dl_expect(r.frame, cfg_of(r.cfg), socket.inet_ntoa(ue), r.csum, ip_id)
        assert actual == expected, f"{r.name}: output differs\n" + O.mismatch_report(expected, actual)
        if r.csum is not None:
            l2, _ = O.l2_split(actual)
            ihl = (actual[l2] & 0xF) * 4
            ck = actual[l2 + ihl + 6:l2 + ihl + 8]
            if r.csum:
                assert O.outer_udp_ok(actual), f"{r.name}: outer UDP checksum wrong (RFC 1071)"
            else:
                assert ck == b"\0\0", f"{r.name}: outer UDP checksum {ck.hex()} but checksum is off"
    now = usage_now(dp)
    want = {k: (0, 0) for k in now}
    if r.usage:
        side, key, nbytes = r.usage
        want[(side, key)] = (1, nbytes)
    assert now == want, f"{r.name}: bearer usage counters"
    if r.after is not None:
        r.after(dp)


# ---- tests that are not rows ----------------------------------------------------------------------
def test_rows_cover_every_reason_they_can():
    """Every reason reachable without route lookups appears in the table."""
    covered = {r.reason for r in ROWS}
    fib_only = {"pass_no_neigh", "pass_fib_other", "drop_no_route", "drop_adjust", "drop_not_configured",
                "drop_frag_needed",  # test_dataplane_fib.py::test_frag_needed_answered
                "drop_too_big",      # test_dataplane_ipv6.py (IPv6, a route's MTU)
                "drop_outer_udp_csum"}  # test_dataplane_n3v6.py (GTP-U over IPv6 only)
    qos = {"drop_gate_closed", "drop_mbr", "drop_quota"}    # test_qos.py (they need a qos map entry)
    sdf = {"drop_no_pdr", "drop_far"}                       # test_sdf.py (they need SDF filters)
    cp = {"ul_cp_fwd", "dl_cp_fwd"}                         # test_cp_relay.py (the CP function's relays)
    assert set(REASONS) - fib_only - qos - sdf - cp - covered == set()


def test_every_row_pair_is_documented():
    for r in ROWS:
        assert r.verdict in usual_verdicts(r.reason), r.name


@pytest.mark.bpf
def test_stats_accumulate_and_reset(dp):
    """The stats map counts exactly the packets run, by (reason, verdict), and reset_stats clears it."""
    dp.reset_stats()
    assert dp.stats() == {}
    subset = ROWS[::7]
    want: dict = {}
    for r in subset:
        setup_row(dp, r)
        res = (dp.run_access if r.prog == "access" else dp.run_sgi)(r.frame, ingress_ifindex=r.ingress_ifindex)
        assert res.verdict == r.verdict, r.name
        p, n = want.get((r.reason, r.verdict), (0, 0))
        want[(r.reason, r.verdict)] = (p + 1, n + len(r.frame))
    assert dp.stats() == want
    dp.reset_stats()
    assert dp.stats() == {}


@pytest.mark.bpf
def test_usage_accumulates(dp):
    """Usage counters add up over several packets (packets, bytes = inner tot_len)."""
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    for b in BEARERS:
        dp.add_bearer(*b[:4], csum=b[4])
    total_ul = total_dl = 0
    for size in (128, 512, 1518):
        f = bytes(P.gpdu(size=size))
        assert dp.run_access(f).verdict == "redirect"
        total_ul += len(O.gpdu_inner(f))
        d = bytes(P.downlink_ip(size=size))
        assert dp.run_sgi(d).verdict == "redirect"
        total_dl += len(O.ip_payload(d))
    u, dl = dp.ul_bearer(TEID_DEF), dp.dl_bearer(UE_DEF)
    assert (u.packets, u.bytes) == (3, total_ul)
    assert (dl.packets, dl.bytes) == (3, total_dl)


@pytest.mark.bpf
def test_bearers_sharing_a_slot(dp):
    """Two bearers whose TEIDs and UE addresses fall in the same slot of the direct index (keys one
    index size apart): the first is indexed, the second lives in the hash maps only. Both are
    forwarded with their own SGW TEID and counted exactly, and deleting either one leaves the
    other working (the slot is emptied only for its own key)."""
    import ipaddress
    n = dp.maps["ul_slots"].max_entries
    a = (TEID_DEF, UE_DEF, P.TEID_DL)
    b = (TEID_DEF + n, str(ipaddress.ip_address(UE_DEF) + n), 0x777)
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    dp.clear_map("reply_budget")
    for teid, ue, sgw_teid in (a, b):
        dp.add_bearer(teid, ue, P.SGW_ADDR, sgw_teid)
    assert dp._slot("ul", struct.pack("!I", a[0]))[1] is not None
    assert dp._slot("ul", struct.pack("!I", b[0]))[1] is None

    def both_ways(bearer, expect):
        teid, ue, sgw_teid = bearer
        up = dp.run_access(bytes(P.gpdu(teid=teid, ue=ue, size=200)))
        down = dp.run_sgi(bytes(P.downlink_ip(ue=ue, size=200)))
        if expect:
            assert up.verdict == "redirect" and down.verdict == "redirect", (bearer, up, down)
            assert struct.unpack_from("!I", down.data, 14 + 20 + 8 + 4)[0] == sgw_teid
        else:   # the G-PDU is answered with an Error Indication (budget: 10 per peer at once)
            assert up.verdict == "tx" and down.verdict == "drop", (bearer, up, down)
            assert up.data == O.error_indication_expected(bytes(P.gpdu(teid=teid, ue=ue, size=200)), P.PGW_ADDR)

    for x in (a, b, b):
        both_ways(x, True)
    assert (dp.ul_bearer(a[0]).packets, dp.dl_bearer(a[1]).packets) == (1, 1)
    assert (dp.ul_bearer(b[0]).packets, dp.dl_bearer(b[1]).packets) == (2, 2)
    dp.del_bearer(a[0], a[1])
    both_ways(a, False)
    both_ways(b, True)
    assert (dp.ul_bearer(b[0]).packets, dp.dl_bearer(b[1]).packets) == (3, 3)
    dp.add_bearer(a[0], a[1], P.SGW_ADDR, a[2])       # the slot is free again: a takes it
    assert dp._slot("ul", struct.pack("!I", a[0]))[1] is not None
    dp.del_bearer(b[0], b[1])
    both_ways(b, False)
    both_ways(a, True)
    assert (dp.ul_bearer(a[0]).packets, dp.dl_bearer(a[1]).packets) == (1, 1)


def _spread_of(dp, frames) -> list[int]:
    """The outer source port of each frame's G-PDU (run twice: one flow, one port), all in 49152-65535."""
    ports = []
    for f in frames:
        out = [dp.run_sgi(f) for _ in range(2)]
        assert out[0].verdict == "redirect" and out[0].data[34:36] == out[1].data[34:36]
        ports.append(struct.unpack("!H", out[0].data[34:36])[0])
    assert all(49152 <= p <= 65535 for p in ports)
    return ports


@pytest.mark.bpf
def test_outer_ip_ids_unique_across_cpus(dp):
    """Outer headers without DF (the kernel may fragment them, and a peer reassembles by IP id) get
    IDs unique across CPUs (RFC 6864 4.1): 100 packets of one flow run on CPU 0, then 100 on CPU 1,
    give 200 different IDs. Per-CPU counters gave both CPUs the same 100."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this test needs 2 CPUs to run the program on (the project's machine has 2)")
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    for b in BEARERS:
        dp.add_bearer(*b[:4], csum=b[4])
    frame = bytes(P.downlink_ip(size=300, l4="udp"))          # no DF
    cpus = sorted(os.sched_getaffinity(0))[:2]
    saved = os.sched_getaffinity(0)
    ids: list[int] = []
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            for _ in range(100):
                out = dp.run_sgi(frame)
                assert out.verdict == "redirect" and out.data[20] & 0x40 == 0   # encapsulated, no DF
                ids.append(struct.unpack("!H", out.data[18:20])[0])
    finally:
        os.sched_setaffinity(0, saved)
    assert len(set(ids)) == 200, f"{200 - len(set(ids))} outer IP ids repeated across CPUs {cpus}"


@pytest.mark.bpf
def test_sport_entropy_spreads_flows(dp):
    """With sport_entropy (the default), one flow always gets the same outer source port, and 1,024
    flows of one bearer (as an SGW's RSS sees them) spread over the dynamic range: no port holds more
    than 1 %."""
    dp.set_config(cfg_of({"sport_entropy": True}))
    dp.flush_bearers()
    for b in BEARERS:
        dp.add_bearer(*b[:4], csum=b[4])
    ports = _spread_of(dp, [bytes(P.downlink_ip(size=128, l4="udp", sport=10000 + i, dport=443))
                            for i in range(1024)])
    from collections import Counter
    assert max(Counter(ports).values()) <= 10 and len(set(ports)) > 900, len(set(ports))
    dp.set_config(BASE_CONFIG)


@pytest.mark.bpf
def test_sport_entropy_spreads_the_bearers_of_one_sgw(dp):
    """The bearers of one SGW differ in the UE address's last octets (and a server's flows in the
    PDN address's): 1,024 consecutive UEs behind one SGW, one flow each, get nearly 1,024 outer
    source ports (a uniform 14-bit hash: ~994), and the 8 RSS queues a receiver might pick by the
    port's low bits each get 1/8 +- 25 %. A hash whose input's last octets reach only high bits
    (the first pgwu_sport_of: 257 ports, 3 queues empty) fails both."""
    import ipaddress
    from collections import Counter
    dp.set_config(cfg_of({"sport_entropy": True}))
    dp.flush_bearers()
    ues = [str(ipaddress.ip_address("10.45.16.0") + i) for i in range(1024)]
    for i, ue in enumerate(ues):
        dp.add_bearer(0x10000 + i, ue, P.SGW_ADDR, 0x20000 + i)
    try:
        for frames in ([bytes(P.downlink_ip(ue, size=128, l4="udp")) for ue in ues],
                       [bytes(P.downlink_ip(ues[0], str(ipaddress.ip_address("198.18.0.1") + i), size=128, l4="udp"))
                        for i in range(1024)]):
            ports = _spread_of(dp, frames)
            assert ports == [O.sport_of_flow(O.ip_payload(f)) for f in frames]
            queues = Counter(p % 8 for p in ports)
            assert len(set(ports)) > 950 and len(queues) == 8, (len(set(ports)), queues)
            assert all(96 <= n <= 160 for n in queues.values()), queues
    finally:
        dp.flush_bearers()
        dp.set_config(BASE_CONFIG)


@pytest.mark.parametrize("data,seed,want", [
    (b"", 0, 0), (b"", 1, 0x514E28B7), (b"", 0xFFFFFFFF, 0x81F16F39), (b"\xff\xff\xff\xff", 0, 0x76293B50),
    (b"\x21\x43\x65\x87", 0, 0xF55B516B), (b"\x21\x43\x65\x87", 0x5082EDEE, 0x2362F9DE),
    (b"\x21\x43\x65", 0, 0x7E4A8634), (b"\x21\x43", 0, 0xA0F7B07A), (b"\x21", 0, 0x72661CF4),
    (b"\x00\x00\x00\x00", 0, 0x2362F9DE), (b"Hello, world!", 1234, 0xFAF6CDB3),
    (b"The quick brown fox jumps over the lazy dog", 0x9747B28C, 0x2FA826CD)])
def test_oracle_murmur3_vectors(data, seed, want):
    """The oracle's MurmurHash3_x86_32 gives the published test vectors (the port oracle rests on it)."""
    assert O.murmur3_32(data, seed) == want


@pytest.mark.bpf
def test_config_roundtrip(dp):
    cfg = cfg_of({"egress_vlan": (5, 4094), "restart_counter": 9, "fib_cache": True, "sport_entropy": False})
    dp.set_config(cfg)
    assert dp.get_config() == cfg


def test_config_flags_match_header():
    """gtplab.dut.dataplane's CFG_* bits are pgwu.h's PGWU_CFG_* bits, name for name; the
    off-switches (NO_*, SPORT_FIXED) are what a zeroed config turns on."""
    import re
    from gtplab.dut import dataplane as D
    header = PGWU_H.read_text()
    c_bits = {n: 1 << int(b) for n, b in re.findall(r"#define PGWU_CFG_(\w+)\s+\(1U << (\d+)\)", header)}
    py_bits = {n[4:]: v for n, v in vars(D).items() if n.startswith("CFG_") and isinstance(v, int)}
    assert c_bits == py_bits and "SPORT_FIXED" in c_bits
    zero = Config.unpack(bytes(Config.SIZE))
    assert (zero.err_ind, zero.inner_csum_check, zero.sport_entropy) == (True, True, True)
    assert zero == Config()


def test_reasons_parsed_from_header():
    r = parse_reasons()
    assert r[0] == "ul_fwd" and "drop_unknown_teid" in r and r == REASONS
    assert REASON["drop_unknown_teid"] == r.index("drop_unknown_teid")


def _btf_structs() -> dict[str, dict]:
    """{struct: {"size": n, "members": {name: byte offset}}} from the object's BTF (bpftool)."""
    import shutil
    # bpftool is in /usr/sbin, off an unprivileged user's PATH; reading a file's BTF needs no privilege
    tool = shutil.which("bpftool", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin"]))
    if tool is None:
        pytest.fail("bpftool not found (on PATH or in /usr/sbin): setup.sh installs it")
    out = subprocess.run([tool, "btf", "dump", "file", str(PGWU_OBJ), "format", "raw"],
                         capture_output=True, text=True, check=True).stdout
    structs: dict[str, dict] = {}
    cur = None
    for line in out.splitlines():
        if line.startswith("["):
            cur = None
            parts = line.split()
            if len(parts) > 2 and parts[1] == "STRUCT":
                name = parts[2].strip("'")
                size = int(next(p for p in parts if p.startswith("size=")).split("=")[1])
                cur = structs.setdefault(name, {"size": size, "members": {}})
        elif cur is not None and line.strip().startswith("'"):
            name = line.strip().split("'")[1]
            off = int(line.split("bits_offset=")[1].split()[0])
            cur["members"][name] = off // 8
    return structs


def test_struct_layout_matches_btf():
    if not PGWU_OBJ.exists():
        pytest.fail(f"{PGWU_OBJ} not built: run make -C dataplane")
    s = _btf_structs()
    for name, size in STRUCT_SIZES.items():
        assert name in s, f"struct {name} not in BTF of {PGWU_OBJ}"
        assert s[name]["size"] == size, f"struct {name}: BTF size {s[name]['size']}, Python packs {size}"
    m = s["pgwu_config"]["members"]
    assert (m["local_addr"], m["flags"], m["ue_pool_addr"], m["ue_pool_mask"], m["egress_vlan"],
            m["restart_counter"], m["nexthop"]) == (0, 4, 8, 12, 16, 20, 24)
    assert s["pgwu_nexthop"]["members"] == {"ifindex": 0, "smac": 4, "dmac": 10}
    assert s["pgwu_dl_bearer"]["members"] == {"sgw_addr": 0, "sgw_teid": 4, "local_teid": 8, "flags": 12,
                                              "packets": 16, "bytes": 24}
    assert s["pgwu_ul_bearer"]["members"] == {"ue_addr": 0, "flags": 4, "packets": 8, "bytes": 16}
    assert s["pgwu_peer"]["members"] == {"rsp_ns": 0, "req_ns": 8, "responses": 16, "restarts": 24, "req_seq": 28,
                                         "rsp_seq": 30, "restart_counter": 32, "has_recovery": 33, "pad": 34}
    assert s["pgwu_sig_key"]["members"] == {"teid": 0, "addr": 4, "type": 8, "pad": 9}
    assert s["pgwu_sig_val"]["members"] == {"packets": 0, "last_ns": 8, "from": 16, "pad": 20}


# ---- replies: rate limit per peer, events ---------------------------------------------------------
REPLY_RATE, REPLY_BURST = 10, 10     # PGWU_REPLY_RATE / PGWU_REPLY_BURST (dataplane/include/consts.h)


def test_consts_match_reply_budget():
    text = (PGWU_DIR / "include" / "consts.h").read_text()
    import re
    assert int(re.search(r"#define PGWU_REPLY_RATE (\d+)", text).group(1)) == REPLY_RATE
    assert int(re.search(r"#define PGWU_REPLY_BURST (\d+)", text).group(1)) == REPLY_BURST


@pytest.mark.bpf
def test_error_indications_rate_limited_per_peer(dp):
    """A flood of unknown TEIDs from one peer: every G-PDU is counted drop_unknown_teid; only the
    peer's budget (10 at once, then 10 a second) becomes Error Indications (verdict tx, event
    err_ind_sent), the rest are dropped (event err_ind_rate_limited). Another peer still gets its
    own budget, and the flooding peer's budget comes back with time."""
    import time
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    dp.clear_map("reply_budget")
    dp.reset_stats()
    n = 60
    t0 = time.monotonic()
    verdicts = [dp.run_access(bytes(P.gpdu(teid=0xD000 + i, size=128))).verdict for i in range(n)]
    elapsed = time.monotonic() - t0
    sent = verdicts.count("tx")
    assert verdicts[:REPLY_BURST] == ["tx"] * REPLY_BURST, verdicts
    assert sent <= REPLY_BURST + int(elapsed * REPLY_RATE) + 1, (sent, elapsed)
    assert verdicts.count("drop") == n - sent
    ev = dp.events()
    assert (ev["err_ind_sent"], ev["err_ind_rate_limited"]) == (sent, n - sent), ev
    st = dp.stats()
    assert (st.get(("drop_unknown_teid", "tx"), (0, 0))[0], st.get(("drop_unknown_teid", "drop"), (0, 0))[0]) == \
        (sent, n - sent), st
    # another peer: its own budget
    other = dp.run_access(bytes(P.gpdu(teid=0xD000, size=128, outer_src="192.0.2.77")))
    assert other.verdict == "tx"
    assert other.data == O.error_indication_expected(bytes(P.gpdu(teid=0xD000, size=128, outer_src="192.0.2.77")),
                                                     P.PGW_ADDR)
    # the flooding peer, 0.35 s later: at least 3 more replies' worth of budget
    time.sleep(0.35)
    later = [dp.run_access(bytes(P.gpdu(teid=0xD000, size=128))).verdict for _ in range(3)]
    assert later == ["tx"] * 3, later
    dp.reset_stats()
    assert dp.events() == {e: 0 for e in dp.events()}


@pytest.mark.bpf
def test_supported_ext_notifications_share_the_budget(dp):
    """Unknown comprehension-required extension headers from one peer: the same budget per peer."""
    dp.set_config(BASE_CONFIG)
    dp.flush_bearers()
    dp.clear_map("reply_budget")
    dp.reset_stats()
    f = bytes(P.gpdu(size=256, ext=[P.ext_header(0xA0, b"\x01\x02")]))
    verdicts = [dp.run_access(f).verdict for _ in range(REPLY_BURST + 5)]
    assert verdicts[:REPLY_BURST] == ["tx"] * REPLY_BURST
    ev = dp.events()
    assert ev["supp_ext_sent"] == verdicts.count("tx") and ev["supp_ext_rate_limited"] == verdicts.count("drop")
    assert ev["supp_ext_rate_limited"] >= 1
    dp.reset_stats()


@pytest.mark.bpf
def test_echo_responses_track_peer_restarts(dp):
    """The peers map follows a peer's Recovery restart counter: a change counts a restart."""
    dp.set_config(BASE_CONFIG)
    dp.clear_map("peers")

    def rsp(seq, rc):
        return bytes(P.echo_response(seq, restart_counter=rc, src="192.0.2.44", dst=P.PGW_ADDR,
                                     src_mac=P.SGW_MAC, dst_mac=P.PGW_ACCESS_MAC))
    for seq, rc in ((1, 5), (2, 5), (3, 6), (4, 6), (5, 0)):
        assert dp.run_access(rsp(seq, rc)).verdict == "drop"
    p = dp.peers()["192.0.2.44"]
    assert (p["responses"], p["restarts"], p["restart_counter"], p["rsp_seq"]) == (5, 2, 0, 5), p
    dp.clear_map("peers")


@pytest.mark.bpf
def test_signalling_counted_per_tunnel(dp):
    """Error Indications and End Markers add up per (type, TEID, address) in sig_rx."""
    dp.set_config(BASE_CONFIG)
    dp.clear_map("sig_rx")
    for _ in range(3):
        dp.run_access(bytes(P.error_indication(teid=P.TEID_DL)))
    dp.run_access(bytes(P.error_indication(teid=0x77)))
    for _ in range(2):
        dp.run_access(bytes(P.end_marker(teid=P.TEID_UL)))
    got = {k: v["packets"] for k, v in dp.sig_rx().items()}
    assert got == {(26, P.TEID_DL, P.SGW_ADDR): 3, (26, 0x77, P.SGW_ADDR): 1, (254, P.TEID_UL, P.SGW_ADDR): 2}
    dp.clear_map("sig_rx")
