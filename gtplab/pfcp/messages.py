"""PFCP messages (3GPP TS 29.244) built with Scapy's layers (scapy.contrib.pfcp), and the two
things Scapy is too slow for at 10 k sessions/s: per-session messages and reading responses.

Building: every message is a Scapy packet made by one function below. For the messages sent per
session (establishment, modification, deletion) a Template builds the message ONCE with Scapy and
learns where each per-session field (sequence number, SEID, TEID, UE address, SGW address) lands
by building it again with that field's bits inverted and comparing: the bytes that differ are the
field, as Scapy laid it out (no offset is computed by hand). render() then copies the bytes and
writes the values at those offsets (1.5 us instead of Scapy's 3.5 ms for an establishment);
tests/test_pfcp_cp.py decodes rendered samples with Scapy and tshark.

Reading: scan() walks a response's IEs with a bounded cursor (every length checked against the
message and the parent IE, nesting depth capped) and returns only what the control plane needs:
the Cause, the UP F-SEID, the Created PDRs' F-TEIDs, the Usage Reports, the Recovery Time Stamp,
the UP Function Features, the Report Type of a UPF's Session Report and Node Report.
decode() is Scapy's full dissection, used for the error messages and by the tests, which check
that both readings agree on every message built here.

The rules of a session (its PDRs, FARs, URR, QER and the IEs' Release 17 forms) are built by
gtplab/pfcp/rules.py, the one builder the sweep, `gtplab pfcp` and every `gtplab upftest` kind use.
"""

from __future__ import annotations

import ipaddress
import struct
import time
from dataclasses import dataclass, field

from scapy.contrib import pfcp as sp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from gtplab.pfcp import rules as R
from gtplab.pfcp.errors import PfcpMalformed
from gtplab.pfcp.rules import FAR_DL, FAR_UL, PDR_DL, PDR_UL, QER_ID, QFI_MAX, URR_ID  # noqa: F401

PORT = 8805                       # TS 29.244 4.2.2
NTP_EPOCH = 2208988800            # seconds from 1900-01-01 (Recovery Time Stamp, 8.2.65) to 1970

# message types (TS 29.244 7.3, table 7.3-1)
HEARTBEAT_REQ, HEARTBEAT_RSP = 1, 2
ASSOC_SETUP_REQ, ASSOC_SETUP_RSP = 5, 6
ASSOC_UPDATE_REQ, ASSOC_UPDATE_RSP = 7, 8
ASSOC_RELEASE_REQ, ASSOC_RELEASE_RSP = 9, 10
VERSION_NOT_SUPPORTED = 11
NODE_REPORT_REQ, NODE_REPORT_RSP = 12, 13
SESS_EST_REQ, SESS_EST_RSP = 50, 51
SESS_MOD_REQ, SESS_MOD_RSP = 52, 53
SESS_DEL_REQ, SESS_DEL_RSP = 54, 55
SESS_REPORT_REQ, SESS_REPORT_RSP = 56, 57

# IE types (TS 29.244 8.1.2) read by scan()
IE_CREATED_PDR = 8
IE_CAUSE = 19
IE_REPORT_TYPE = 39               # Session Report Request: which reports it carries (8.2.21)
IE_FTEID = 21
IE_OFFENDING_IE = 40
IE_UP_FUNCTION_FEATURES = 43
FTUP = 0x10                       # UP Function Features octet 5 bit 5: the UPF allocates F-TEIDs (8.2.25)
IE_PDR_ID = 56
IE_FSEID = 57
IE_NODE_ID = 60
IE_VOLUME_MEASUREMENT = 66
IE_USAGE_REPORT_SMR, IE_USAGE_REPORT_SDR, IE_USAGE_REPORT_SRR = 78, 79, 80
IE_URR_ID = 81
IE_RECOVERY_TIME_STAMP = 96
IE_NODE_REPORT_TYPE = 101         # Node Report Request: which report (8.2.69)
IE_UR_SEQN = 104
IE_USAGE_REPORT_TRIGGER = 63
IE_DURATION_MEASUREMENT = 67
IE_START_TIME, IE_END_TIME = 75, 76
# Usage Report Trigger (8.2.41) bits from octet 5 bit 1 on: 3 octets from Release 16 (2 before)
URR_TRIGGERS = ("PERIO", "VOLTH", "TIMTH", "QUHTI", "START", "STOPT", "DROTH", "IMMER",
                "VOLQU", "TIMQU", "LIUSA", "TERMR", "MONIT", "ENVCL", "MACAR", "EVETH",
                "EVEQU", "TEBUR", "IPMJL", "QUVTI", "EMRRE", "UPINT")     # octet 7: Release 16+
