"""The PFCP rules the UPF behaviour tests install (TS 29.244 V16), built with Scapy's layers, and the
reading of the Usage Reports the UPF sends back.

The test kinds need what the sweep's sessions (gtplab/pfcp/messages.py, templates for 10 k
sessions/s) do not carry: a QER per session with its own MBR and gate, URRs with reporting
triggers (volume threshold and quota, time threshold, periodic), an Update FAR that asks for End
Markers (PFCPSMReq-Flags SNDEM), an Update QER, a Query URR. A test installs tens of sessions, so
each message is built by Scapy as it is sent.

A session here (ids fixed, as in messages.py):
    PDR 1 uplink    PDI {Access, F-TEID (TEID, N3 address), UE IP (source), [QFI]}, remove GTP-U,
                    FAR 1, [URR 1], [QER 1]
    PDR 2 downlink  PDI {Core, UE IP (destination)}, FAR 2, [URR 1], [QER 1]
    FAR 1           FORW to Core
    FAR 2           FORW to Access, outer header creation (gNB/SGW TEID and address)
    QER 1           gate UL/DL, [MBR UL/DL kbit/s], [QFI]
    URR 1           Measurement Method VOLUM (+ DURAT), the triggers of a UrrSpec

Usage Reports are read with a bounded cursor (messages._ies): URR ID, UR-SEQN, the Usage Report
Trigger, the Volume Measurement with its packet counts (TONOP/ULNOP/DLNOP, 8.2.44 since Rel-15,
which Scapy 2.8's layer does not read), the Duration Measurement.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from scapy.contrib import pfcp as sp

from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import PfcpMalformed

IE_USAGE_REPORT_TRIGGER = 63
IE_DURATION_MEASUREMENT = 67
URR_TRIGGERS = ("PERIO", "VOLTH", "TIMTH", "QUHTI", "START", "STOPT", "DROTH", "IMMER",
                "VOLQU", "TIMQU", "LIUSA", "TERMR", "MONIT", "ENVCL", "MACAR", "EVETH")


@dataclass
class UrrSpec:
    """URR 1 of a session: what it measures and when it reports (8.2.19 Reporting Triggers)."""
    volume_threshold: int | None = None     # octets (total), VOLTH
    volume_quota: int | None = None         # octets (total), VOLQU
    time_threshold: int | None = None       # s, TIMTH
    period: int | None = None               # s, PERIO (Measurement Period)

    def triggers(self) -> dict:
        return {"volume_threshold": int(self.volume_threshold is not None),
                "volume_quota": int(self.volume_quota is not None),
                "time_threshold": int(self.time_threshold is not None),
                "periodic_reporting": int(self.period is not None)}


@dataclass
class Rules:
    """One test session's parameters."""
    ue: str
    teid: int                     # uplink F-TEID (gtplab gives it)
    n3: str                       # the UPF's N3 address
    gnb: str                      # downlink outer destination
    gnb_teid: int
    mbr_kbps: tuple[int, int] | None = None     # (UL, DL)
    gate: tuple[bool, bool] = (True, True)      # (UL open, DL open)
    qer: bool = False
    qfi: int | None = None
    urr: UrrSpec | None = None

    @property
    def has_qer(self) -> bool:
        return self.qer or self.mbr_kbps is not None or self.qfi is not None or self.gate != (True, True)


def _gate(open_: bool) -> str:
    return "OPEN" if open_ else "CLOSED"


def create_qer(r: Rules):
    q = [sp.IE_QER_Id(id=m.QER_ID), sp.IE_GateStatus(ul=_gate(r.gate[0]), dl=_gate(r.gate[1]))]
    if r.mbr_kbps is not None:
        q.append(sp.IE_MBR(ul=r.mbr_kbps[0], dl=r.mbr_kbps[1]))
    if r.qfi is not None:
        q.append(sp.IE_QFI(QFI=r.qfi))
    return sp.IE_CreateQER(IE_list=q)


