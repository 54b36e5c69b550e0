"""Named PFCP messages (3GPP TS 29.244), built with Scapy's contrib.pfcp: the one source of PFCP test
input for tests/pfcp/test_pfcp_agent.py, the fuzz seed corpus (dataplane/fuzz/pfcp_seeds.py) and the
benchmark (bench/pfcp_agent_bench.py). Each function returns a Scapy packet; bytes(pkt) is the
datagram.
"""

from __future__ import annotations

from scapy.contrib.pfcp import (
    IE_ApplyAction, IE_CreateFAR, IE_CreatePDR, IE_CreateQER, IE_CreateURR, IE_DestinationInterface,
    IE_FAR_Id, IE_ForwardingParameters, IE_FSEID, IE_FTEID, IE_GateStatus, IE_MBR,
    IE_MeasurementMethod, IE_NetworkInstance, IE_NodeId, IE_OuterHeaderCreation,
    IE_OuterHeaderRemoval, IE_PDI, IE_PDR_Id, IE_PFCPSMReqFlags, IE_QueryURR, IE_Precedence, IE_QER_Id, IE_QFI, IE_RecoveryTimeStamp,
    IE_ReportingTriggers, IE_SourceInterface, IE_UE_IP_Address, IE_UpdateFAR, IE_MeasurementPeriod,
    IE_TimeThreshold, IE_UpdateURR, IE_VolumeQuota, IE_VolumeThreshold,
    IE_UpdateForwardingParameters, IE_UpdateQER, IE_URR_Id, PFCP, PFCPAssociationReleaseRequest,
    PFCPAssociationSetupRequest, PFCPHeartbeatRequest, PFCPSessionDeletionRequest,
    PFCPSessionEstablishmentRequest, PFCPSessionModificationRequest,
)

CP_ADDR = "127.0.0.1"
CP_NODE = "127.0.0.1"
CP_RTS = 3_900_000_000          # seconds since 1900 (a 2023 date)
GTPU_ADDR = "192.0.2.1"         # the PGW-U's GTP-U address (pgwu load --local-addr): gtplab.gtpu.packets.PGW_ADDR
SGW_ADDR = "192.0.2.2"          # gtplab.gtpu.packets.SGW_ADDR
SGW_ADDR2 = "192.0.2.3"         # the SGW after a handover
UL_PDR, DL_PDR, UL_FAR, DL_FAR, URR_ID, QER_ID = 1, 2, 1, 2, 1, 1


def node_id(node: str = CP_NODE) -> IE_NodeId:
    if all(p.isdigit() for p in node.split(".")) and node.count(".") == 3:
        return IE_NodeId(id_type=0, ipv4=node)
    return IE_NodeId(id_type=2, id=node)


def heartbeat(seq: int = 1, rts: int = CP_RTS):
    return PFCP(version=1, S=0, seq=seq) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=rts)])


def assoc_setup(seq: int = 1, node: str = CP_NODE, rts: int = CP_RTS):
    return PFCP(version=1, S=0, seq=seq) / PFCPAssociationSetupRequest(
        IE_list=[node_id(node), IE_RecoveryTimeStamp(timestamp=rts)])


def assoc_release(seq: int = 1, node: str = CP_NODE):
    return PFCP(version=1, S=0, seq=seq) / PFCPAssociationReleaseRequest(IE_list=[node_id(node)])


def ul_pdr(teid: int | None = None, ue: str | None = None, pdr_id: int = UL_PDR, far_id: int = UL_FAR,
           urr: bool = False, qer: bool = False, extra=(), qfi: int | None = None) -> IE_CreatePDR:
    """Uplink PDR: Access, F-TEID (teid None: CHOOSE), GTP-U/UDP/IPv4 removed, FAR forwarding to Core.
    qfi: a QFI IE in the PDI (8.2.89): uplink G-PDUs must carry it (TS 38.415 UL PDU Session Container)."""
    fteid = (IE_FTEID(V4=1, CH=1) if teid is None else IE_FTEID(V4=1, TEID=teid, ipv4=GTPU_ADDR))
    pdi = [IE_SourceInterface(interface=0), fteid]
    if ue:
        pdi.append(IE_UE_IP_Address(V4=1, ipv4=ue))
    if qfi is not None:
        pdi.append(IE_QFI(QFI=qfi))
    pdi += list(extra)
    ies = [IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=100), IE_PDI(IE_list=pdi),
           IE_OuterHeaderRemoval(header=0), IE_FAR_Id(id=far_id)]
    if urr:
        ies.append(IE_URR_Id(id=URR_ID))
    if qer:
        ies.append(IE_QER_Id(id=QER_ID))
    return IE_CreatePDR(IE_list=ies)


