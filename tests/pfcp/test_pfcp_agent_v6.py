"""`pgwu pfcp` and IPv6 UEs (issue 32): a PDR's UE IP Address (TS 29.244 8.2.62) with V6 installs the
/64 of its address for the bearer, in the two maps the XDP PGW-U reads (dataplane/include/maps.h):
dl6_bearers (/64 -> the IPv6 downlink half) and ul6_prefix (the uplink TEID -> /64, anti-spoofing).

Each test has its own PGW-U and agent (tests/pfcp/conftest.py). What the agent did is read from the
maps themselves and from `pgwu session list --json`; packets run through the programs with
BPF_PROG_TEST_RUN, one run each. docs/pfcp.md (the UE IP Address row) and docs/ipv6.md say what is
accepted and what is refused.
"""

from __future__ import annotations

import os
import socket
import struct

import pytest
from scapy.contrib.pfcp import (IE_CreatePDR, IE_FAR_Id, IE_FSEID, IE_PDI, IE_PDR_Id, IE_Precedence,
                                IE_SourceInterface, IE_UE_IP_Address)
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from gtplab.dut.dataplane import Dataplane, DlBearer
from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created_teid, failed_rule, tables, up_seid, usage_report
from tests.lib.pfcp_smf import dl_teid, forwarding_config
from tests.lib.pgwu import pgwu
from tests.lib.pgwu_config import stats_delta

pytestmark = pytest.mark.bpf

UE4 = "10.45.0.7"
UE6 = "fd47:7470:0:7::1234"          # an address in the UE's /64 (host bits set: the /64 is what counts)
PFX6 = "fd47:7470:0:7::/64"
SERVER6 = "fd47:7471::10"
PDR = 0                              # Failed Rule ID's rule type of a PDR (8.2.80)


def p64(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, addr)[:8]


def ue_ip(v4: str | None, v6: str | None, sd: int, pd_bits: int | None = None, plen: int | None = None):
    """UE IP Address (8.2.62); pd_bits: IPv6D and the IPv6 Prefix Delegation Bits octet, plen: IPv6PL and
    the IPv6 Prefix Length octet (Scapy's IE has neither: they are the spare bits 4 and 7 and trailing
    octets, in the order the spec gives)."""
    spare = (0x01 if pd_bits is not None else 0) | (0x08 if plen is not None else 0)
    extra = (bytes([pd_bits]) if pd_bits is not None else b"") + (bytes([plen]) if plen is not None else b"")
    kw = {"SD": sd, "spare": spare, "extra_data": extra}
    if v4:
        kw.update(V4=1, ipv4=v4)
    if v6:
        kw.update(V6=1, ipv6=v6)
    return IE_UE_IP_Address(**kw)


def dl_pdr6(v4: str | None, v6: str | None, urr: bool = False, **kw) -> IE_CreatePDR:
    ies = [IE_PDR_Id(id=M.DL_PDR), IE_Precedence(precedence=100),
           IE_PDI(IE_list=[IE_SourceInterface(interface=1), ue_ip(v4, v6, 1, **kw)]), IE_FAR_Id(id=M.DL_FAR)]
    if urr:
        ies.append(M.IE_URR_Id(id=M.URR_ID))
    return IE_CreatePDR(IE_list=ies)


def establish6(assoc, seq: int, cp_seid: int, v4: str | None = UE4, v6: str | None = UE6, *, sgw=M.SGW_ADDR,
               urr: bool = False, ul_ue=None, **kw):
    """One bearer as test_pfcp_agent's, its downlink PDR's UE IP Address with V6 (and V4 when v4);
    ul_ue: the uplink PDR's UE IP Address IE (default none)."""
    ul = M.ul_pdr(None, None, urr=urr, extra=[ul_ue] if ul_ue is not None else ())
    ies = [M.node_id(), IE_FSEID(v4=1, seid=cp_seid, ipv4=M.CP_ADDR), ul, dl_pdr6(v4, v6, urr=urr, **kw),
           M.ul_far(), M.dl_far(sgw, 0x100 + seq) if sgw else M.dl_far_buffer()]
    if urr:
        ies.append(M.create_urr())
    return assoc.req(M.establish(seq, cp_seid, v4 or "", ies=ies))