def create_urr(u: UrrSpec):
    ies = [sp.IE_URR_Id(id=m.URR_ID), sp.IE_MeasurementMethod(VOLUM=1, DURAT=int(u.time_threshold is not None)),
           sp.IE_ReportingTriggers(**u.triggers())]
    if u.period is not None:
        ies.append(sp.IE_MeasurementPeriod(period=u.period))
    if u.volume_threshold is not None:
        ies.append(sp.IE_VolumeThreshold(TOVOL=1, total=u.volume_threshold))
    if u.volume_quota is not None:
        ies.append(sp.IE_VolumeQuota(TOVOL=1, total=u.volume_quota))
    if u.time_threshold is not None:
        ies.append(sp.IE_TimeThreshold(threshold=u.time_threshold))
    return sp.IE_CreateURR(IE_list=ies)


def establishment(seq: int, node_id: str, cp_addr: str, cp_seid: int, r: Rules) -> bytes:
    """Session Establishment Request (7.5.2) for one test session."""
    refs = ([sp.IE_URR_Id(id=m.URR_ID)] if r.urr else []) + ([sp.IE_QER_Id(id=m.QER_ID)] if r.has_qer else [])
    qfi = [sp.IE_QFI(QFI=r.qfi)] if r.qfi is not None else []
    ies = [
        m.node_id_ie(node_id),
        sp.IE_FSEID(v4=1, seid=cp_seid, ipv4=cp_addr),
        sp.IE_CreatePDR(IE_list=[
            sp.IE_PDR_Id(id=m.PDR_UL), sp.IE_Precedence(precedence=100),
            sp.IE_PDI(IE_list=[sp.IE_SourceInterface(interface="Access"),
                               sp.IE_FTEID(V4=1, TEID=r.teid, ipv4=r.n3),
                               sp.IE_UE_IP_Address(V4=1, SD=0, ipv4=r.ue)] + qfi),
            sp.IE_OuterHeaderRemoval(header="GTP-U/UDP/IPv4"),
            sp.IE_FAR_Id(id=m.FAR_UL)] + refs),
        sp.IE_CreatePDR(IE_list=[
            sp.IE_PDR_Id(id=m.PDR_DL), sp.IE_Precedence(precedence=100),
            sp.IE_PDI(IE_list=[sp.IE_SourceInterface(interface="Core"),
                               sp.IE_UE_IP_Address(V4=1, SD=1, ipv4=r.ue)]),
            sp.IE_FAR_Id(id=m.FAR_DL)] + refs),
        sp.IE_CreateFAR(IE_list=[
            sp.IE_FAR_Id(id=m.FAR_UL), sp.IE_ApplyAction(FORW=1),
            sp.IE_ForwardingParameters(IE_list=[sp.IE_DestinationInterface(interface="Core")])]),
        sp.IE_CreateFAR(IE_list=[
            sp.IE_FAR_Id(id=m.FAR_DL), sp.IE_ApplyAction(FORW=1),
            sp.IE_ForwardingParameters(IE_list=[
                sp.IE_DestinationInterface(interface="Access"),
                sp.IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=r.gnb_teid, ipv4=r.gnb)])]),
    ]
    if r.urr:
        ies.append(create_urr(r.urr))
    if r.has_qer:
        ies.append(create_qer(r))
    ies.append(sp.IE_PDNType(pdn_type="IPv4"))
    return bytes(m.header(m.SESS_EST_REQ, seq, 0) / sp.PFCPSessionEstablishmentRequest(IE_list=ies))


def modification(seq: int, up_seid: int, *, handover: tuple[str, int] | None = None, end_marker: bool = False,
                 gate: tuple[bool, bool] | None = None, mbr_kbps: tuple[int, int] | None = None,
                 query_urr: bool = False) -> bytes:
    """Session Modification Request (7.5.4): handover = (new gNB address, TEID) updates FAR 2
    (Update Forwarding Parameters, with PFCPSMReq-Flags SNDEM when end_marker: 8.2.58, 5.2.2.3 of
    TS 29.244 and TS 29.281 7.3.2); gate / mbr_kbps update QER 1; query_urr adds Query URR 1."""
    ies = []
    if handover is not None:
        fp = [sp.IE_DestinationInterface(interface="Access"),
              sp.IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=handover[1], ipv4=handover[0])]
        if end_marker:
            fp.append(sp.IE_PFCPSMReqFlags(SNDEM=1))
        ies.append(sp.IE_UpdateFAR(IE_list=[sp.IE_FAR_Id(id=m.FAR_DL), sp.IE_ApplyAction(FORW=1),
                                            sp.IE_UpdateForwardingParameters(IE_list=fp)]))
    if gate is not None or mbr_kbps is not None:
        q = [sp.IE_QER_Id(id=m.QER_ID)]
        if gate is not None:
            q.append(sp.IE_GateStatus(ul=_gate(gate[0]), dl=_gate(gate[1])))
        if mbr_kbps is not None:
            q.append(sp.IE_MBR(ul=mbr_kbps[0], dl=mbr_kbps[1]))
        ies.append(sp.IE_UpdateQER(IE_list=q))
    if query_urr:
        ies.append(sp.IE_QueryURR(IE_list=[sp.IE_URR_Id(id=m.URR_ID)]))
    return bytes(m.header(m.SESS_MOD_REQ, seq, up_seid) / sp.PFCPSessionModificationRequest(IE_list=ies))