NTP_UNIX_OFFSET = 2208988800            # 8.2.75/76 (Start/End Time): NTP seconds, from 1900
_GROUPED = {IE_CREATED_PDR, IE_USAGE_REPORT_SMR, IE_USAGE_REPORT_SDR, IE_USAGE_REPORT_SRR}

CAUSE_ACCEPTED = 1
CAUSE_SESSION_NOT_FOUND = 65
CAUSE_NO_ASSOCIATION = 72

# the flags of Report Type (8.2.21) and Node Report Type (8.2.69), octet 5 from bit 1 up
REPORT_TYPES = ("DLDR", "USAR", "ERIR", "UPIR", "TMIR", "SESR", "UISR")
NODE_REPORT_TYPES = ("UPFR", "UPRR", "CKDR", "GPQR", "PURR", "VSR")


def flag_names(value: int | None, names: tuple[str, ...]) -> list[str]:
    """The flags set in one octet, by name (bit 1 = names[0]); bits without a name as 'bit N'."""
    if value is None:
        return []
    return [names[b] if b < len(names) else f"bit {b + 1}" for b in range(8) if value >> b & 1]
MAX_DEPTH = 4                     # grouped IEs nest 2 deep in what we read; 4 is generous



def message_name(mtype: int) -> str:
    return sp.PFCPmessageType.get(mtype, f"message type {mtype}").replace("_", " ")


def cause_name(cause: int | None) -> str:
    if cause is None:
        return "no Cause IE"
    return f"{cause} ({sp.CauseValues.get(cause, 'unknown cause')})"


def recovery_timestamp(now: float | None = None) -> int:
    """Seconds since 1900 (NTP era 0), as the Recovery Time Stamp IE carries it."""
    return (int(now if now is not None else time.time()) + NTP_EPOCH) & 0xFFFFFFFF


def ip(n: int) -> str:
    return f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def node_id_ie(node_id: str):
    """Node ID (8.2.38): an IPv4 address, or an FQDN (anything that is not one)."""
    try:
        return sp.IE_NodeId(id_type="IPv4", ipv4=str(ipaddress.IPv4Address(node_id)))
    except ValueError:
        pass
    if not node_id or len(node_id) > 255 or any(not 0 < len(x) < 64 for x in node_id.split(".")):
        raise ValueError(f"node id {node_id!r}: neither an IPv4 address nor an FQDN")
    return sp.IE_NodeId(id_type="FQDN", id=node_id.encode())


@dataclass
class Bearer:
    """One bearer's session parameters. teid None: the UPF chooses the F-TEID (CHOOSE)."""
    index: int
    ue: int                       # UE IPv4 address (int)
    sgw: int                      # SGW GTP-U address (int): downlink outer destination
    sgw_teid: int                 # SGW TEID: downlink outer TEID
    teid: int | None = None       # local (uplink) TEID; None = CHOOSE
    ue6: int | None = None        # UE IPv6 /64 prefix (its upper 64 bits): an IPv4v6 session
    sgw6: int | None = None       # SGW (gNB) IPv6 address (int): N3 over IPv6, the downlink's outer
                                  # destination instead of sgw, and the uplink F-TEID's IPv6

    def label(self) -> str:
        return f"bearer {self.index} (UE {ip(self.ue)})"


def ip6_prefix(upper64: int) -> str:
    """The /64 prefix of its upper 64 bits: 'fd47:7470:0:1::/64'."""
    return str(ipaddress.IPv6Network((upper64 << 64, 64)))