def maps6(pin_dir: str) -> dict:
    """{"dl6": {/64: DlBearer}, "ul6": {TEID: /64}}: every entry of the two maps."""
    out = {"dl6": {}, "ul6": {}}
    for name, key in (("dl6_bearers", "dl6"), ("ul6_prefix", "ul6")):
        m = bpf.Map.pinned(os.path.join(pin_dir, name))
        try:
            for k in list(m.keys()):
                v = m.lookup(k)
                if v is None:
                    continue
                if key == "dl6":
                    out[key][bytes(k)] = DlBearer.unpack(bytes(v)[:DlBearer.SIZE])
                else:
                    out[key][struct.unpack("!I", bytes(k))[0]] = bytes(v)[:8]   # the /64 (first field)
        finally:
            m.close()
    return out


def rule(resp):
    fr = failed_rule(resp)
    return None if fr is None else (fr[0] & 0x1f, int.from_bytes(fr[1:], "big"))


def dl6_frame(dst: str = UE6, payload: int = 200) -> bytes:
    return bytes(Ether(src=P.ROUTER_SGI_MAC, dst=P.PGW_SGI_MAC) / IPv6(src=SERVER6, dst=dst, hlim=64) /
                 UDP(sport=40000, dport=5001) / Raw(b"\x5a" * payload))


def ipv6_len(frame: bytes) -> int:
    """What the downlink usage counts of an IPv6 packet: its length, the header's 40 octets included."""
    return 40 + struct.unpack_from("!H", frame, 14 + 4)[0]


def owner_of(flags: int) -> int:
    return flags >> 16


# ---- establishment --------------------------------------------------------------------------------

def test_ipv4v6_session_installs_both_halves_and_the_64(assoc, pin_dir):
    r = establish6(assoc, 2, 0x10)
    assert cause(r) == 1
    teid = created_teid(r)
    m = maps6(pin_dir)
    assert m["ul6"] == {teid: p64(UE6)}                      # uplink anti-spoofing: TEID -> /64
    [(k, d)] = m["dl6"].items()
    assert k == p64(UE6)
    assert (d.sgw_addr, d.sgw_teid, d.local_teid) == (M.SGW_ADDR, 0x102, teid)
    [b] = tables(pin_dir)
    assert (b["teid"], b["ue"], b["sgw"], b["sgw_teid"], b["ue6"]) == (teid, UE4, M.SGW_ADDR, 0x102, PFX6)
    assert b["owner"] == "pfcp" and owner_of(d.flags) != 0   # the session's halves, its tag on the /64 too
    # the IPv4 and the IPv6 downlink of the one bearer both reach the SGW's TEID
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(bytes(P.downlink_ip(ue=UE4, size=300))).verdict == "redirect"
        res = dp.run_sgi(dl6_frame())
        assert res.verdict == "redirect"
        assert struct.unpack_from("!I", res.data, 14 + 20 + 8 + 4)[0] == 0x102