def deletion(seq: int, up_seid: int) -> bytes:
    return bytes(m.session_deletion_request(seq, up_seid))


# ---------------------------------------------------------------------------------------------
# Usage Reports


@dataclass
class Usage:
    """One Usage Report (8.2.44 Volume Measurement with packet counts, 8.2.45 Duration)."""
    urr: int
    seqn: int | None = None
    triggers: list[str] = field(default_factory=list)
    volume: tuple = (None, None, None)          # (total, UL, DL) octets
    packets: tuple = (None, None, None)         # (total, UL, DL) packets
    duration: int | None = None                 # s
    at: float | None = None                     # when the message carrying it arrived (time.time())
    where: str = ""                             # "report" | "modification" | "deletion"

    def as_dict(self) -> dict:
        return {"urr": self.urr, "seqn": self.seqn, "triggers": self.triggers, "volume": list(self.volume),
                "packets": list(self.packets), "duration": self.duration, "at": self.at, "where": self.where}


def _volume(buf: bytes, v0: int, v1: int, where: str) -> tuple[tuple, tuple]:
    if v1 - v0 < 1:
        raise PfcpMalformed(f"{where}: empty Volume Measurement")
    fl, pos, got = buf[v0], v0 + 1, []
    for bit in (1, 2, 4, 8, 16, 32):        # TOVOL ULVOL DLVOL TONOP ULNOP DLNOP, in this order
        if fl & bit:
            if pos + 8 > v1:
                raise PfcpMalformed(f"{where}: Volume Measurement flags {fl:#x} need more than {v1 - v0} bytes")
            got.append(struct.unpack_from("!Q", buf, pos)[0])
            pos += 8
        else:
            got.append(None)
    return tuple(got[:3]), tuple(got[3:])


def usage_reports(buf: bytes, at: float | None = None) -> list[Usage]:
    """Every Usage Report in a PFCP message (Session Report Request, Modification or Deletion
    Response), in order."""
    mtype, _, _, start = m.parse_header(buf)
    where = m.message_name(mtype)
    kind = {m.SESS_REPORT_REQ: "report", m.SESS_MOD_RSP: "modification", m.SESS_DEL_RSP: "deletion"}.get(mtype, "")
    out = []
    for t, v0, v1 in m._ies(buf, start, len(buf), where):
        if t not in (m.IE_USAGE_REPORT_SDR, m.IE_USAGE_REPORT_SMR, m.IE_USAGE_REPORT_SRR):
            continue
        u = Usage(urr=-1, at=at, where=kind)
        for t2, w0, w1 in m._ies(buf, v0, v1, where + " Usage Report"):
            if t2 == m.IE_URR_ID and w1 - w0 >= 4:
                u.urr = struct.unpack_from("!I", buf, w0)[0]
            elif t2 == m.IE_UR_SEQN and w1 - w0 >= 4:
                u.seqn = struct.unpack_from("!I", buf, w0)[0]
            elif t2 == IE_USAGE_REPORT_TRIGGER:
                bits = int.from_bytes(buf[w0:min(w1, w0 + 2)].ljust(2, b"\0"), "little")
                u.triggers = [URR_TRIGGERS[b] for b in range(16) if bits >> b & 1]
            elif t2 == m.IE_VOLUME_MEASUREMENT:
                u.volume, u.packets = _volume(buf, w0, w1, where)
            elif t2 == IE_DURATION_MEASUREMENT and w1 - w0 >= 4:
                u.duration = struct.unpack_from("!I", buf, w0)[0]
        if u.urr < 0:
            raise PfcpMalformed(f"{where}: Usage Report without a URR ID")
        out.append(u)
    return out
