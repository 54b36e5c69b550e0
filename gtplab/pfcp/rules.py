"""A session's PFCP rules, built in one place for every part of gtplab that provisions a UPF: the
sweep's sessions (gtplab/pfcp/messages.py renders them from a template at 10 k sessions/s),
`gtplab pfcp`, and every `gtplab upftest` kind (gtplab/upftests/). A fix to how an IE is encoded is
made here once.

The IEs are those of TS 29.244 Release 17, in the forms a 5G SMF sends. Scapy's layers
(scapy.contrib.pfcp) build some of them in their Release 15 form or with a wrong value, so the
builders below correct them:

    Apply Action (8.2.26)         2 octets (Rel-16+; Scapy: 1). FORW in octet 5 bit 2.
    Reporting Triggers (8.2.19)   3 octets (Rel-16+; Scapy: 2).
    PDN Type (8.2.79)             1 = IPv4 (Scapy's enum starts at 0, which is reserved).
    3GPP Interface Type (8.2.118) in each PDI (Source Interface Type) and Forwarding Parameters
                                  (Destination Interface Type), as 5G SMFs send them: N3 3GPP Access
                                  on the access side, N6 on the core side. Optional in the
                                  specification; Open5GS's UPF buffers uplink traffic without them.

FIXED_LENGTH gives the value length every fixed-length IE gtplab sends must have; the tests walk
every message gtplab can build against it (tests/pfcp/test_pfcp_rules.py) and decode them with
tshark.

A session (one bearer; ids fixed):
    PDR 1 uplink    PDI {Access, N3 3GPP Access, F-TEID (given, or CHOOSE), [Network Instance],
                    UE IP (source), [QFI]}, Outer Header Removal GTP-U/UDP/IPv4, FAR 1, [URR 1], [QER 1]
    PDR 2 downlink  PDI {Core, N6, [Network Instance], UE IP (destination)}, FAR 2, [URR 1], [QER 1]
    FAR 1           FORW to Core (N6), [Network Instance]
    FAR 2           FORW to Access (N3 3GPP Access), [Network Instance], Outer Header Creation
                    GTP-U/UDP/IPv4 (gNB/SGW TEID and address)
    URR 1           Measurement Method VOLUM (+ DURAT), the Reporting Triggers of a UrrSpec (none:
                    reported at deletion)
    QER 1           Gate Status UL/DL, [MBR UL/DL kbit/s], [QFI]
    PDN Type        IPv4
"""

from __future__ import annotations

from dataclasses import dataclass

from scapy.contrib import pfcp as sp

PDR_UL, PDR_DL, FAR_UL, FAR_DL, URR_ID, QER_ID = 1, 2, 1, 2, 1, 1
QFI_MAX = 63                      # QFI IE (8.2.89): 6 bits

# 3GPP Interface Type values (8.2.118)
IF_N3_3GPP_ACCESS = 11
IF_N6 = 17
# PDN Type values (8.2.79): 0 is reserved
PDN_IPV4, PDN_IPV6, PDN_IPV4V6 = 1, 2, 3

# Apply Action (8.2.26), octet 5 from bit 1 up; octet 6 (Rel-16) carries EDRT BDPN DDPN FSSM MBSU
APPLY_DROP, APPLY_FORW, APPLY_BUFF, APPLY_NOCP, APPLY_DUPL = 1, 2, 4, 8, 16

# The value length (octets after the 4-octet IE header) of every fixed-length IE gtplab sends or
# reads, by IE type, as TS 29.244 Release 17 (V17.x, chapter 8.2) defines it.
FIXED_LENGTH: dict[int, tuple[str, int]] = {
    19: ("Cause", 1),
    20: ("Source Interface", 1),
    25: ("Gate Status", 1),
    26: ("MBR", 10),
    29: ("Precedence", 4),
    32: ("Time Threshold", 4),
    37: ("Reporting Triggers", 3),
    39: ("Report Type", 1),
    40: ("Offending IE", 2),
    42: ("Destination Interface", 1),
    44: ("Apply Action", 2),
    49: ("PFCPSMReq-Flags", 1),
    56: ("PDR ID", 2),
    62: ("Measurement Method", 1),
    63: ("Usage Report Trigger", 3),
    64: ("Measurement Period", 4),
    67: ("Duration Measurement", 4),
    81: ("URR ID", 4),
    96: ("Recovery Time Stamp", 4),
    101: ("Node Report Type", 1),
    104: ("UR-SEQN", 4),
    108: ("FAR ID", 4),
    109: ("QER ID", 4),
    113: ("PDN Type", 1),
    124: ("QFI", 1),
    160: ("3GPP Interface Type", 1),
}