@dataclass
class SessionOptions:
    """What every session of a run carries beyond the mandatory rules."""
    n3_addr: str = "0.0.0.0"      # UPF's N3/S1-U address for a given F-TEID (not used with CHOOSE)
    n3_addr6: str | None = None   # its N3 IPv6 address: a bearer with sgw6 (N3 over IPv6)
    choose: bool = False          # ask the UPF to allocate the uplink F-TEID
    urr: bool = False             # a volume-measurement URR, reported at deletion
    mbr_kbps: tuple[int, int] | None = None   # a QER: (uplink, downlink) MBR in kbit/s, gate open
    access_instance: str = ""     # Network Instance of the N3 side (some UPFs require it)
    core_instance: str = ""       # Network Instance of the N6 side
    qer_gate: bool = field(default=False)     # a QER without MBR: gate open (no rate limit)
    qfi: int | None = None        # 5G N3 QoS flow (0-63): in the QER and the uplink PDI

    def __post_init__(self):
        if self.qfi is not None and (isinstance(self.qfi, bool) or not isinstance(self.qfi, int)
                                     or not 0 <= self.qfi <= QFI_MAX):
            raise ValueError(f"qfi {self.qfi!r}: a QFI is 0..{QFI_MAX} (TS 38.415, 6 bits)")

    @property
    def qer(self) -> bool:
        return self.mbr_kbps is not None or self.qer_gate or self.qfi is not None


# ---------------------------------------------------------------------------------------------
# Builders (Scapy packets)


def header(mtype: int, seq: int, seid: int | None = None):
    if seid is None:
        return sp.PFCP(version=1, S=0, message_type=mtype, seq=seq)
    return sp.PFCP(version=1, S=1, message_type=mtype, seid=seid, seq=seq)


def heartbeat_request(seq: int, ts: int):
    return header(HEARTBEAT_REQ, seq) / sp.PFCPHeartbeatRequest(
        IE_list=[sp.IE_RecoveryTimeStamp(timestamp=ts)])


def heartbeat_response(seq: int, ts: int):
    return header(HEARTBEAT_RSP, seq) / sp.PFCPHeartbeatResponse(
        IE_list=[sp.IE_RecoveryTimeStamp(timestamp=ts)])


def association_setup_request(seq: int, node_id: str, ts: int):
    return header(ASSOC_SETUP_REQ, seq) / sp.PFCPAssociationSetupRequest(
        IE_list=[node_id_ie(node_id), sp.IE_RecoveryTimeStamp(timestamp=ts)])


def association_setup_response(seq: int, node_id: str, ts: int, cause: int = CAUSE_ACCEPTED,
                               ftup: bool | None = None):
    """ftup: with an UP Function Features IE saying whether the UPF allocates F-TEIDs (None: without)."""
    ies = [node_id_ie(node_id), sp.IE_Cause(cause=cause), sp.IE_RecoveryTimeStamp(timestamp=ts)]
    if ftup is not None:
        ies.append(sp.IE_UPFunctionFeatures(TREU=0, HEEU=0, PFDM=0, FTUP=int(ftup), TRST=0, DLBD=0,
                                            DDND=0, BUCP=0, spare=0, PFDE=0, FRRT=0, TRACE=0, QUOAC=0,
                                            UDBC=0, PDIU=0, EMPU=0))
    return header(ASSOC_SETUP_RSP, seq) / sp.PFCPAssociationSetupResponse(IE_list=ies)


def cp_association_setup_response(seq: int, node_id: str, ts: int, cause: int = CAUSE_ACCEPTED):
    """The CP's answer to a UPF's Association Setup Request (7.4.4.2): Node ID, Cause, Recovery Time
    Stamp, and CP Function Features with no feature set (optional for a CP with none, but eUPF
    ignores an answer without it)."""
    return header(ASSOC_SETUP_RSP, seq) / sp.PFCPAssociationSetupResponse(IE_list=[
        node_id_ie(node_id), sp.IE_Cause(cause=cause), sp.IE_RecoveryTimeStamp(timestamp=ts),
        sp.IE_CPFunctionFeatures()])


def association_update_response(seq: int, node_id: str, cause: int = CAUSE_ACCEPTED):
    return header(ASSOC_UPDATE_RSP, seq) / sp.PFCPAssociationUpdateResponse(
        IE_list=[node_id_ie(node_id), sp.IE_Cause(cause=cause)])


def session_report_response(seq: int, up_seid: int, cause: int = CAUSE_ACCEPTED):
    """7.5.9: header SEID = the UPF's SEID of the session (0 when the session is unknown)."""
    return header(SESS_REPORT_RSP, seq, up_seid) / sp.PFCPSessionReportResponse(
        IE_list=[sp.IE_Cause(cause=cause)])


def node_report_response(seq: int, node_id: str, cause: int = CAUSE_ACCEPTED):
    """7.4.5.2: Node ID, Cause."""
    return header(NODE_REPORT_RSP, seq) / sp.PFCPNodeReportResponse(
        IE_list=[node_id_ie(node_id), sp.IE_Cause(cause=cause)])


