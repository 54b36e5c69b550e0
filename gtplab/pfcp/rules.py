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
                    UE IP (source), [QFI]}, Outer Header Removal, FAR 1, [URR 1], [QER 1]
    PDR 2 downlink  PDI {Core, N6, [Network Instance], UE IP (destination)}, FAR 2, [URR 1], [QER 1]
    FAR 1           FORW to Core (N6), [Network Instance]
    FAR 2           FORW to Access (N3 3GPP Access), [Network Instance], Outer Header Creation
                    GTP-U/UDP/IPv4 or GTP-U/UDP/IPv6 (the gNB/SGW's TEID and address)
    URR 1           Measurement Method VOLUM (+ DURAT), the Reporting Triggers of a UrrSpec (none:
                    reported at deletion)
    QER 1           Gate Status UL/DL, [MBR UL/DL kbit/s], [QFI]
    PDN Type        IPv4 (1), IPv6 (2) or IPv4v6 (3), from the UE's addresses
and, for each Pdr of Session.pdrs (k = 0, 1, ...), a PDR 3+k of its direction with its SDF filters
and precedence, its own FAR 3+k (forward as its direction's default FAR does, to the CP function in a
GTP-U tunnel (Destination Interface CP-function, Pdr.to_cp), or drop) and, when it
asks for them, its own QER 2+k and URR 2+k (or, with Pdr.urr_of = j, PDR 3+j's URR 2+j: one URR for
both directions of a service data flow). With Session.cp2up, one more PDR after those (cp2up_pdr_id):
Open5GS's SMF's CP2UP PDR, PDI {Source Interface CP-function, its own F-TEID (CHOOSE, or cp2up_teid
with a given uplink TEID)} with Outer Header Removal and FAR 2, the downlink FAR (Open5GS shares it:
src/smf/context.c smf_sess_create_cp_up_data_forwarding), for the SMF's Router Advertisements.

IPv6 (TS 29.244 8.2.62, 8.2.3, 8.2.56, 8.2.64): the UE's /64 prefix is the UE IP Address's IPv6
address with V6 set and no IPv6 Prefix Length (IP6PL unset: the default /64 applies), beside the
IPv4 address (V4) of an IPv4v6 session; an N3 address of IPv6 makes the F-TEID V6 (CHOOSE with
V6), the Outer Header Creation GTP-U/UDP/IPv6 and the default Outer Header Removal GTP-U/UDP/IPv6
(1); Session.ohr sets another (0, 1, or 6 = GTP-U/UDP/IP, as Open5GS's SMF sends it).

SDF filters (8.2.5): a Flow Description is an IPFilterRule (TS 29.212 5.4.2, RFC 6733 4.3) written
in the downlink form for both directions, `permit out PROTO from REMOTE [PORTS] to assigned [PORTS]`
("assigned": the UE's address), as SMFs send it; the UP function applies it reversed to uplink
packets. ToS/Traffic Class with its mask, the Security Parameter Index and the Flow Label are the
filter's other fields (TTC, SPI, FL).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from scapy.contrib import pfcp as sp

PDR_UL, PDR_DL, FAR_UL, FAR_DL, URR_ID, QER_ID = 1, 2, 1, 2, 1, 1
QFI_MAX = 63                      # QFI IE (8.2.89): 6 bits

# 3GPP Interface Type values (8.2.118)
IF_N3_3GPP_ACCESS = 11
IF_N6 = 17
# PDN Type values (8.2.79): 0 is reserved
PDN_IPV4, PDN_IPV6, PDN_IPV4V6 = 1, 2, 3

# Outer Header Removal descriptions (8.2.64)
OHR_GTPU_UDP_IPV4, OHR_GTPU_UDP_IPV6, OHR_GTPU_UDP_IP = 0, 1, 6
OHR_ALLOWED = (OHR_GTPU_UDP_IPV4, OHR_GTPU_UDP_IPV6, OHR_GTPU_UDP_IP)
PRECEDENCE_DEFAULT = 100          # the session's two default PDRs; a Pdr of lower value comes first

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


_PORTS = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")


def flow_description(proto: str | int = "ip", remote: str = "any", remote_ports: str = "",
                     ue_ports: str = "") -> str:
    """An IPFilterRule (TS 29.212 5.4.2) in the downlink form SMFs send for both directions:
    'permit out 17 from 198.51.100.0/24 1000-2000 to assigned 5000'. proto 'ip' or 0..255; remote
    'any' or an IPv4/IPv6 address or prefix; ports '' (any), 'N' or 'N-M'. ValueError otherwise."""
    if proto != "ip":
        if isinstance(proto, bool) or not str(proto).isdigit() or not 0 <= int(proto) <= 255:
            raise ValueError(f"protocol {proto!r}: 'ip' or a protocol number 0..255")
        proto = str(int(proto))
    if remote != "any":
        try:
            remote = str(ipaddress.ip_network(remote, strict=True))
        except ValueError as e:
            raise ValueError(f"remote {remote!r}: 'any' or an address or prefix ({e})") from None
        if remote.endswith(("/32", "/128")):
            remote = remote.rsplit("/", 1)[0]
    for what, ports in (("remote ports", remote_ports), ("UE ports", ue_ports)):
        if ports:
            mt = _PORTS.match(ports)
            lo, hi = (int(mt.group(1)), int(mt.group(2) or mt.group(1))) if mt else (1, 0)
            if not mt or not lo <= hi <= 0xFFFF:
                raise ValueError(f"{what} {ports!r}: a port N or a range N-M within 0..65535")
    return " ".join(x for x in ("permit out", proto, "from", remote, remote_ports, "to assigned", ue_ports) if x)


@dataclass(frozen=True)
class SdfFilter:
    """One SDF Filter (8.2.5): any of a Flow Description, ToS/Traffic Class (value, mask), a
    Security Parameter Index, a Flow Label (20 bits)."""
    flow: str | None = None
    tos: tuple[int, int] | None = None
    spi: int | None = None
    flow_label: int | None = None

    def __post_init__(self):
        if self.flow is None and self.tos is None and self.spi is None and self.flow_label is None:
            raise ValueError("an SDF filter with no field matches everything: leave it out instead")
        if self.tos is not None and not all(0 <= v <= 255 for v in self.tos):
            raise ValueError(f"tos {self.tos!r}: (value, mask), each 0..255")
        if self.spi is not None and not 0 <= self.spi <= 0xFFFFFFFF:
            raise ValueError(f"spi {self.spi!r}: 32 bits")
        if self.flow_label is not None and not 0 <= self.flow_label <= 0xFFFFF:
            raise ValueError(f"flow_label {self.flow_label!r}: 20 bits")


@dataclass(frozen=True)
class Pdr:
    """A PDR beyond a session's two defaults: its direction, precedence (lower first; the defaults
    have PRECEDENCE_DEFAULT), SDF filters (none: all the session's packets of that direction), its
    own FAR (forward as the direction's default FAR does, or drop), and its own QER (gate, MBR) and
    URR when given. to_cp (address, TEID): an uplink PDR whose FAR forwards to the CP function
    (Destination Interface CP-function, 8.2.24) in a GTP-U tunnel to that address and TEID (Outer
    Header Creation), as SMFs send Router Solicitations to themselves (Open5GS's SMF: `permit out 58
    from ff02::2/128 to assigned`, its GTP-U address and the session's index)."""
    uplink: bool
    precedence: int
    sdf: tuple[SdfFilter, ...] = ()
    forward: bool = True
    mbr_kbps: tuple[int, int] | None = None
    gate: tuple[bool, bool] = (True, True)
    urr: UrrSpec | None = None
    to_cp: tuple[str, int] | None = None
    urr_of: int | None = None           # instead of a URR of its own: the URR of Session.pdrs[urr_of]
                                        # (one URR for both directions of a service data flow)

    def __post_init__(self):
        if isinstance(self.precedence, bool) or not 0 <= self.precedence <= 0xFFFFFFFF:
            raise ValueError(f"precedence {self.precedence!r}: 0..2^32-1")
        if self.urr_of is not None and self.urr is not None:
            raise ValueError("urr_of: a PDR has its own URR or another's, not both")
        if self.to_cp is not None and (not self.uplink or not self.forward):
            raise ValueError("to_cp: an uplink PDR that forwards")

    @property
    def has_qer(self) -> bool:
        return self.mbr_kbps is not None or self.gate != (True, True)


def _family(addr: str | None, what: str) -> int | None:
    if not addr:
        return None
    try:
        return ipaddress.ip_address(addr).version
    except ValueError:
        raise ValueError(f"{what} {addr!r}: not an IPv4 or IPv6 address") from None


@dataclass
class Session:
    """One session's rules. teid None: the UPF chooses the uplink F-TEID (CHOOSE, 8.2.3). ue is the
    UE's IPv4 address, ue6 its IPv6 /64 prefix ('fd47:7470::/64'); at least one. n3 and gnb are
    IPv4 or IPv6 addresses (GTP-U over IPv6 with IPv6 ones)."""
    ue: str | None                              # UE IPv4 address
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
    ue6: str | None = None                      # UE IPv6 /64 prefix
    ohr: int | None = None                      # Outer Header Removal; None: by the N3 address's family
    pdrs: tuple[Pdr, ...] = ()                  # PDRs beyond the two defaults (SDF filters, precedence)
    cp2up: bool = False                         # Open5GS's CP2UP PDR (Source Interface CP-function)

    def __post_init__(self):
        if self.qfi is not None and (isinstance(self.qfi, bool) or not isinstance(self.qfi, int)
                                     or not 0 <= self.qfi <= QFI_MAX):
            raise ValueError(f"qfi {self.qfi!r}: a QFI is 0..{QFI_MAX} (TS 38.415, 6 bits)")
        if not self.ue and not self.ue6:
            raise ValueError("a session needs a UE IPv4 address, an IPv6 prefix or both")
        if _family(self.ue, "ue") not in (None, 4):
            raise ValueError(f"ue {self.ue!r}: the UE's IPv4 address (its IPv6 prefix is ue6)")
        if self.ue6:
            try:
                net = ipaddress.IPv6Network(self.ue6, strict=True)
            except ValueError as e:
                raise ValueError(f"ue6 {self.ue6!r}: an IPv6 /64 prefix ({e})") from None
            if net.prefixlen != 64:
                raise ValueError(f"ue6 {self.ue6!r}: an IPv6 /64 prefix (TS 23.501 5.8.2.2.2), not /{net.prefixlen}")
        self.n3_family = _family(self.n3, "n3") or 4
        _family(self.gnb, "gnb")
        if self.ohr is not None and self.ohr not in OHR_ALLOWED:
            raise ValueError(f"ohr {self.ohr!r}: Outer Header Removal {OHR_ALLOWED} (GTP-U/UDP/IPv4, /IPv6, /IP)")
        for k, p in enumerate(self.pdrs):
            if p.urr_of is not None and not (0 <= p.urr_of < len(self.pdrs) and self.pdrs[p.urr_of].urr is not None):
                raise ValueError(f"pdrs[{k}].urr_of {p.urr_of!r}: the index of another of the session's PDRs "
                                 "with a URR of its own")

    @property
    def pdn_type(self) -> int:
        return PDN_IPV4V6 if self.ue and self.ue6 else PDN_IPV6 if self.ue6 else PDN_IPV4

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
    """GTP-U/UDP/IPv4 or GTP-U/UDP/IPv6 (8.2.56), by the address's family."""
    if _family(addr, "outer header address") == 6:
        return sp.IE_OuterHeaderCreation(GTPUUDPIPV6=1, TEID=teid, ipv6=addr)
    return sp.IE_OuterHeaderCreation(GTPUUDPIPV4=1, TEID=teid, ipv4=addr)


def outer_header_removal(s: Session):
    ohr = s.ohr if s.ohr is not None else (OHR_GTPU_UDP_IPV6 if s.n3_family == 6 else OHR_GTPU_UDP_IPV4)
    return sp.IE_OuterHeaderRemoval(header=ohr)


def ue_ip_address(s: Session, destination: bool):
    """UE IP Address (8.2.62): V4 with the IPv4 address, V6 with the /64 prefix (no IP6PL: /64);
    S/D 1 in a downlink PDI (the address is the destination)."""
    kw = {"SD": int(destination)}
    if s.ue:
        kw.update(V4=1, ipv4=s.ue)
    if s.ue6:
        kw.update(V6=1, ipv6=str(ipaddress.IPv6Network(s.ue6).network_address))
    return sp.IE_UE_IP_Address(**kw)


def sdf_filter(f: SdfFilter):
    kw = {}
    if f.flow is not None:
        kw.update(FD=1, flow_description=f.flow.encode(), flow_description_length=len(f.flow.encode()))
    if f.tos is not None:
        kw.update(TTC=1, tos_traffic_class=f.tos[0], tos_traffic_mask=f.tos[1])
    if f.spi is not None:
        kw.update(SPI=1, security_parameter_index=f.spi)
    if f.flow_label is not None:
        kw.update(FL=1, flow_label=f.flow_label)
    return sp.IE_SDF_Filter(**kw)


def _gate(open_: bool) -> str:
    return "OPEN" if open_ else "CLOSED"


def cp2up_pdr_id(s: Session) -> int:
    """the PDR ID of the session's CP2UP PDR (Session.cp2up): after its other PDRs"""
    return PDR_DL + 1 + len(s.pdrs)


def cp2up_teid(s: Session) -> int | None:
    """the CP2UP PDR's F-TEID: None (CHOOSE) when the uplink's is, else one of its own"""
    return None if s.teid is None else s.teid ^ 0x80000000


def fteid(s: Session):
    v6 = s.n3_family == 6
    if s.teid is None:
        return sp.IE_FTEID(CH=1, V6=1) if v6 else sp.IE_FTEID(CH=1, V4=1)
    return sp.IE_FTEID(V6=1, TEID=s.teid, ipv6=s.n3) if v6 else sp.IE_FTEID(V4=1, TEID=s.teid, ipv4=s.n3)


def _qer(qer_id: int, gate: tuple[bool, bool], mbr_kbps, qfi):
    q = [sp.IE_QER_Id(id=qer_id), sp.IE_GateStatus(ul=_gate(gate[0]), dl=_gate(gate[1]))]
    if mbr_kbps is not None:
        q.append(sp.IE_MBR(ul=mbr_kbps[0], dl=mbr_kbps[1]))
    if qfi is not None:
        q.append(sp.IE_QFI(QFI=qfi))
    return sp.IE_CreateQER(IE_list=q)


def create_qer(s: Session):
    return _qer(QER_ID, s.gate, s.mbr_kbps, s.qfi)


def create_urr(u: UrrSpec, urr_id: int = URR_ID):
    ies = [sp.IE_URR_Id(id=urr_id),
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
        _create_pdr(s, PDR_UL, True, PRECEDENCE_DEFAULT, (), FAR_UL, refs, qfi),
        _create_pdr(s, PDR_DL, False, PRECEDENCE_DEFAULT, (), FAR_DL, refs, qfi),
        _create_far(s, FAR_UL, True, True),
        _create_far(s, FAR_DL, False, True),
    ]
    extra_urrs, extra_qers = [], []
    for k, p in enumerate(s.pdrs):
        own = ([sp.IE_URR_Id(id=URR_ID + 1 + k)] if p.urr is not None else
               [sp.IE_URR_Id(id=URR_ID + 1 + p.urr_of)] if p.urr_of is not None else []) \
            + ([sp.IE_QER_Id(id=QER_ID + 1 + k)] if p.has_qer else [])
        ies.insert(4 + k, _create_pdr(s, PDR_DL + 1 + k, p.uplink, p.precedence, p.sdf, FAR_DL + 1 + k, own,
                                          qfi))
        ies.append(_create_far(s, FAR_DL + 1 + k, p.uplink, p.forward, p.to_cp))
        if p.urr is not None:
            extra_urrs.append(create_urr(p.urr, URR_ID + 1 + k))
        if p.has_qer:
            extra_qers.append(_qer(QER_ID + 1 + k, p.gate, p.mbr_kbps, None))
    if s.urr is not None:
        ies.append(create_urr(s.urr))
    ies += extra_urrs
    if s.has_qer:
        ies.append(create_qer(s))
    ies += extra_qers
    if s.cp2up:
        t = cp2up_teid(s)
        f = (sp.IE_FTEID(CH=1, V4=1) if t is None else sp.IE_FTEID(V4=1, TEID=t, ipv4=s.n3))
        ies.insert(4 + len(s.pdrs), sp.IE_CreatePDR(IE_list=[
            sp.IE_PDR_Id(id=cp2up_pdr_id(s)), sp.IE_Precedence(precedence=PRECEDENCE_DEFAULT),
            sp.IE_PDI(IE_list=[sp.IE_SourceInterface(interface="CP-function"), f]),
            outer_header_removal(s), sp.IE_FAR_Id(id=FAR_DL)]))
    ies.append(pdn_type(s.pdn_type))
    return ies


def _create_pdr(s: Session, pdr_id: int, uplink: bool, precedence: int, sdf, far_id: int, refs: list, qfi: list):
    """Create PDR (7.5.2.2): uplink PDI {Access, F-TEID, UE IP (source), [QFI], N3 3GPP Access} with
    Outer Header Removal; downlink PDI {Core, UE IP (destination), N6}; the SDF filters in the PDI."""
    if uplink:
        pdi = ([sp.IE_SourceInterface(interface="Access"), fteid(s)] + _ni(s.access_instance)
               + [ue_ip_address(s, False)] + [sdf_filter(f) for f in sdf] + qfi
               + [interface_type(IF_N3_3GPP_ACCESS)])
        tail = [outer_header_removal(s), sp.IE_FAR_Id(id=far_id)]
    else:
        pdi = ([sp.IE_SourceInterface(interface="Core")] + _ni(s.core_instance)
               + [ue_ip_address(s, True)] + [sdf_filter(f) for f in sdf] + [interface_type(IF_N6)])
        tail = [sp.IE_FAR_Id(id=far_id)]
    return sp.IE_CreatePDR(IE_list=[sp.IE_PDR_Id(id=pdr_id), sp.IE_Precedence(precedence=precedence),
                                    sp.IE_PDI(IE_list=pdi)] + tail + refs)


def _create_far(s: Session, far_id: int, uplink: bool, forward: bool, to_cp: tuple[str, int] | None = None):
    """Create FAR (7.5.2.3): FORW to Core (N6) for uplink, to Access with the outer header for
    downlink, to the CP function in a GTP-U tunnel with to_cp (address, TEID); DROP, without
    Forwarding Parameters, when not forward."""
    if not forward:
        return sp.IE_CreateFAR(IE_list=[sp.IE_FAR_Id(id=far_id), apply_action(APPLY_DROP)])
    if to_cp is not None:
        fp = sp.IE_ForwardingParameters(IE_list=[sp.IE_DestinationInterface(interface="CP-function"),
                                                 outer_header_creation(to_cp[1], to_cp[0])])
    elif uplink:
        fp = sp.IE_ForwardingParameters(IE_list=[sp.IE_DestinationInterface(interface="Core"),
                                                 interface_type(IF_N6)] + _ni(s.core_instance))
    else:
        fp = access_forwarding(s.gnb_teid, s.gnb, s.access_instance)
    return sp.IE_CreateFAR(IE_list=[sp.IE_FAR_Id(id=far_id), apply_action(APPLY_FORW), fp])


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