@dataclass
class UrrSpec:
    """URR 1 of a session: what it measures and when it reports (8.2.19 Reporting Triggers). All
    None: a volume measurement reported at deletion only."""
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
class Session:
    """One session's rules. Addresses are dotted IPv4 strings. teid None: the UPF chooses the
    uplink F-TEID (CHOOSE, 8.2.3)."""
    ue: str                                     # UE IPv4 address
    teid: int | None                            # uplink F-TEID; None = CHOOSE
    n3: str                                     # the UPF's N3 address (with a given F-TEID)
    gnb: str                                    # downlink outer destination (gNB / SGW)
    gnb_teid: int                               # downlink outer TEID
    mbr_kbps: tuple[int, int] | None = None     # QER MBR (UL, DL) in kbit/s
    gate: tuple[bool, bool] = (True, True)      # QER gate (UL open, DL open)
    qer: bool = False                           # a QER even without MBR, closed gate or QFI
    qfi: int | None = None                      # 5G N3 QoS flow: in the QER and the uplink PDI
    urr: UrrSpec | None = None
    access_instance: str = ""                   # Network Instance of the N3 side (some UPFs need it)
    core_instance: str = ""                     # Network Instance of the N6 side

    def __post_init__(self):
        if self.qfi is not None and (isinstance(self.qfi, bool) or not isinstance(self.qfi, int)
                                     or not 0 <= self.qfi <= QFI_MAX):
            raise ValueError(f"qfi {self.qfi!r}: a QFI is 0..{QFI_MAX} (TS 38.415, 6 bits)")

    @property
    def has_qer(self) -> bool:
        return self.qer or self.mbr_kbps is not None or self.qfi is not None or self.gate != (True, True)


# ---------------------------------------------------------------------------------------------
# IEs in their Release 17 form


def apply_action(flags: int = APPLY_FORW):
    """Apply Action (8.2.26): 2 octets, octet 5 = DFRT IPMD IPMA DUPL NOCP BUFF FORW DROP."""
    return sp.IE_ApplyAction(DROP=flags & 1, FORW=flags >> 1 & 1, BUFF=flags >> 2 & 1,
                             NOCP=flags >> 3 & 1, DUPL=flags >> 4 & 1, extra_data=b"\x00")


def reporting_triggers(u: UrrSpec):
    """Reporting Triggers (8.2.19): 3 octets (the third, from Release 16, all zero here)."""
    return sp.IE_ReportingTriggers(**u.triggers(), extra_data=b"\x00")


def pdn_type(value: int = PDN_IPV4):
    return sp.IE_PDNType(pdn_type=value)


def interface_type(value: int):
    """3GPP Interface Type (8.2.118): the Source Interface Type in a PDI, the Destination Interface
    Type in Forwarding Parameters (the same IE, 160)."""
    return sp.IE_3GPP_InterfaceType(interface_type=value)


def _ni(name: str):
    return [sp.IE_NetworkInstance(instance=name.encode())] if name else []


def outer_header_creation(teid: int, addr: str):
    return sp.IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=teid, ipv4=addr)


def _gate(open_: bool) -> str:
    return "OPEN" if open_ else "CLOSED"


def fteid(s: Session):
    if s.teid is None:
        return sp.IE_FTEID(CH=1, V4=1)
    return sp.IE_FTEID(V4=1, TEID=s.teid, ipv4=s.n3)


def create_qer(s: Session):
    q = [sp.IE_QER_Id(id=QER_ID), sp.IE_GateStatus(ul=_gate(s.gate[0]), dl=_gate(s.gate[1]))]
    if s.mbr_kbps is not None:
        q.append(sp.IE_MBR(ul=s.mbr_kbps[0], dl=s.mbr_kbps[1]))
    if s.qfi is not None:
        q.append(sp.IE_QFI(QFI=s.qfi))
    return sp.IE_CreateQER(IE_list=q)


def create_urr(u: UrrSpec):
    ies = [sp.IE_URR_Id(id=URR_ID),
           sp.IE_MeasurementMethod(VOLUM=1, DURAT=int(u.time_threshold is not None)),
           reporting_triggers(u)]
    if u.period is not None:
        ies.append(sp.IE_MeasurementPeriod(period=u.period))
    if u.volume_threshold is not None:
        ies.append(sp.IE_VolumeThreshold(TOVOL=1, total=u.volume_threshold))
    if u.volume_quota is not None:
        ies.append(sp.IE_VolumeQuota(TOVOL=1, total=u.volume_quota))
    if u.time_threshold is not None:
        ies.append(sp.IE_TimeThreshold(threshold=u.time_threshold))
    return sp.IE_CreateURR(IE_list=ies)


def access_forwarding(teid: int, addr: str, access_instance: str = "", end_marker: bool = False,
                      update: bool = False):
    """(Update) Forwarding Parameters towards the access side: Destination Interface Access, N3 3GPP
    Access, the outer header to the gNB/SGW; with end_marker, PFCPSMReq-Flags SNDEM (8.2.58)."""
    ies = ([sp.IE_DestinationInterface(interface="Access"), interface_type(IF_N3_3GPP_ACCESS)]
           + _ni(access_instance) + [outer_header_creation(teid, addr)])
    if end_marker:
        ies.append(sp.IE_PFCPSMReqFlags(SNDEM=1))
    if update:
        return sp.IE_UpdateForwardingParameters(IE_list=ies)
    return sp.IE_ForwardingParameters(IE_list=ies)