def dl_pdr(ue: str, pdr_id: int = DL_PDR, far_id: int = DL_FAR, urr: bool = False,
           qer: bool = False) -> IE_CreatePDR:
    """Downlink PDR: Core, the UE's address as destination, FAR forwarding to Access."""
    ies = [IE_PDR_Id(id=pdr_id), IE_Precedence(precedence=100),
           IE_PDI(IE_list=[IE_SourceInterface(interface=1), IE_UE_IP_Address(V4=1, SD=1, ipv4=ue)]),
           IE_FAR_Id(id=far_id)]
    if urr:
        ies.append(IE_URR_Id(id=URR_ID))
    if qer:
        ies.append(IE_QER_Id(id=QER_ID))
    return IE_CreatePDR(IE_list=ies)


def ul_far(far_id: int = UL_FAR) -> IE_CreateFAR:
    return IE_CreateFAR(IE_list=[IE_FAR_Id(id=far_id), IE_ApplyAction(FORW=1),
                                 IE_ForwardingParameters(IE_list=[IE_DestinationInterface(interface=1)])])


def dl_far(sgw: str = SGW_ADDR, sgw_teid: int = 0x100, far_id: int = DL_FAR, ohc: bool = True) -> IE_CreateFAR:
    fwd = [IE_DestinationInterface(interface=0)]
    if ohc:
        fwd.append(IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=sgw_teid, ipv4=sgw))
    return IE_CreateFAR(IE_list=[IE_FAR_Id(id=far_id), IE_ApplyAction(FORW=1),
                                 IE_ForwardingParameters(IE_list=fwd)])


def dl_far_buffer(far_id: int = DL_FAR) -> IE_CreateFAR:
    """The downlink FAR of a 5G SMF before the RAN's F-TEID is known: buffer, notify the CP."""
    return IE_CreateFAR(IE_list=[IE_FAR_Id(id=far_id), IE_ApplyAction(BUFF=1, NOCP=1)])


def urr_ies(period: int | None = None, vol_thresh: int | None = None, vol_quota: int | None = None,
            time_thresh: int | None = None) -> list:
    """A URR's reporting parameters (TS 29.244 7.5.2.4), each with its Reporting Trigger (8.2.19):
    Measurement Period (s, PERIO), Volume Threshold (total octets, VOLTH), Volume Quota (total octets,
    VOLQU), Time Threshold (s, TIMTH)."""
    trig = IE_ReportingTriggers(periodic_reporting=int(period is not None),
                                volume_threshold=int(vol_thresh is not None),
                                volume_quota=int(vol_quota is not None), time_threshold=int(time_thresh is not None))
    ies = [trig]
    if period is not None:
        ies.append(IE_MeasurementPeriod(period=period))
    if vol_thresh is not None:
        ies.append(IE_VolumeThreshold(TOVOL=1, total=vol_thresh))
    if vol_quota is not None:
        ies.append(IE_VolumeQuota(TOVOL=1, total=vol_quota))
    if time_thresh is not None:
        ies.append(IE_TimeThreshold(threshold=time_thresh))
    return ies


def create_urr(durat: bool = False, **params) -> IE_CreateURR:
    """A URR measuring volume (and duration with durat), with the reporting parameters of urr_ies."""
    ies = urr_ies(**params) if params else [IE_ReportingTriggers()]
    return IE_CreateURR(IE_list=[IE_URR_Id(id=URR_ID), IE_MeasurementMethod(VOLUM=1, DURAT=int(durat))] + ies)


def modify_urr(seq: int, up_seid: int, **params):
    """Update URR with new reporting parameters (urr_ies), e.g. a new quota."""
    upd = IE_UpdateURR(IE_list=[IE_URR_Id(id=URR_ID)] + urr_ies(**params))
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=[upd])