def test_ipv6_only_session_installs_the_64_and_no_ipv4(assoc, pin_dir):
    """V6 without V4: the bearer's uplink half (the TEID's: its flags, QoS and counters) carries no IPv4
    address (0.0.0.0), no IPv4 downlink half is written; the /64 is in both maps. An IPv4 T-PDU on that
    TEID, even from 0.0.0.0, is spoofed."""
    r = establish6(assoc, 2, 0x10, v4=None)
    assert cause(r) == 1
    teid = created_teid(r)
    m = maps6(pin_dir)
    assert m["ul6"] == {teid: p64(UE6)} and list(m["dl6"]) == [p64(UE6)]
    [b] = tables(pin_dir)
    assert (b["teid"], b["ue"], b["downlink"], b["ue6"]) == (teid, "0.0.0.0", None, PFX6)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.dl_bearer("0.0.0.0") is None
        assert dp.run_sgi(dl6_frame()).verdict == "redirect"
        s0 = dp.stats_array()
        assert dp.run_access(bytes(P.gpdu(teid=teid, ue="0.0.0.0", size=200))).verdict == "drop"
        assert list(stats_delta(s0, dp.stats_array())) == [("drop_spoofed", "drop")]
    # a second IPv6-only session (another /64) is its own: UE 0.0.0.0 is no address they share
    r2 = establish6(assoc, 3, 0x11, v4=None, v6="fd47:7470:0:8::1")
    assert cause(r2) == 1
    assert len(maps6(pin_dir)["ul6"]) == 2


def test_uplink_pdr_ue_ip_must_name_the_downlinks(assoc, pin_dir):
    """The uplink PDR's UE IP Address, when there is one, names the downlink's: same IPv4, same /64 (its
    host bits may differ); another /64 is 73 on the downlink PDR, as another IPv4 address."""
    ok = establish6(assoc, 2, 0x10, ul_ue=ue_ip(UE4, "fd47:7470:0:7::99", 0))
    assert cause(ok) == 1
    before = (tables(pin_dir), maps6(pin_dir))
    r = establish6(assoc, 3, 0x11, v4="10.45.0.8", v6="fd47:7470:0:9::1",
                   ul_ue=ue_ip("10.45.0.8", "fd47:7470:0:a::1", 0))
    assert (cause(r), rule(r)) == (73, (PDR, M.DL_PDR))
    assert (tables(pin_dir), maps6(pin_dir)) == before


# ---- refusals: each 73 naming the downlink PDR, the tables as they were ------------------------------

BAD = [
    ("prefix delegation /60", dict(pd_bits=4)),
    ("prefix length /56", dict(plen=56)),
    ("prefix length /129", dict(plen=129)),
    ("multicast", dict(v6="ff02::1")),
    ("link-local", dict(v6="fe80::1")),
    ("unspecified ::", dict(v6="::")),
    ("::/64 with host bits", dict(v6="::1:2:3:4")),
]


@pytest.mark.parametrize("name,kw", BAD, ids=[b[0] for b in BAD])
def test_unusable_ipv6_prefix_refused_73(assoc, pin_dir, name, kw):
    before = (tables(pin_dir), maps6(pin_dir))
    r = establish6(assoc, 2, 0x10, **kw)
    assert (cause(r), rule(r)) == (73, (PDR, M.DL_PDR))
    assert (tables(pin_dir), maps6(pin_dir)) == before


@pytest.mark.parametrize("kw", [dict(pd_bits=0), dict(plen=64), dict(pd_bits=0, plen=64)],
                         ids=["ipv6d 0 bits", "ipv6pl 64", "both"])
def test_explicit_64_accepted(assoc, pin_dir, kw):
    r = establish6(assoc, 2, 0x10, **kw)
    assert cause(r) == 1
    assert maps6(pin_dir)["ul6"] == {created_teid(r): p64(UE6)}


def test_prefix_longer_than_64_served_by_its_64(assoc, pin_dir):
    """A /128 (IPv6PL 128) is installed as its /64: the downlink to any address of it, the uplink from
    it (anti-spoofing by the /64); no other session may then have a prefix in that /64 (a /96: 73)."""
    r = establish6(assoc, 2, 0x10, plen=128)
    assert cause(r) == 1
    m = maps6(pin_dir)
    assert (m["ul6"], list(m["dl6"])) == ({created_teid(r): p64(UE6)}, [p64(UE6)])
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(dl6_frame("fd47:7470:0:7::99")).verdict == "redirect"
    r2 = establish6(assoc, 3, 0x11, v4="10.45.0.8", v6="fd47:7470:0:7:1::", plen=96)
    assert (cause(r2), rule(r2)) == (73, (PDR, M.DL_PDR))