def establishment_ies(node_id_ie, cp_addr: str, cp_seid: int, s: Session) -> list:
    """The IEs of a Session Establishment Request (7.5.2) for one session."""
    refs = ([sp.IE_URR_Id(id=URR_ID)] if s.urr is not None else []) \
        + ([sp.IE_QER_Id(id=QER_ID)] if s.has_qer else [])
    qfi = [sp.IE_QFI(QFI=s.qfi)] if s.qfi is not None else []
    ies = [
        node_id_ie,
        sp.IE_FSEID(v4=1, seid=cp_seid, ipv4=cp_addr),
        sp.IE_CreatePDR(IE_list=[
            sp.IE_PDR_Id(id=PDR_UL), sp.IE_Precedence(precedence=100),
            sp.IE_PDI(IE_list=[sp.IE_SourceInterface(interface="Access"), fteid(s)]
                      + _ni(s.access_instance)
                      + [sp.IE_UE_IP_Address(V4=1, SD=0, ipv4=s.ue)] + qfi
                      + [interface_type(IF_N3_3GPP_ACCESS)]),
            sp.IE_OuterHeaderRemoval(header="GTP-U/UDP/IPv4"),
            sp.IE_FAR_Id(id=FAR_UL)] + refs),
        sp.IE_CreatePDR(IE_list=[
            sp.IE_PDR_Id(id=PDR_DL), sp.IE_Precedence(precedence=100),
            sp.IE_PDI(IE_list=[sp.IE_SourceInterface(interface="Core")]
                      + _ni(s.core_instance)
                      + [sp.IE_UE_IP_Address(V4=1, SD=1, ipv4=s.ue), interface_type(IF_N6)]),
            sp.IE_FAR_Id(id=FAR_DL)] + refs),
        sp.IE_CreateFAR(IE_list=[
            sp.IE_FAR_Id(id=FAR_UL), apply_action(APPLY_FORW),
            sp.IE_ForwardingParameters(IE_list=[sp.IE_DestinationInterface(interface="Core"),
                                                interface_type(IF_N6)] + _ni(s.core_instance))]),
        sp.IE_CreateFAR(IE_list=[
            sp.IE_FAR_Id(id=FAR_DL), apply_action(APPLY_FORW),
            access_forwarding(s.gnb_teid, s.gnb, s.access_instance)]),
    ]
    if s.urr is not None:
        ies.append(create_urr(s.urr))
    if s.has_qer:
        ies.append(create_qer(s))
    ies.append(pdn_type(PDN_IPV4))
    return ies


def modification_ies(*, handover: tuple[str, int] | None = None, end_marker: bool = False,
                     access_instance: str = "", gate: tuple[bool, bool] | None = None,
                     mbr_kbps: tuple[int, int] | None = None, query_urr: bool = False) -> list:
    """The IEs of a Session Modification Request (7.5.4): handover = (new gNB address, TEID) updates
    FAR 2 (Update Forwarding Parameters, with SNDEM when end_marker: 5.2.2.3, TS 29.281 7.3.2);
    gate / mbr_kbps update QER 1; query_urr adds Query URR 1."""
    ies = []
    if handover is not None:
        ies.append(sp.IE_UpdateFAR(IE_list=[
            sp.IE_FAR_Id(id=FAR_DL), apply_action(APPLY_FORW),
            access_forwarding(handover[1], handover[0], access_instance, end_marker, update=True)]))
    if gate is not None or mbr_kbps is not None:
        q = [sp.IE_QER_Id(id=QER_ID)]
        if gate is not None:
            q.append(sp.IE_GateStatus(ul=_gate(gate[0]), dl=_gate(gate[1])))
        if mbr_kbps is not None:
            q.append(sp.IE_MBR(ul=mbr_kbps[0], dl=mbr_kbps[1]))
        ies.append(sp.IE_UpdateQER(IE_list=q))
    if query_urr:
        ies.append(sp.IE_QueryURR(IE_list=[sp.IE_URR_Id(id=URR_ID)]))
    return ies


def fixed_length_errors(msg) -> list[str]:
    """Every IE of a Scapy PFCP message (grouped IEs walked) whose type is in FIXED_LENGTH with a
    value of another length: 'Apply Action (44) in Create FAR: 1 octets, Release 17 has 2'."""
    out = []

    def walk(ies, where):
        for ie in ies:
            raw = bytes(ie)
            t, n = int.from_bytes(raw[0:2], "big"), int.from_bytes(raw[2:4], "big")
            sub = getattr(ie, "IE_list", None)
            if sub is not None and t not in FIXED_LENGTH:
                walk(sub, ie.name.removeprefix("IE "))
            elif t in FIXED_LENGTH and n != FIXED_LENGTH[t][1]:
                out.append(f"{FIXED_LENGTH[t][0]} ({t}) in {where}: {n} octets, Release 17 has "
                           f"{FIXED_LENGTH[t][1]}")

    walk(getattr(msg.payload, "IE_list", []) or [], msg.payload.name)
    return out