def query_urr(seq: int, up_seid: int, urr_ids=(URR_ID,), all_urrs: bool = False):
    """A modification that only asks for usage: Query URR per ID (7.5.4.10), or PFCPSMReq-Flags QAURR."""
    ies = [IE_QueryURR(IE_list=[IE_URR_Id(id=i)]) for i in urr_ids]
    if all_urrs:
        ies.append(IE_PFCPSMReqFlags(QUARR=1))
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=ies)


def create_qer(mbr_kbps: int = 100_000, qfi: int | None = None, gate_ul: int = 0, gate_dl: int = 0,
               mbr_dl_kbps: int | None = None) -> IE_CreateQER:
    """qfi: the QFI the UP marks downlink G-PDUs with (a PDU Session Container, TS 38.415).
    gate_ul/gate_dl: 0 open, 1 closed (8.2.7). mbr_dl_kbps: a downlink MBR other than the uplink's."""
    ies = [IE_QER_Id(id=QER_ID), IE_GateStatus(ul=gate_ul, dl=gate_dl),
           IE_MBR(ul=mbr_kbps, dl=mbr_kbps if mbr_dl_kbps is None else mbr_dl_kbps)]
    if qfi is not None:
        ies.append(IE_QFI(QFI=qfi))
    return IE_CreateQER(IE_list=ies)


def establish(seq: int, cp_seid: int, ue: str, teid: int | None = None, sgw: str | None = SGW_ADDR,
              sgw_teid: int = 0x100, urr: bool = False, qer: bool = False, node: str = CP_NODE,
              ies=None, extra=(), qfi: int | None = None):
    """One bearer: uplink PDR+FAR, downlink PDR+FAR (+ URR, QER). ies replaces the IE list.
    sgw None: the downlink FAR buffers (no SGW/RAN tunnel yet), as 5G SMFs establish first.
    qfi: a 5G N3 QoS flow: in the uplink PDI and in a QER (qer implied) both PDRs apply."""
    qer = qer or qfi is not None
    if ies is None:
        ies = [node_id(node), IE_FSEID(v4=1, seid=cp_seid, ipv4=CP_ADDR),
               ul_pdr(teid, ue, urr=urr, qer=qer, qfi=qfi), dl_pdr(ue, urr=urr, qer=qer), ul_far(),
               dl_far(sgw, sgw_teid) if sgw else dl_far_buffer()]
        if urr:
            ies.append(create_urr())
        if qer:
            ies.append(create_qer(qfi=qfi))
        ies += list(extra)
    return PFCP(version=1, S=1, seid=0, seq=seq) / PFCPSessionEstablishmentRequest(IE_list=ies)


def modify_dl(seq: int, up_seid: int, sgw: str = SGW_ADDR2, sgw_teid: int = 0x200, far_id: int = DL_FAR,
              sndem: bool = False, ohc=None):
    """Handover: the downlink FAR gets the new SGW's F-TEID. sndem: with PFCPSMReq-Flags SNDEM in the
    Update Forwarding Parameters (8.2.31): End Marker on the old tunnel. ohc: an Outer Header Creation
    IE instead of sgw / sgw_teid's (GTP-U/UDP/IPv6 to a gNB)."""
    fwd = [IE_DestinationInterface(interface=0),
           ohc if ohc is not None else IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=sgw_teid, ipv4=sgw)]
    if sndem:
        fwd.append(IE_PFCPSMReqFlags(SNDEM=1))
    upd = IE_UpdateFAR(IE_list=[IE_FAR_Id(id=far_id), IE_ApplyAction(FORW=1),
                                IE_UpdateForwardingParameters(IE_list=fwd)])
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=[upd])


def modify_dl_buffer(seq: int, up_seid: int, far_id: int = DL_FAR, sndem: bool = False):
    """The RAN's tunnel goes away (idle mode): the downlink FAR buffers again. sndem: End Marker on the
    tunnel it leaves (PFCPSMReq-Flags SNDEM in Update Forwarding Parameters)."""
    ies = [IE_FAR_Id(id=far_id), IE_ApplyAction(BUFF=1, NOCP=1)]
    if sndem:
        ies.append(IE_UpdateForwardingParameters(IE_list=[IE_PFCPSMReqFlags(SNDEM=1)]))
    upd = IE_UpdateFAR(IE_list=ies)
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=[upd])


