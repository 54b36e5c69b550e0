"""The PFCP messages the UPF behaviour tests send, and the reading of the Usage Reports the UPF
sends back.

A test session's rules are those of every gtplab session (gtplab/pfcp/rules.py, Release 17 forms):
Rules is rules.Session, with what the test kinds set beyond the sweep's sessions: a QER per session
with its own MBR and gate, URRs with reporting triggers (volume threshold and quota, time threshold,
periodic), an Update FAR that asks for End Markers (PFCPSMReq-Flags SNDEM), an Update QER, a Query
URR. A test installs tens of sessions, so each message is built by Scapy as it is sent.

Usage Reports are read by the one decoder, gtplab.pfcp.messages.usage_reports (a bounded cursor:
URR ID, UR-SEQN, the Usage Report Trigger, the Volume Measurement with its packet counts
(TONOP/ULNOP/DLNOP, 8.2.44 since Rel-15, which Scapy 2.8's layer does not read), the Duration
Measurement, Start and End Time), also what the sweep's sessions read through messages.scan.
"""

from __future__ import annotations

from scapy.contrib import pfcp as sp

from gtplab.pfcp import messages as m
from gtplab.pfcp import rules as R

# the one Usage Report decoder is gtplab.pfcp.messages'; its names here as the tests' API
Usage = m.Usage
usage_reports = m.usage_reports
URR_TRIGGERS = m.URR_TRIGGERS

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
