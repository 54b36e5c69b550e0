"""The PFCP messages the UPF behaviour tests send, and the reading of the Usage Reports the UPF
sends back.

A test session's rules are those of every gtplab session (gtplab/pfcp/rules.py, Release 17 forms):
Rules is rules.Session, with what the test kinds set beyond the sweep's sessions: a QER per session
with its own MBR and gate, URRs with reporting triggers (volume threshold and quota, time threshold,
periodic), an Update FAR that asks for End Markers (PFCPSMReq-Flags SNDEM), an Update QER, a Query
URR. A test installs tens of sessions, so each message is built by Scapy as it is sent.

Usage Reports are read with a bounded cursor (messages._ies): URR ID, UR-SEQN, the Usage Report
Trigger, the Volume Measurement with its packet counts (TONOP/ULNOP/DLNOP, 8.2.44 since Rel-15,
which Scapy 2.8's layer does not read), the Duration Measurement.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from scapy.contrib import pfcp as sp

from gtplab.pfcp import messages as m
from gtplab.pfcp import rules as R
from gtplab.pfcp.errors import PfcpMalformed

IE_USAGE_REPORT_TRIGGER = 63
IE_DURATION_MEASUREMENT = 67
URR_TRIGGERS = ("PERIO", "VOLTH", "TIMTH", "QUHTI", "START", "STOPT", "DROTH", "IMMER",
                "VOLQU", "TIMQU", "LIUSA", "TERMR", "MONIT", "ENVCL", "MACAR", "EVETH",
                "EVEQU", "TEBUR", "IPMJL", "QUVTI", "EMRRE", "UPINT")     # octet 7: Release 16+


UrrSpec = R.UrrSpec
Rules = R.Session
create_qer = R.create_qer
create_urr = R.create_urr


def establishment(seq: int, node_id: str, cp_addr: str, cp_seid: int, r: Rules) -> bytes:
    """Session Establishment Request (7.5.2) for one test session."""
    return bytes(m.header(m.SESS_EST_REQ, seq, 0) / sp.PFCPSessionEstablishmentRequest(
        IE_list=R.establishment_ies(m.node_id_ie(node_id), cp_addr, cp_seid, r)))


def modification(seq: int, up_seid: int, *, handover: tuple[str, int] | None = None, end_marker: bool = False,
                 gate: tuple[bool, bool] | None = None, mbr_kbps: tuple[int, int] | None = None,
                 query_urr: bool = False) -> bytes:
    """Session Modification Request (7.5.4), gtplab.pfcp.rules.modification_ies."""
    return bytes(m.header(m.SESS_MOD_REQ, seq, up_seid) / sp.PFCPSessionModificationRequest(
        IE_list=R.modification_ies(handover=handover, end_marker=end_marker, gate=gate, mbr_kbps=mbr_kbps,
                                   query_urr=query_urr)))


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
                # 3 octets from Release 16 (2 before): octet 5 bit 1 is PERIO
                bits = int.from_bytes(buf[w0:min(w1, w0 + 3)].ljust(3, b"\0"), "little")
                u.triggers = [URR_TRIGGERS[b] if b < len(URR_TRIGGERS) else f"bit {b + 1}"
                              for b in range(24) if bits >> b & 1]
            elif t2 == m.IE_VOLUME_MEASUREMENT:
                u.volume, u.packets = _volume(buf, w0, w1, where)
            elif t2 == IE_DURATION_MEASUREMENT and w1 - w0 >= 4:
                u.duration = struct.unpack_from("!I", buf, w0)[0]
        if u.urr < 0:
            raise PfcpMalformed(f"{where}: Usage Report without a URR ID")
        out.append(u)
    return out
