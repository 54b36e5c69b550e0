"""What the tests of `pgwu pfcp` and N3 over IPv6 share (tests/pfcp/test_pfcp_agent_n3v6.py,
test_pfcp_end_marker.py): the PGW-U's N3 IPv6 address and two gNB addresses, the uplink PDR with its
F-TEID (V4, V6, CHOOSE) and Outer Header Removal, a downlink FAR whose Outer Header Creation is
GTP-U/UDP/IPv6, and a session established with them."""

from __future__ import annotations

from scapy.contrib.pfcp import (IE_ApplyAction, IE_CreateFAR, IE_CreatePDR, IE_DestinationInterface, IE_FAR_Id,
                                IE_ForwardingParameters, IE_FSEID, IE_FTEID, IE_OuterHeaderCreation,
                                IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id, IE_Precedence, IE_SourceInterface)

from tests.lib import pfcp_msgs as M

N3_6 = "fd47:7473::1"
GNB6, GNB6B = "fd47:7473::10", "fd47:7473::11"
UE = "10.45.0.9"


def ul_pdr(v4: bool, v6: bool, ohr: int, teid: int | None = None) -> IE_CreatePDR:
    if teid is None:
        fteid = IE_FTEID(V4=int(v4), V6=int(v6), CH=1)
    else:
        fteid = IE_FTEID(V4=int(v4), V6=int(v6), TEID=teid, **({"ipv4": M.GTPU_ADDR} if v4 else {}),
                         **({"ipv6": N3_6} if v6 else {}))
    return IE_CreatePDR(IE_list=[IE_PDR_Id(id=M.UL_PDR), IE_Precedence(precedence=100),
                                 IE_PDI(IE_list=[IE_SourceInterface(interface=0), fteid]),
                                 IE_OuterHeaderRemoval(header=ohr), IE_FAR_Id(id=M.UL_FAR)])


def ohc6(gnb: str, teid: int):
    return IE_OuterHeaderCreation(GTPUUDPIPV6=1, TEID=teid, ipv6=gnb)


def dl_far6(gnb: str = GNB6, teid: int = 0x600) -> IE_CreateFAR:
    return IE_CreateFAR(IE_list=[IE_FAR_Id(id=M.DL_FAR), IE_ApplyAction(FORW=1),
                                 IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface=0),
                                                                  ohc6(gnb, teid)])])


def establish(assoc, seq, *, v4=True, v6=True, ohr=1, teid=None, dl_far=None):
    body = [M.node_id(), IE_FSEID(v4=1, seid=0x40 + seq, ipv4=M.CP_ADDR), ul_pdr(v4, v6, ohr, teid),
            M.dl_pdr(UE), M.ul_far(), dl_far if dl_far is not None else dl_far6()]
    return assoc.req(M.establish(seq, 0x40 + seq, UE, ies=body))