def association_release_request(seq: int, node_id: str):
    return header(ASSOC_RELEASE_REQ, seq) / sp.PFCPAssociationReleaseRequest(
        IE_list=[node_id_ie(node_id)])


def association_release_response(seq: int, node_id: str, cause: int = CAUSE_ACCEPTED):
    return header(ASSOC_RELEASE_RSP, seq) / sp.PFCPAssociationReleaseResponse(
        IE_list=[node_id_ie(node_id), sp.IE_Cause(cause=cause)])


def session_rules(b: Bearer, o: SessionOptions) -> R.Session:
    """A sweep bearer's rules (gtplab/pfcp/rules.py builds them)."""
    v6 = b.sgw6 is not None            # N3 over IPv6: F-TEID V6, OHC GTP-U/UDP/IPv6, OHR 1 (rules.py)
    if v6 and not o.n3_addr6 and not o.choose:
        raise ValueError(f"{b.label()}: N3 over IPv6 (sgw6) needs the UPF's N3 IPv6 address (dut.pfcp.n3)")
    return R.Session(ue=ip(b.ue), teid=None if o.choose or b.teid is None else b.teid,
                     n3=(o.n3_addr6 or "::") if v6 else o.n3_addr,
                     gnb=str(ipaddress.IPv6Address(b.sgw6)) if v6 else ip(b.sgw), gnb_teid=b.sgw_teid, mbr_kbps=o.mbr_kbps, qer=o.qer, qfi=o.qfi,
                     urr=R.UrrSpec() if o.urr else None, access_instance=o.access_instance,
                     core_instance=o.core_instance, ue6=None if b.ue6 is None else ip6_prefix(b.ue6))


def session_establishment_request(seq: int, node_id: str, cp_addr: str, cp_seid: int, b: Bearer,
                                  o: SessionOptions):
    """TS 29.244 7.5.2. Header SEID 0: the UPF has no SEID for the session yet (7.2.2.4.2)."""
    return header(SESS_EST_REQ, seq, 0) / sp.PFCPSessionEstablishmentRequest(
        IE_list=R.establishment_ies(node_id_ie(node_id), cp_addr, cp_seid, session_rules(b, o)))


def session_modification_request(seq: int, up_seid: int, sgw: int, sgw_teid: int,
                                 access_instance: str = ""):
    """TS 29.244 7.5.4: Update FAR 2 (downlink) with new outer header creation, as at a handover
    to another SGW/eNB."""
    return header(SESS_MOD_REQ, seq, up_seid) / sp.PFCPSessionModificationRequest(
        IE_list=R.modification_ies(handover=(ip(sgw), sgw_teid), access_instance=access_instance))


def session_deletion_request(seq: int, up_seid: int):
    """TS 29.244 7.5.6: the header SEID alone says which session."""
    return header(SESS_DEL_REQ, seq, up_seid) / sp.PFCPSessionDeletionRequest(IE_list=[])


# Responses: what a UPF sends (the fake UPF in tests/ and the tests use them).


def session_establishment_response(seq: int, cp_seid: int, node_id: str, cause: int = CAUSE_ACCEPTED,
                                   up_seid: int = 0, up_addr: str = "0.0.0.0",
                                   created: tuple[int, str] | None = None, offending: int | None = None):
    ies = [node_id_ie(node_id), sp.IE_Cause(cause=cause)]
    if offending is not None:
        ies.append(sp.IE_OffendingIE(type=offending))
    if cause == CAUSE_ACCEPTED:
        ies.append(sp.IE_FSEID(v4=1, seid=up_seid, ipv4=up_addr))
        if created is not None:
            ies.append(sp.IE_CreatedPDR(IE_list=[
                sp.IE_PDR_Id(id=PDR_UL), sp.IE_FTEID(V4=1, TEID=created[0], ipv4=created[1])]))
    return header(SESS_EST_RSP, seq, cp_seid) / sp.PFCPSessionEstablishmentResponse(IE_list=ies)


def session_modification_response(seq: int, cp_seid: int, cause: int = CAUSE_ACCEPTED):
    return header(SESS_MOD_RSP, seq, cp_seid) / sp.PFCPSessionModificationResponse(
        IE_list=[sp.IE_Cause(cause=cause)])


