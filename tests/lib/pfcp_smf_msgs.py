"""PFCP sessions shaped the way deployed SMFs and PFCP simulators shape them (3GPP TS 29.244), built
with Scapy's contrib.pfcp: the one source of these messages for tests/pfcp/test_pfcp_agent_smf.py,
the namespace test (tests/pfcp/test_pfcp_agent_lab.py), the fuzz seed corpus
(dataplane/fuzz/pfcp_seeds.py) and bench/pfcp_agent_bench.py --shape smf. tests/lib/pfcp_msgs.py has
the one-bearer messages; this module adds the SMF's shape on top of it:

- a session-level QER (the session AMBR) plus one QER per PDR (3 QERs), the flow QERs with the QFI;
- two URRs: a periodic one (VOLUM+DURAT, PERIO, Measurement Period) and a volume threshold / quota
  one (VOLUM, VOLTH+VOLQU), both counted by both PDRs;
- an SDF Filter in each PDI ("permit out ip from any to assigned"), Network Instance, UE IP, QFI;
- the downlink FAR created as DROP with Forwarding Parameters whose Outer Header Creation is a
  placeholder (TEID 0, 0.0.0.0) until the RAN's tunnel is known; a Create BAR; PDN Type;
- the modification that makes it forward: Update FAR (FORW, the RAN's F-TEID), Update URR.

Each function returns a Scapy packet; bytes(pkt) is the datagram.
"""

from __future__ import annotations

import struct

from scapy.contrib.pfcp import (
    IE_ApplyAction, IE_BAR_Id, IE_Create_BAR, IE_CreateFAR, IE_CreatePDR, IE_CreateQER, IE_CreateURR,
    IE_DestinationInterface, IE_FAR_Id, IE_ForwardingParameters, IE_FSEID, IE_FTEID, IE_GateStatus, IE_GBR,
    IE_MBR, IE_MeasurementMethod, IE_MeasurementPeriod, IE_NetworkInstance, IE_OuterHeaderCreation,
    IE_OuterHeaderRemoval, IE_PDI, IE_PDNType, IE_PDR_Id, IE_Precedence, IE_QER_Id, IE_QFI,
    IE_ReportingTriggers, IE_SDF_Filter, IE_SourceInterface, IE_UE_IP_Address, IE_UpdateFAR,
    IE_UpdateForwardingParameters, IE_UpdateURR, IE_URR_Id, IE_VolumeQuota, IE_VolumeThreshold, PFCP,
    PFCPSessionEstablishmentRequest, PFCPSessionModificationRequest,
)
from scapy.packet import Raw

from tests.lib import pfcp_msgs as M

MATCH_ALL = "permit out ip from any to assigned"
UL_PDR, DL_PDR, UL_FAR, DL_FAR = 1, 2, 1, 2
QER_SESSION, QER_UL, QER_DL = 1, 2, 3          # session AMBR, one per PDR
URR_PERIODIC, URR_VOLUME = 1, 2
QFI = 9
AMBR_KBPS = (200_000, 400_000)                 # uplink, downlink
FLOW_MBR_KBPS = (100_000, 150_000)
FLOW_GBR_KBPS = (1_000, 2_000)
PERIOD_S = 60
VOL_THRESHOLD = 1_000_000_000
VOL_QUOTA = 2_000_000_000
VOL_THRESHOLD2 = 500_000_000                   # what the Update URR sets


def sdf(desc: str = MATCH_ALL, **flags) -> IE_SDF_Filter:
    """An SDF Filter with a Flow Description (TS 29.212 5.4.2); flags: TTC/SPI/FL/BID and their fields."""
    return IE_SDF_Filter(FD=1, flow_description=desc, **flags)


def ul_pdr(ue: str, teid: int | None = None, sdfs=(MATCH_ALL,), pdr_id: int = UL_PDR, qers=(QER_SESSION, QER_UL),
           urrs=(URR_PERIODIC, URR_VOLUME), extra=()) -> IE_CreatePDR:
    fteid = IE_FTEID(V4=1, CH=1) if teid is None else IE_FTEID(V4=1, TEID=teid, ipv4=M.GTPU_ADDR)
    pdi = [IE_SourceInterface(interface=0), fteid, IE_NetworkInstance(instance="internet"),
           IE_UE_IP_Address(V4=1, SD=0, ipv4=ue)]
    pdi += [sdf(d) if isinstance(d, str) else d for d in sdfs]
    pdi += [IE_QFI(QFI=QFI)] + list(extra)
    ies = [IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=255), IE_PDI(IE_list=pdi),
           IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=UL_FAR)]
    ies += [IE_QER_Id(id=q) for q in qers] + [IE_URR_Id(id=u) for u in urrs]
    return IE_CreatePDR(IE_list=ies)


def dl_pdr(ue: str, sdfs=(MATCH_ALL,), pdr_id: int = DL_PDR, qers=(QER_SESSION, QER_DL),
           urrs=(URR_PERIODIC, URR_VOLUME), extra=()) -> IE_CreatePDR:
    pdi = [IE_SourceInterface(interface=1), IE_NetworkInstance(instance="internet"),
           IE_UE_IP_Address(V4=1, SD=1, ipv4=ue)]
    pdi += [sdf(d) if isinstance(d, str) else d for d in sdfs] + list(extra)
    ies = [IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=255), IE_PDI(IE_list=pdi), IE_FAR_Id(id=DL_FAR)]
    ies += [IE_QER_Id(id=q) for q in qers] + [IE_URR_Id(id=u) for u in urrs]
    return IE_CreatePDR(IE_list=ies)