def test_prefix_shorter_than_64_refused_73_with_a_line(assoc, pin_dir):
    """A delegation (/56 by IPv6D's bits, /63 by IPv6PL) would need a /64 entry each: refused, and said."""
    for seq, kw in enumerate([dict(pd_bits=8), dict(plen=63)]):
        r = establish6(assoc, 2 + seq, 0x10 + seq, **kw)
        assert (cause(r), rule(r), tables(pin_dir)) == (73, (PDR, M.DL_PDR), []), kw
    out = assoc.stop()
    assert "a UE IPv6 prefix /56 (IPv6D delegation bits)" in out, out       # one line a minute: the first


@pytest.mark.parametrize("holder", ["session", "buffering session", "pgwu session add"])
def test_a_64_that_has_a_bearer_refused_73(assoc, pin_dir, holder):
    """Another address in a /64 some bearer has: 73 naming the downlink PDR, whoever holds it: an
    agent's session (also one whose downlink FAR buffers, so nothing is in dl6_bearers), or a bearer
    `pgwu session add --ue6` wrote."""
    if holder == "pgwu session add":
        pgwu(pin_dir, "session", "add", "--teid", "0x77", "--ue", "10.45.9.9", "--sgw", M.SGW_ADDR,
             "--sgw-teid", "5", "--ue6", PFX6)
    else:
        assert cause(establish6(assoc, 2, 0x10, sgw=M.SGW_ADDR if holder == "session" else None)) == 1
    before = (tables(pin_dir), maps6(pin_dir))
    r = establish6(assoc, 3, 0x11, v4="10.45.0.8", v6="fd47:7470:0:7::5678")
    assert (cause(r), rule(r)) == (73, (PDR, M.DL_PDR))
    assert (tables(pin_dir), maps6(pin_dir)) == before
    r = establish6(assoc, 4, 0x12, v4=None, v6="fd47:7470:0:7::5678", sgw=None)
    assert (cause(r), rule(r)) == (73, (PDR, M.DL_PDR))
    assert (tables(pin_dir), maps6(pin_dir)) == before


# ---- modification and deletion keep the /64 with the session ----------------------------------------

@pytest.mark.parametrize("v4", [UE4, None], ids=["ipv4v6", "ipv6-only"])
def test_deletion_removes_the_64(assoc, pin_dir, v4):
    pgwu(pin_dir, "session", "add", "--teid", "0x77", "--ue", "10.45.9.9", "--sgw", M.SGW_ADDR,
         "--sgw-teid", "5", "--ue6", "fd47:7470:0:99::/64")       # someone else's: stays
    before = (tables(pin_dir), maps6(pin_dir))
    r = establish6(assoc, 2, 0x10, v4=v4)
    assert cause(r) == 1
    assert len(maps6(pin_dir)["dl6"]) == 2
    assert cause(assoc.req(M.delete(3, up_seid(r)))) == 1
    assert (tables(pin_dir), maps6(pin_dir)) == before
    # the /64 is free again
    assert cause(establish6(assoc, 4, 0x11, v4=v4)) == 1