def session_deletion_response(seq: int, cp_seid: int, cause: int = CAUSE_ACCEPTED,
                              usage: tuple[int, int] | None = None):
    """usage: (uplink, downlink) octets of URR 1, reported with trigger TERMR (8.2.41)."""
    ies = [sp.IE_Cause(cause=cause)]
    if usage is not None:
        ul, dl = usage
        ies.append(sp.IE_UsageReport_SDR(IE_list=[
            sp.IE_URR_Id(id=URR_ID), sp.IE_UR_SEQN(number=0), sp.IE_UsageReportTrigger(TERMR=1, extra_data=b"\x00"),
            sp.IE_VolumeMeasurement(TOVOL=1, ULVOL=1, DLVOL=1, total=ul + dl, uplink=ul, downlink=dl)]))
    return header(SESS_DEL_RSP, seq, cp_seid) / sp.PFCPSessionDeletionResponse(IE_list=ies)


def session_report_request(seq: int, cp_seid: int, usage: tuple[int, int] | None = None,
                           error_indication: tuple[int, str] | None = None):
    """What a UPF sends (7.5.8): a Usage Report of URR 1 (USAR, trigger VOLTH) with usage =
    (uplink, downlink) octets, and/or an Error Indication Report (ERIR) naming the remote F-TEID
    (TEID, IPv4) a GTP-U Error Indication came for. Header SEID: the CP's SEID of the session."""
    ies = [sp.IE_ReportType(USAR=int(usage is not None), ERIR=int(error_indication is not None))]
    if usage is not None:
        ul, dl = usage
        ies.append(sp.IE_UsageReport_SRR(IE_list=[
            sp.IE_URR_Id(id=URR_ID), sp.IE_UR_SEQN(number=1), sp.IE_UsageReportTrigger(VOLTH=1, extra_data=b"\x00"),
            sp.IE_VolumeMeasurement(TOVOL=1, ULVOL=1, DLVOL=1, total=ul + dl, uplink=ul, downlink=dl)]))
    if error_indication is not None:
        ies.append(sp.IE_ErrorIndicationReport(IE_list=[
            sp.IE_FTEID(V4=1, TEID=error_indication[0], ipv4=error_indication[1])]))
    return header(SESS_REPORT_REQ, seq, cp_seid) / sp.PFCPSessionReportRequest(IE_list=ies)


def node_report_request(seq: int, node_id: str, failed_peer: str):
    """What a UPF sends (7.4.5.1): a User Plane Path Failure Report (UPFR) for a GTP-U peer."""
    return header(NODE_REPORT_REQ, seq) / sp.PFCPNodeReportRequest(IE_list=[
        node_id_ie(node_id), sp.IE_NodeReportType(UPFR=1),
        sp.IE_UserPlanePathFailureReport(IE_list=[sp.IE_RemoteGTP_U_Peer(V4=1, ipv4=failed_peer)])])


def decode(data: bytes):
    """Scapy's full dissection of a PFCP message."""
    return sp.PFCP(data)


def frame(msg, src: str = "127.0.0.1", dst: str = "127.0.0.1", sport: int = PORT, dport: int = PORT):
    """msg (a packet or bytes) in Ether/IPv4/UDP, for a pcap (tests, docs)."""
    payload = msg if not isinstance(msg, (bytes, bytearray)) else sp.PFCP(bytes(msg))
    return Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / payload


# ---------------------------------------------------------------------------------------------
# Templates: build once with Scapy, patch per session


class Template:
    """A message built by build(**values) with Scapy, where each name in sizes is an integer field
    of sizes[name] bytes. The offsets are found by building the message twice per field, with the
    field's bits inverted the second time: the bytes that change must form runs of exactly
    sizes[name] bytes (one run per place the value appears: the UE address is in both PDRs), or
    the field does not lie where a patch could write it, and TypeError says so. render() ignores
    values it has no field for (a TEID when the UPF chooses it)."""

    def __init__(self, build, sizes: dict[str, int]):
        self.sizes = dict(sizes)
        a = {k: int.from_bytes(b"\x5a" * n, "big") for k, n in sizes.items()}
        base = bytes(build(**a))
        self.offsets: dict[str, list[int]] = {}
        for k, n in sizes.items():
            flipped = bytes(build(**{**a, k: a[k] ^ ((1 << 8 * n) - 1)}))
            if len(flipped) != len(base):
                raise TypeError(f"template field {k}: the message length depends on it")
            diff = [i for i in range(len(base)) if base[i] != flipped[i]]
            runs = [diff[j] for j in range(0, len(diff), n)]
            if not diff or len(diff) % n or any(diff[j:j + n] != list(range(r, r + n))
                                                  for j, r in zip(range(0, len(diff), n), runs)):
                raise TypeError(f"template field {k}: changed bytes {diff} are not runs of {n}")
            self.offsets[k] = runs
        self.base = base
        self._slots = [(k, off, n) for k, n in sizes.items() for off in self.offsets[k]]

    def render(self, **values) -> bytes:
        out = bytearray(self.base)
        for k, off, n in self._slots:
            out[off:off + n] = values[k].to_bytes(n, "big")
        return bytes(out)