def modify_qer(seq: int, up_seid: int, mbr_kbps: int = 5_000, qfi: int | None = None, gate_ul: int = 0,
               gate_dl: int = 0, mbr_dl_kbps: int | None = None):
    """qfi: a new downlink marking QFI. gate_ul/gate_dl: 0 open, 1 closed (8.2.7)."""
    ies = [IE_QER_Id(id=QER_ID), IE_GateStatus(ul=gate_ul, dl=gate_dl),
           IE_MBR(ul=mbr_kbps, dl=mbr_kbps if mbr_dl_kbps is None else mbr_dl_kbps)]
    if qfi is not None:
        ies.append(IE_QFI(QFI=qfi))
    upd = IE_UpdateQER(IE_list=ies)
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionModificationRequest(IE_list=[upd])


def delete(seq: int, up_seid: int):
    return PFCP(version=1, S=1, seid=up_seid, seq=seq) / PFCPSessionDeletionRequest()


def unknown_optional_ies():
    """IEs a CP may add that this UP does not use: ignored as TS 29.244 7.6.1 says."""
    return [IE_NetworkInstance(instance="internet")]


def corpus() -> dict[str, bytes]:
    """Every named message, for the fuzz seed corpus and the decode checks."""
    ue = "10.45.0.7"
    return {
        "heartbeat": bytes(heartbeat()),
        "assoc_setup_ipv4": bytes(assoc_setup()),
        "assoc_setup_fqdn": bytes(assoc_setup(node="smf.example.org")),
        "assoc_release": bytes(assoc_release()),
        "establish_choose": bytes(establish(2, 0x11, ue)),
        "establish_teid_urr_qer": bytes(establish(3, 0x12, ue, teid=0x1234, urr=True, qer=True)),
        "establish_extra_ies": bytes(establish(4, 0x13, ue, extra=unknown_optional_ies())),
        "modify_dl": bytes(modify_dl(5, 0x100000001)),
        "modify_dl_sndem": bytes(modify_dl(12, 0x100000001, sndem=True)),
        "modify_urr_quota": bytes(modify_urr(13, 0x100000001, vol_quota=10_000)),
        "query_urr": bytes(query_urr(14, 0x100000001)),
        "query_all_urrs": bytes(query_urr(15, 0x100000001, urr_ids=(), all_urrs=True)),
        "establish_buffer": bytes(establish(8, 0x14, ue, sgw=None, urr=True)),
        "modify_dl_buffer": bytes(modify_dl_buffer(9, 0x100000001)),
        "modify_qer": bytes(modify_qer(6, 0x100000001)),
        "establish_qfi": bytes(establish(10, 0x15, ue, qfi=9)),
        "modify_qer_qfi": bytes(modify_qer(11, 0x100000001, qfi=7)),
        "delete": bytes(delete(7, 0x100000001)),
        # IPv6 UEs (8.2.62): V4+V6, and V6 alone with IPv6D (0 bits) and IPv6PL (64), the octets after
        # the address the decoder reads (tests/pfcp/test_pfcp_agent_v6.py sends these forms)
        "establish_ipv4v6": bytes(establish(16, 0x16, ue, ies=[
            node_id(), IE_FSEID(v4=1, seid=0x16, ipv4=CP_ADDR), ul_pdr(None, None),
            IE_CreatePDR(IE_list=[IE_PDR_Id(id=DL_PDR), IE_Precedence(precedence=100), IE_PDI(IE_list=[
                IE_SourceInterface(interface=1),
                IE_UE_IP_Address(V4=1, V6=1, SD=1, ipv4=ue, ipv6="fd47:7470:0:7::1")]), IE_FAR_Id(id=DL_FAR)]),
            ul_far(), dl_far()])),
        "establish_ipv6_pd_pl": bytes(establish(17, 0x17, ue, ies=[
            node_id(), IE_FSEID(v4=1, seid=0x17, ipv4=CP_ADDR), ul_pdr(None, None),
            IE_CreatePDR(IE_list=[IE_PDR_Id(id=DL_PDR), IE_Precedence(precedence=100), IE_PDI(IE_list=[
                IE_SourceInterface(interface=1),
                IE_UE_IP_Address(V6=1, SD=1, spare=0b01001, ipv6="fd47:7470:0:8::1", extra_data=b"\x00\x40")]),
                IE_FAR_Id(id=DL_FAR)]),
            ul_far(), dl_far()])),
    }
