"""`pgwu pfcp` and the CP function's PDRs (issue 32 item 3): the session Open5GS's SMF establishes for an
IPv6 PDU session (src/smf/context.c smf_sess_create_cp_up_data_forwarding): besides the defaults, an
UP2CP PDR (uplink, precedence 10 here, `permit out 58 from ff02::2/128 to assigned`) whose FAR
forwards to the CP function in a GTP-U tunnel (Destination Interface CP-function, Outer Header
Creation: the SMF's address and TEID), and a CP2UP PDR (Source Interface CP-function, its own F-TEID,
CHOOSE) whose FAR is the downlink FAR. The agent installs the first as an SDF PDR the XDP program
relays (xdp_cp), the second as a tunnel whose G-PDUs go to the UE's with the downlink PSC of its QFI.
Sessions are built with gtplab/pfcp/rules.py (Pdr.to_cp, Session.cp2up); packets run through the
loaded programs with BPF_PROG_TEST_RUN and are compared octet for octet. docs/ipv6.md, docs/pfcp.md.
"""

from __future__ import annotations

import os

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6ND_RS, ICMPv6NDOptPrefixInfo, IPv6
from scapy.packet import Raw

from gtplab.dut.dataplane import Dataplane
from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import cause, created, failed_rule, ies, up_seid, usage_report
from tests.lib.pfcp_smf import forwarding_config
from tests.lib.pgwu_config import stats_delta

pytestmark = pytest.mark.bpf

UE4, PFX6, UE6, UE_LL = "10.45.0.8", "fd47:7470:0:8::/64", "fd47:7470:0:8::1234", "fe80::8"
SMF, SMF_LL, CP_TEID, GNB_TEID, QFI = "192.0.2.50", "fe80::1", 0xC0DE0008, 0x108, 9
SMF2, CP_TEID2, GNB2_TEID = "192.0.2.51", 0xC0DE0108, 0x208   # after the Update FARs
CP_FLOW = R.SdfFilter(flow="permit out 58 from ff02::2/128 to assigned")     # as Open5GS's SMF sends it
NH_ACCESS_DMAC = "02:00:00:00:01:99"            # forwarding_config's access next hop
PDR, FAR = 0, 1                                 # Failed Rule ID types (8.2.80)


def session(ue=UE4, ue6=PFX6, to_cp=(SMF, CP_TEID), cp2up=True) -> R.Session:
    """Open5GS-shaped: CHOOSE, QFI 9, URR 1 on the defaults, the UP2CP PDR with URR 2, the CP2UP PDR"""
    return R.Session(ue=ue, teid=None, n3=M.GTPU_ADDR, gnb=M.SGW_ADDR, gnb_teid=GNB_TEID, qfi=QFI,
                     urr=R.UrrSpec(), ue6=ue6, cp2up=cp2up,
                     pdrs=(R.Pdr(uplink=True, precedence=10, sdf=(CP_FLOW,), to_cp=to_cp, urr=R.UrrSpec()),))


def est(assoc, seq: int, cp_seid: int, s: R.Session):
    return assoc.req(M.establish(seq, cp_seid, s.ue or UE4,
                                 ies=R.establishment_ies(M.node_id(), M.CP_ADDR, cp_seid, s)))


def n_entries(pin_dir: str) -> dict[str, int]:
    out = {}
    for name in ("sdf_lists", "sdf_pdrs", "cp_relay"):
        with bpf.Map.pinned(os.path.join(pin_dir, name)) as m:
            out[name] = len(list(m.keys()))
    return out


def rs() -> IPv6:
    return IPv6(src=UE_LL, dst="ff02::2", hlim=255) / ICMPv6ND_RS()


def ra() -> IPv6:
    return IPv6(src=SMF_LL, dst=UE_LL, hlim=255) / ICMPv6ND_RA() / ICMPv6NDOptPrefixInfo(prefix="fd47:7470:0:8::",
                                                                                        prefixlen=64)


def udp6() -> IPv6:
    return IPv6(src=UE6, dst="2001:db8:5::7") / UDP(sport=40000, dport=5001) / Raw(b"\x5a" * 100)


def one(dp, f: bytes):
    """((reason, verdict), frame out) of one frame into xdp_access"""
    s0 = dp.stats_array()
    r = dp.run_access(f)
    [k] = list(stats_delta(s0, dp.stats_array()))
    return k, bytes(r.data)