def establishment_template(node_id: str, cp_addr: str, o: SessionOptions, ue6: bool = False,
                           sgw6: bool = False) -> Template:
    """Per session: seq, cp_seid, ue, sgw, sgw_teid, teid unless the UPF chooses it, and with ue6
    the UE's IPv6 /64 prefix (upper 64 bits: an IPv4v6 session); with sgw6, N3 over IPv6: the
    SGW's IPv6 address (16 bytes) in place of its IPv4 one."""

    def build(seq, cp_seid, ue, sgw_teid, sgw=0, teid=None, ue6=None, sgw6=None):
        b = Bearer(index=0, ue=ue, sgw=sgw, sgw_teid=sgw_teid, teid=None if o.choose else teid, ue6=ue6,
                   sgw6=sgw6)
        return session_establishment_request(seq, node_id, cp_addr, cp_seid, b, o)
    sizes = {"seq": 3, "cp_seid": 8, "ue": 4, "sgw_teid": 4, **({"sgw6": 16} if sgw6 else {"sgw": 4})}
    if not o.choose:
        sizes["teid"] = 4
    if ue6:
        sizes["ue6"] = 8
    return Template(build, sizes)


def modification_template(access_instance: str = "") -> Template:
    return Template(lambda seq, up_seid, sgw, sgw_teid:
                    session_modification_request(seq, up_seid, sgw, sgw_teid, access_instance),
                    {"seq": 3, "up_seid": 8, "sgw": 4, "sgw_teid": 4})


def deletion_template() -> Template:
    return Template(lambda seq, up_seid: session_deletion_request(seq, up_seid),
                    {"seq": 3, "up_seid": 8})


# ---------------------------------------------------------------------------------------------
# Reading: a bounded cursor over the IEs


@dataclass
class Scanned:
    mtype: int
    seq: int
    seid: int | None
    cause: int | None = None
    up_seid: int | None = None
    up_addr: str | None = None
    fteids: dict[int, tuple[int, str | None]] = field(default_factory=dict)   # PDR id -> (TEID, IPv4)
    fteids6: dict[int, str] = field(default_factory=dict)     # PDR id -> the F-TEID's IPv6 address (V6)
    usage: dict[int, tuple[int | None, int | None, int | None]] = field(default_factory=dict)
    recovery_ts: int | None = None
    offending_ie: int | None = None
    node_id: bytes | None = None
    up_features: bytes | None = None
    report_type: int | None = None     # Report Type octet (Session Report Request)
    node_report_type: int | None = None
    raw: bytes = b""                   # the message itself (node.py sets it on answers: the UPF tests
                                       # read its Usage Reports in full, gtplab/upftests/rules.py)


def _ies(buf: bytes, start: int, end: int, where: str):
    """(type, value start, value end) of each IE in buf[start:end]; raises PfcpMalformed if an IE
    header or value overruns end (the message or the parent IE)."""
    pos = start
    while pos < end:
        if pos + 4 > end:
            raise PfcpMalformed(f"{where}: truncated IE header at byte {pos}")
        t, n = struct.unpack_from("!HH", buf, pos)
        v = pos + 4
        if v + n > end:
            raise PfcpMalformed(f"{where}: IE type {t} at byte {pos} has length {n}, "
                                f"{end - v} bytes left")
        if t & 0x8000:          # vendor-specific: enterprise ID is part of the value (8.1.1)
            if n < 2:
                raise PfcpMalformed(f"{where}: enterprise IE type {t} at byte {pos} shorter than its "
                                    "enterprise ID")
        yield t, v, v + n
        pos = v + n