@pytest.mark.parametrize("v4", [UE4, None], ids=["ipv4v6", "ipv6-only"])
def test_modification_moves_stops_and_restarts_the_ipv6_downlink(assoc, pin_dir, v4):
    """Update FAR: a new SGW F-TEID rewrites the IPv6 half as the IPv4 one; BUFF removes both downlink
    halves (the uplink's /64 stays: uplink anti-spoofing); FORW again puts them back."""
    r = establish6(assoc, 2, 0x10, v4=v4)
    assert cause(r) == 1
    seid, teid = up_seid(r), created_teid(r)
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(dl6_frame()).verdict == "redirect"   # counted in its slot (dl6_slots)
    assert cause(assoc.req(M.modify_dl(3, seid, sgw=M.SGW_ADDR2, sgw_teid=0x222))) == 1
    d = maps6(pin_dir)["dl6"][p64(UE6)]
    assert (d.sgw_addr, d.sgw_teid, d.local_teid) == (M.SGW_ADDR2, 0x222, teid)
    assert d.packets == 1                                       # the slot's usage folded in
    with Dataplane(pin_dir) as dp:                              # the packet path sees the move
        forwarding_config(dp)
        res = dp.run_sgi(dl6_frame())
        assert (res.verdict, socket.inet_ntoa(res.data[14 + 16:14 + 20]), dl_teid(res.data)) == (
            "redirect", M.SGW_ADDR2, 0x222)
    assert cause(assoc.req(M.modify_dl_buffer(4, seid))) == 1
    m = maps6(pin_dir)
    assert m == {"dl6": {}, "ul6": {teid: p64(UE6)}}
    with Dataplane(pin_dir) as dp:                              # and the halves' removal
        forwarding_config(dp)
        assert dp.run_sgi(dl6_frame()).verdict == "drop"
    [b] = tables(pin_dir)
    assert b["downlink"] is None
    assert cause(assoc.req(M.modify_dl(5, seid, sgw=M.SGW_ADDR, sgw_teid=0x333))) == 1
    d = maps6(pin_dir)["dl6"][p64(UE6)]
    assert (d.sgw_addr, d.sgw_teid, d.local_teid) == (M.SGW_ADDR, 0x333, teid)
    if v4:
        [b] = tables(pin_dir)
        assert (b["sgw"], b["sgw_teid"]) == (M.SGW_ADDR, 0x333)
    assert cause(assoc.req(M.delete(6, seid))) == 1
    assert maps6(pin_dir) == {"dl6": {}, "ul6": {}} and tables(pin_dir) == []


# ---- usage ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("v4", [UE4, None], ids=["ipv4v6", "ipv6-only"])
def test_usage_reports_count_ipv6_downlink(assoc, pin_dir, v4):
    """A Query URR and the deletion's report carry the IPv6 downlink exactly: octets are the IPv6
    packets' lengths (header included), packets one each, beside the IPv4 packets of an IPv4v6 bearer;
    the IPv6 usage of a downlink half removed while buffering is in the final report too."""
    r = establish6(assoc, 2, 0x10, v4=v4, urr=True)
    assert cause(r) == 1
    seid = up_seid(r)
    f6 = dl6_frame(payload=300)
    n6, n4 = 3, (2 if v4 else 0)
    f4 = bytes(P.downlink_ip(ue=UE4, size=500))
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert [dp.run_sgi(f6).verdict for _ in range(n6)] == ["redirect"] * n6
        assert [dp.run_sgi(f4).verdict for _ in range(n4)] == ["redirect"] * n4
    dl_octets = n6 * ipv6_len(f6) + n4 * struct.unpack_from("!H", f4, 14 + 2)[0]   # IPv4 total length
    q = assoc.req(M.query_urr(3, seid))
    assert cause(q) == 1
    [ur] = [i for i in q.payload.IE_list if i.ietype == 78]   # Usage Report (Modification Response)
    assert usage_report(ur)["volume"] == (dl_octets, 0, dl_octets, n6 + n4, 0, n6 + n4)
    # downlink stops (its halves go, their usage kept), 1 more IPv6 packet before that
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(f6).verdict == "redirect"
    assert cause(assoc.req(M.modify_dl_buffer(4, seid))) == 1
    d = assoc.req(M.delete(5, seid))
    assert cause(d) == 1
    [ur] = [i for i in d.payload.IE_list if i.ietype == 79]
    assert usage_report(ur)["volume"] == (ipv6_len(f6), 0, ipv6_len(f6), 1, 0, 1)