def update_far_to_cp(seq: int, seid: int, far_id: int, addr: str, teid: int):
    """Update FAR of the FAR to the CP function: a new tunnel (Update Forwarding Parameters)"""
    from scapy.contrib import pfcp as sp
    upd = sp.IE_UpdateFAR(IE_list=[sp.IE_FAR_Id(id=far_id), sp.IE_UpdateForwardingParameters(IE_list=[
        sp.IE_DestinationInterface(interface="CP-function"), R.outer_header_creation(teid, addr)])])
    return sp.PFCP(version=1, S=1, seid=seid, seq=seq) / sp.PFCPSessionModificationRequest(IE_list=[upd])


def reports(resp, ietype: int) -> dict[int, tuple]:
    return {r["urr"]: r["volume"] for r in (usage_report(i) for i in ies(resp) if i.ietype == ietype)}


def test_open5gs_up2cp_and_cp2up_relay_and_report(assoc, pin_dir):
    """Accepted (Cause 1) with three F-TEIDs created: the uplink's, the UP2CP PDR's (the same one) and
    the CP2UP PDR's (its own). A Router Solicitation from the UE (UL PSC QFI 9) leaves in a G-PDU to
    the SMF's address and TEID; the SMF's Router Advertisement to the CP2UP TEID leaves to the gNB with
    the DL PSC of QFI 9; the UE's IPv6 UDP is forwarded to N6 as always. An Update FAR of the FAR to
    the CP function moves the RS to its new tunnel, one of the downlink FAR (a handover) the RA to the
    new gNB. The deletion reports the two RS in URR 2 (the UP2CP PDR's) and the UDP packet in URR 1,
    and leaves no rule and no tunnel."""
    s = session()
    r = est(assoc, 2, 0x10, s)
    assert cause(r) == 1, failed_rule(r)
    c = created(r)
    cp2up = R.cp2up_pdr_id(s)
    assert set(c) == {R.PDR_UL, 3, cp2up} and c[3] == c[R.PDR_UL] and c[cp2up] != c[R.PDR_UL], c
    teid, seid = c[R.PDR_UL], up_seid(r)
    assert n_entries(pin_dir) == {"sdf_lists": 1, "sdf_pdrs": 2, "cp_relay": 2}
    psc_ul = [P.pdu_session_container(QFI)]
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        k, out = one(dp, bytes(P.gtpu(rs(), teid=teid, ext=psc_ul)))
        assert k == ("ul_cp_fwd", "redirect")
        assert out == bytes(P.gtpu(rs(), teid=CP_TEID, src=M.GTPU_ADDR, dst=SMF, src_mac=P.PGW_ACCESS_MAC,
                                   dst_mac=NH_ACCESS_DMAC)), out.hex()
        k, out = one(dp, bytes(P.gtpu(ra(), teid=c[cp2up], src=SMF)))
        assert k == ("dl_cp_fwd", "redirect")
        assert out == bytes(P.gtpu(ra(), teid=GNB_TEID, src=M.GTPU_ADDR, dst=M.SGW_ADDR, src_mac=P.PGW_ACCESS_MAC,
                                   dst_mac=NH_ACCESS_DMAC, ext=[P.pdu_session_container(QFI, uplink=False)])), \
            out.hex()
        k, _ = one(dp, bytes(P.gtpu(udp6(), teid=teid, ext=psc_ul)))
        assert k == ("ul_fwd", "redirect")
    # Update FAR: the FAR to the CP function in a new tunnel; the downlink FAR to a new gNB (a
    # handover): the RS follows the first, the RA the second
    bad = assoc.req(update_far_to_cp(3, seid, R.FAR_DL + 1, "2001:db8::51", CP_TEID2))   # over IPv6: 73
    assert (cause(bad), failed_rule(bad)[0] & 0x1f, int.from_bytes(failed_rule(bad)[1:], "big")) == \
        (73, FAR, R.FAR_DL + 1)
    assert cause(assoc.req(update_far_to_cp(3, seid, R.FAR_DL + 1, SMF2, CP_TEID2))) == 1
    assert cause(assoc.req(M.modify_dl(4, seid, sgw=M.SGW_ADDR2, sgw_teid=GNB2_TEID, far_id=R.FAR_DL))) == 1
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        k, out = one(dp, bytes(P.gtpu(rs(), teid=teid, ext=psc_ul)))
        assert (k, out) == (("ul_cp_fwd", "redirect"), bytes(P.gtpu(
            rs(), teid=CP_TEID2, src=M.GTPU_ADDR, dst=SMF2, src_mac=P.PGW_ACCESS_MAC, dst_mac=NH_ACCESS_DMAC)))
        k, out = one(dp, bytes(P.gtpu(ra(), teid=c[cp2up], src=SMF)))
        assert (k, out) == (("dl_cp_fwd", "redirect"), bytes(P.gtpu(
            ra(), teid=GNB2_TEID, src=M.GTPU_ADDR, dst=M.SGW_ADDR2, src_mac=P.PGW_ACCESS_MAC,
            dst_mac=NH_ACCESS_DMAC, ext=[P.pdu_session_container(QFI, uplink=False)])))
    d = assoc.req(M.delete(5, seid))
    assert cause(d) == 1
    n_rs, n_udp = len(rs()), len(udp6())
    assert reports(d, 79) == {1: (n_udp, n_udp, 0, 1, 1, 0), 2: (2 * n_rs, 2 * n_rs, 0, 2, 2, 0)}
    assert n_entries(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "cp_relay": 0}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        (reason, _), _ = one(dp, bytes(P.gtpu(ra(), teid=c[cp2up], src=SMF)))
        assert reason == "drop_unknown_teid"