def parse_header(buf: bytes) -> tuple[int, int, int | None, int]:
    """(message type, seq, SEID or None, start of the IEs); PfcpMalformed if not a PFCP v1 header
    whose length matches the datagram."""
    if len(buf) < 8:
        raise PfcpMalformed(f"{len(buf)}-byte datagram is shorter than a PFCP header")
    flags, mtype, length = struct.unpack_from("!BBH", buf, 0)
    if flags >> 5 != 1:
        raise PfcpMalformed(f"PFCP version {flags >> 5} (this is version 1)")
    if length + 4 != len(buf):
        raise PfcpMalformed(f"{message_name(mtype)}: header length {length} but {len(buf) - 4} "
                            "bytes follow it")
    if flags & 1:
        if len(buf) < 16:
            raise PfcpMalformed(f"{message_name(mtype)}: S=1 but shorter than a 16-byte header")
        seid = struct.unpack_from("!Q", buf, 4)[0]
        seq = int.from_bytes(buf[12:15], "big")
        return mtype, seq, seid, 16
    return mtype, int.from_bytes(buf[4:7], "big"), None, 8


def _need(v0, v1, n, what, where):
    if v1 - v0 < n:
        raise PfcpMalformed(f"{where}: {what} IE of {v1 - v0} bytes, needs {n}")


@dataclass
class Usage:
    """One Usage Report (8.2.44 Volume Measurement with packet counts, 8.2.45 Duration, 8.2.75/76
    Start/End Time), as any reader of gtplab's takes it."""
    urr: int
    seqn: int | None = None
    triggers: list[str] = field(default_factory=list)
    volume: tuple = (None, None, None)          # (total, UL, DL) octets
    packets: tuple = (None, None, None)         # (total, UL, DL) packets
    duration: int | None = None                 # s
    start: float | None = None                  # Start Time, Unix seconds (the UPF's clock)
    end: float | None = None                    # End Time, Unix seconds
    at: float | None = None                     # when the message carrying it arrived (time.time())
    where: str = ""                             # "report" | "modification" | "deletion"

    def as_dict(self) -> dict:
        return {"urr": self.urr, "seqn": self.seqn, "triggers": self.triggers, "volume": list(self.volume),
                "packets": list(self.packets), "duration": self.duration, "start": self.start,
                "end": self.end, "at": self.at, "where": self.where}


def usage_report(buf: bytes, v0: int, v1: int, where: str) -> Usage:
    """The Usage Report IE whose value is buf[v0:v1] (the one decoder: scan() and the UPF tests);
    PfcpMalformed on a short or missing field."""
    where += " Usage Report"
    u = Usage(urr=-1)
    for t, w0, w1 in _ies(buf, v0, v1, where):
        if t == IE_URR_ID:
            _need(w0, w1, 4, "URR ID", where)
            u.urr = struct.unpack_from("!I", buf, w0)[0]
        elif t == IE_UR_SEQN:
            _need(w0, w1, 4, "UR-SEQN", where)
            u.seqn = struct.unpack_from("!I", buf, w0)[0]
        elif t == IE_USAGE_REPORT_TRIGGER:
            _need(w0, w1, 1, "Usage Report Trigger", where)
            bits = int.from_bytes(buf[w0:min(w1, w0 + 3)].ljust(3, b"\0"), "little")
            u.triggers = [URR_TRIGGERS[b] if b < len(URR_TRIGGERS) else f"bit {b + 1}"
                          for b in range(24) if bits >> b & 1]
        elif t == IE_VOLUME_MEASUREMENT:
            _need(w0, w1, 1, "Volume Measurement", where)
            fl, pos, got = buf[w0], w0 + 1, []
            for bit in (1, 2, 4, 8, 16, 32):    # TOVOL ULVOL DLVOL TONOP ULNOP DLNOP, in this order
                if fl & bit:
                    _need(w0, w1, pos + 8 - w0, "Volume Measurement", where)
                    got.append(struct.unpack_from("!Q", buf, pos)[0])
                    pos += 8
                else:
                    got.append(None)
            u.volume, u.packets = tuple(got[:3]), tuple(got[3:])
        elif t == IE_DURATION_MEASUREMENT:
            _need(w0, w1, 4, "Duration Measurement", where)
            u.duration = struct.unpack_from("!I", buf, w0)[0]
        elif t in (IE_START_TIME, IE_END_TIME):
            _need(w0, w1, 4, "Start/End Time", where)
            v = float(struct.unpack_from("!I", buf, w0)[0] - NTP_UNIX_OFFSET)
            if t == IE_START_TIME:
                u.start = v
            else:
                u.end = v
    if u.urr < 0:
        raise PfcpMalformed(f"{where}: without a URR ID")
    return u