def ul_far() -> IE_CreateFAR:
    return IE_CreateFAR(IE_list=[IE_FAR_Id(id=UL_FAR), IE_ApplyAction(FORW=1), IE_ForwardingParameters(
        IE_list=[IE_DestinationInterface(interface=1), IE_NetworkInstance(instance="internet")])])


def dl_far_drop(teid: int = 0, addr: str = "0.0.0.0", **apply) -> IE_CreateFAR:
    """The downlink FAR before the RAN's F-TEID is known: DROP, with a placeholder outer header."""
    return IE_CreateFAR(IE_list=[
        IE_FAR_Id(id=DL_FAR), IE_ApplyAction(**(apply or {"DROP": 1})),
        IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface=0),
                                         IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=teid, ipv4=addr)]),
        IE_BAR_Id(id=1)])


def qers(qfi: int = QFI) -> list:
    return [IE_CreateQER(IE_list=[IE_QER_Id(id=QER_SESSION), IE_GateStatus(ul=0, dl=0),
                                  IE_MBR(ul=AMBR_KBPS[0], dl=AMBR_KBPS[1])]),
            IE_CreateQER(IE_list=[IE_QER_Id(id=QER_UL), IE_GateStatus(ul=0, dl=0),
                                  IE_MBR(ul=FLOW_MBR_KBPS[0], dl=FLOW_MBR_KBPS[1]),
                                  IE_GBR(ul=FLOW_GBR_KBPS[0], dl=FLOW_GBR_KBPS[1]), IE_QFI(QFI=qfi)]),
            IE_CreateQER(IE_list=[IE_QER_Id(id=QER_DL), IE_GateStatus(ul=0, dl=0),
                                  IE_MBR(ul=FLOW_MBR_KBPS[0], dl=FLOW_MBR_KBPS[1]), IE_QFI(QFI=qfi)])]


def urrs() -> list:
    return [IE_CreateURR(IE_list=[IE_URR_Id(id=URR_PERIODIC), IE_MeasurementMethod(VOLUM=1, DURAT=1),
                                  IE_ReportingTriggers(periodic_reporting=1),
                                  IE_MeasurementPeriod(period=PERIOD_S)]),
            IE_CreateURR(IE_list=[IE_URR_Id(id=URR_VOLUME), IE_MeasurementMethod(VOLUM=1),
                                  IE_ReportingTriggers(volume_threshold=1, volume_quota=1),
                                  IE_VolumeThreshold(TOVOL=1, total=VOL_THRESHOLD),
                                  IE_VolumeQuota(TOVOL=1, total=VOL_QUOTA)])]


def create_bar():
    return IE_Create_BAR(IE_list=[IE_BAR_Id(id=1)])


def establish_ies(cp_seid: int, ue: str, teid: int | None = None, node: str = M.CP_NODE,
                  cp_addr: str = M.CP_ADDR, ul=None, dl=None, dl_far=None, extra=()) -> list:
    return [M.node_id(node), IE_FSEID(v4=1, seid=cp_seid, ipv4=cp_addr),
            ul if ul is not None else ul_pdr(ue, teid), dl if dl is not None else dl_pdr(ue), ul_far(),
            dl_far if dl_far is not None else dl_far_drop(), *qers(), *urrs(), create_bar(),
            IE_PDNType(pdn_type=1), *extra]


def establish(seq: int, cp_seid: int, ue: str, teid: int | None = None, node: str = M.CP_NODE,
              header_seid: int = 0, ies=None, **kw):
    """The SMF's first establishment of a PDU session (downlink FAR DROP, placeholder outer header)."""
    return PFCP(version=1, S=1, seid=header_seid, seq=seq) / PFCPSessionEstablishmentRequest(
        IE_list=ies if ies is not None else establish_ies(cp_seid, ue, teid, node, **kw))


def modify_forward(seq: int, up_seid: int, sgw: str = M.SGW_ADDR, sgw_teid: int = 0x100,
                   update_urr: bool = True, extra=()):
    """The RAN's F-TEID is known: the downlink FAR forwards there; the volume URR gets a new threshold."""
    ies = [IE_UpdateFAR(IE_list=[
        IE_FAR_Id(id=DL_FAR), IE_ApplyAction(FORW=1),
        IE_UpdateForwardingParameters(IE_list=[IE_DestinationInterface(interface=0),
                                               IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=sgw_teid, ipv4=sgw)])])]
    if update_urr:
        ies.append(IE_UpdateURR(IE_list=[IE_URR_Id(id=URR_VOLUME),
                                         IE_VolumeThreshold(TOVOL=1, total=VOL_THRESHOLD2)]))
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=ies + list(extra))


def corpus() -> dict[str, bytes]:
    """The SMF shapes, for the fuzz seed corpus."""
    ue = "10.45.0.7"
    return {
        "smf_establish": bytes(establish(20, 0x51, ue)),
        "smf_establish_teid": bytes(establish(21, 0x52, ue, teid=0x4321)),
        "smf_establish_sdf_narrow": bytes(establish(22, 0x53, ue, ul=ul_pdr(
            ue, sdfs=("permit out 17 from 198.51.100.0/24 1000-2000 to assigned",)))),
        "smf_establish_sdf_host": bytes(establish(23, 0x54, ue, ul=ul_pdr(
            ue, sdfs=(f"permit out ip from any to {ue}/32", sdf(MATCH_ALL, TTC=1, tos_traffic_class=0x10))))),
        "smf_modify_forward": bytes(modify_forward(24, 0x100000001)),
        "smf_modify_urr_null_ie": bytes(PFCP(version=1, S=1, seid=0x100000001, seq=25) /
                                        PFCPSessionModificationRequest(IE_list=[IE_UpdateURR(IE_list=[
                                            IE_URR_Id(id=URR_VOLUME), Raw(struct.pack("!HH", 31, 0))])])),
    }