def test_what_it_cannot_do_is_73(assoc, pin_dir):
    """Still 73, naming the rule, the tables as they were: a CP2UP PDR in a session without a /64 (the
    CP function sends IPv6), and a FAR to the CP function in a GTP-U/UDP/IPv6 tunnel."""
    for seq, s, want in ((2, session(ue6=None), (PDR, None)),
                         (3, session(to_cp=("2001:db8::50", CP_TEID), cp2up=False), (FAR, R.FAR_DL + 1))):
        r = est(assoc, seq, 0x10 + seq, s)
        assert cause(r) == 73, (seq, cause(r))
        fr = failed_rule(r)
        rid = (fr[0] & 0x1f, int.from_bytes(fr[1:], "big"))
        assert rid == (want[0], want[1] if want[1] is not None else R.cp2up_pdr_id(s)), rid
        assert n_entries(pin_dir) == {"sdf_lists": 0, "sdf_pdrs": 0, "cp_relay": 0}


def with_cp2up_urr(ies_: list, s: R.Session, urr_id: int = R.URR_ID) -> list:
    """The establishment's IEs with the CP2UP PDR linking URR urr_id (as an SMF whose session URR
    all of its PDRs link sends it)"""
    from scapy.contrib import pfcp as sp
    for ie in ies_:
        if isinstance(ie, sp.IE_CreatePDR) and ie[sp.IE_PDR_Id].id == R.cp2up_pdr_id(s):
            ie.IE_list.append(sp.IE_URR_Id(id=urr_id))
    return ies_


def test_urr_on_the_cp2up_pdr_counts_the_relayed_advertisements(assoc, pin_dir):
    """URR 1, linked by the defaults and by the CP2UP PDR: the Router Advertisements relayed to the UE
    are its downlink usage (the tunnel's cp_relay counters, the T-PDU's length), exact to the packet
    and octet in a Query URR and, for those after it, in the deletion's report; the UP2CP PDR's URR 2
    counts the Solicitation only."""
    s = session()
    r = assoc.req(M.establish(2, 0x10, UE4, ies=with_cp2up_urr(
        R.establishment_ies(M.node_id(), M.CP_ADDR, 0x10, s), s)))
    assert cause(r) == 1, failed_rule(r)
    c = created(r)
    teid, seid, cp_teid = c[R.PDR_UL], up_seid(r), c[R.cp2up_pdr_id(s)]
    psc_ul = [P.pdu_session_container(QFI)]
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        for _ in range(2):
            assert one(dp, bytes(P.gtpu(ra(), teid=cp_teid, src=SMF)))[0] == ("dl_cp_fwd", "redirect")
        assert one(dp, bytes(P.gtpu(udp6(), teid=teid, ext=psc_ul)))[0] == ("ul_fwd", "redirect")
        assert one(dp, bytes(P.gtpu(rs(), teid=teid, ext=psc_ul)))[0] == ("ul_cp_fwd", "redirect")
    n_ra, n_rs, n_udp = len(ra()), len(rs()), len(udp6())
    q = assoc.req(M.query_urr(3, seid, urr_ids=(1, 2)))
    assert cause(q) == 1
    assert reports(q, 78) == {1: (n_udp + 2 * n_ra, n_udp, 2 * n_ra, 3, 1, 2), 2: (n_rs, n_rs, 0, 1, 1, 0)}
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert one(dp, bytes(P.gtpu(ra(), teid=cp_teid, src=SMF)))[0] == ("dl_cp_fwd", "redirect")
    d = assoc.req(M.delete(4, seid))
    assert cause(d) == 1
    assert reports(d, 79) == {1: (n_ra, 0, n_ra, 1, 0, 1), 2: (0, 0, 0, 0, 0, 0)}