def usage_reports(buf: bytes, at: float | None = None) -> list[Usage]:
    """Every Usage Report in a PFCP message (Session Report Request, Modification or Deletion
    Response), in order, each with the time its message arrived and which message it was."""
    mtype, _, _, start = parse_header(buf)
    where = message_name(mtype)
    kind = {SESS_REPORT_REQ: "report", SESS_MOD_RSP: "modification", SESS_DEL_RSP: "deletion"}.get(mtype, "")
    out = []
    for t, v0, v1 in _ies(buf, start, len(buf), where):
        if t in (IE_USAGE_REPORT_SDR, IE_USAGE_REPORT_SMR, IE_USAGE_REPORT_SRR):
            u = usage_report(buf, v0, v1, where)
            u.at, u.where = at, kind
            out.append(u)
    return out


def scan(buf: bytes) -> Scanned:
    """What the control plane reads from a message (see module doc)."""
    mtype, seq, seid, start = parse_header(buf)
    where = message_name(mtype)
    s = Scanned(mtype, seq, seid)
    for t, v0, v1 in _ies(buf, start, len(buf), where):
        if t == IE_CAUSE:
            _need(v0, v1, 1, "Cause", where)
            s.cause = buf[v0]
        elif t == IE_FSEID:
            _need(v0, v1, 9, "F-SEID", where)
            s.up_seid = struct.unpack_from("!Q", buf, v0 + 1)[0]
            if buf[v0] & 2:
                _need(v0, v1, 13, "F-SEID", where)
                s.up_addr = ip(struct.unpack_from("!I", buf, v0 + 9)[0])
        elif t == IE_RECOVERY_TIME_STAMP:
            _need(v0, v1, 4, "Recovery Time Stamp", where)
            s.recovery_ts = struct.unpack_from("!I", buf, v0)[0]
        elif t == IE_OFFENDING_IE:
            _need(v0, v1, 2, "Offending IE", where)
            s.offending_ie = struct.unpack_from("!H", buf, v0)[0]
        elif t == IE_NODE_ID:
            s.node_id = bytes(buf[v0:v1])
        elif t == IE_UP_FUNCTION_FEATURES:
            s.up_features = bytes(buf[v0:v1])
        elif t == IE_REPORT_TYPE:
            _need(v0, v1, 1, "Report Type", where)
            s.report_type = buf[v0]
        elif t == IE_NODE_REPORT_TYPE:
            _need(v0, v1, 1, "Node Report Type", where)
            s.node_report_type = buf[v0]
        elif t == IE_CREATED_PDR:
            pdr, fteid, fteid6 = None, None, None
            for t2, w0, w1 in _ies(buf, v0, v1, where + " Created PDR"):
                if t2 == IE_PDR_ID:
                    _need(w0, w1, 2, "PDR ID", where)
                    pdr = struct.unpack_from("!H", buf, w0)[0]
                elif t2 == IE_FTEID:
                    _need(w0, w1, 1, "F-TEID", where)
                    fl = buf[w0]
                    if fl & 4:
                        raise PfcpMalformed(f"{where}: Created PDR F-TEID still says CHOOSE")
                    _need(w0, w1, 5 + (4 if fl & 1 else 0) + (16 if fl & 2 else 0), "F-TEID", where)
                    teid = struct.unpack_from("!I", buf, w0 + 1)[0]
                    addr = ip(struct.unpack_from("!I", buf, w0 + 5)[0]) if fl & 1 else None
                    fteid = (teid, addr)
                    if fl & 2:      # V6: the IPv6 address after the IPv4 one, if any (8.2.3)
                        a6 = w0 + 5 + (4 if fl & 1 else 0)
                        fteid6 = str(ipaddress.IPv6Address(bytes(buf[a6:a6 + 16])))
            if pdr is None:
                raise PfcpMalformed(f"{where}: Created PDR without a PDR ID")
            if fteid is not None:
                s.fteids[pdr] = fteid
            if fteid6 is not None:
                s.fteids6[pdr] = fteid6
        elif t in (IE_USAGE_REPORT_SDR, IE_USAGE_REPORT_SMR, IE_USAGE_REPORT_SRR):
            u = usage_report(buf, v0, v1, where)
            s.usage[u.urr] = u.volume
    return s
