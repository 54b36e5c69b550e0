"""Every PFCP message gtplab can build, in TS 29.244 Release 17's forms (gtplab/pfcp/rules.py): each
fixed-length IE has the length Release 17 gives it, PDN Type is IPv4 (1, not the reserved 0), the 3GPP
Interface Types are where a 5G SMF sends them, and tshark decodes every message with no malformed
packet, no expert warning and no reserved value.

The catalogue walks the builders of the sweep (gtplab/pfcp/messages.py, rendered from templates),
of `gtplab pfcp` (the same builders) and of every `gtplab upftest` kind (gtplab/upftests/rules.py with
the rules each kind asks for); test_the_catalogue_covers_every_builder fails when a builder is added
to messages.py without joining it."""

from __future__ import annotations

import inspect
import itertools
import shutil

import pytest
from scapy.contrib import pfcp as sp
from scapy.utils import wrpcap

from gtplab.pfcp import messages as m
from gtplab.pfcp import rules as R
from gtplab.upftests import rules as UR
from tests.lib.tshark import pfcp_decoded_cleanly

UE, SGW, SGW_TEID, TEID = 0x0A400001, 0x0AC90010, 0x80000000, 0x00010000
NODE, CP = "10.0.0.1", "10.0.0.1"

# what the upftest kinds ask for (gtplab/upftests/{policing,handover,usage,n4}.py)
URRS = {"none": None, "deletion": R.UrrSpec(), "periodic": R.UrrSpec(period=1),
        "volth": R.UrrSpec(volume_threshold=330_000), "quota": R.UrrSpec(volume_quota=330_000),
        "timth": R.UrrSpec(time_threshold=3),
        "all": R.UrrSpec(volume_threshold=1, volume_quota=2, time_threshold=3, period=4)}
QERS = {"none": {}, "mbr": {"mbr_kbps": (100_000, 200_000)}, "gate-closed": {"gate": (False, False)},
        "qfi": {"qfi": 9}, "mbr+qfi": {"mbr_kbps": (1, 2), "qfi": 63}}


def _sweep_messages() -> dict[str, object]:
    b = m.Bearer(3, UE + 3, SGW + 1, SGW_TEID + 3, TEID + 3)
    out = {}
    for choose, urr, mbr, qfi, ni in itertools.product((False, True), (False, True), (None, (1000, 2000)),
                                                      (None, 5), (False, True)):
        o = m.SessionOptions(n3_addr="10.201.0.1", choose=choose, urr=urr, mbr_kbps=mbr, qfi=qfi,
                             access_instance="access" if ni else "", core_instance="internet" if ni else "")
        name = f"sweep est choose={choose} urr={urr} mbr={bool(mbr)} qfi={qfi} ni={ni}"
        out[name] = m.session_establishment_request(4, NODE, CP, 0x1234, b, o)
        # what the sweep sends: the template's rendering of the same session
        t = m.establishment_template(NODE, CP, o)
        out[name + " (template)"] = m.decode(t.render(seq=4, cp_seid=0x1234, ue=UE + 3, sgw=SGW + 1,
                                                      sgw_teid=SGW_TEID + 3, teid=TEID + 3))
    out["sweep modification"] = m.session_modification_request(5, 0x99, SGW + 2, 0x8000_0099)
    out["sweep modification ni"] = m.session_modification_request(5, 0x99, SGW + 2, 1, "access")
    out["sweep modification (template)"] = m.decode(m.modification_template().render(
        seq=5, up_seid=0x99, sgw=SGW + 2, sgw_teid=1))
    out["sweep deletion"] = m.session_deletion_request(6, 0x99)
    return out


def _node_messages() -> dict[str, object]:
    """Every other builder of messages.py (the node's procedures and what a fake UPF answers)."""
    return {
        "heartbeat_request": m.heartbeat_request(1, 3_900_000_000),
        "heartbeat_response": m.heartbeat_response(1, 3_900_000_001),
        "association_setup_request": m.association_setup_request(2, NODE, 3_900_000_000),
        "association_setup_response": m.association_setup_response(2, "10.0.0.2", 3_900_000_002, ftup=True),
        "cp_association_setup_response": m.cp_association_setup_response(2, NODE, 3_900_000_002),
        "association_update_response": m.association_update_response(2, NODE),
        "association_release_request": m.association_release_request(3, NODE),
        "association_release_response": m.association_release_response(3, "10.0.0.2"),
        "session_establishment_response": m.session_establishment_response(
            4, 0x1234, "10.0.0.2", up_seid=0x99, up_addr="10.0.0.2", created=(1, "10.201.0.1")),
        "session_establishment_response_reject": m.session_establishment_response(
            4, 0x1234, "10.0.0.2", cause=73, offending=21),
        "session_modification_response": m.session_modification_response(5, 0x1234),
        "session_deletion_response": m.session_deletion_response(6, 0x1234, usage=(1000, 2000)),
        "session_report_request": m.session_report_request(7, 0x1234, usage=(1, 2),
                                                            error_indication=(5, "10.201.0.16")),
        "session_report_response": m.session_report_response(7, 0x99),
        "node_report_request": m.node_report_request(8, "10.0.0.2", "10.201.0.16"),
        "node_report_response": m.node_report_response(8, NODE),
    }


def _upftest_messages() -> dict[str, object]:
    out = {}
    for (un, urr), (qn, qer), teid in itertools.product(URRS.items(), QERS.items(), (TEID, None)):
        r = UR.Rules(ue="10.64.0.1", teid=teid, n3="10.201.0.1", gnb="10.201.0.16", gnb_teid=2, urr=urr, **qer)
        out[f"upftest est urr={un} qer={qn} teid={'given' if teid else 'choose'}"] = m.decode(
            UR.establishment(9, NODE, CP, 0x55, r))
    mods = {"handover": {"handover": ("10.201.0.24", 7)},
            "handover+end marker": {"handover": ("10.201.0.24", 7), "end_marker": True},
            "gate": {"gate": (True, False)}, "mbr": {"mbr_kbps": (10, 20)}, "query urr": {"query_urr": True},
            "all": {"handover": ("10.201.0.24", 7), "end_marker": True, "gate": (False, True),
                    "mbr_kbps": (1, 2), "query_urr": True}}
    for n, kw in mods.items():
        out[f"upftest modification {n}"] = m.decode(UR.modification(10, 0x99, **kw))
    out["upftest deletion"] = m.decode(UR.deletion(11, 0x99))
    return out


CATALOGUE = {**_sweep_messages(), **_node_messages(), **_upftest_messages()}


def test_the_catalogue_covers_every_builder():
    """Each message builder of gtplab/pfcp/messages.py is walked here (a new one must join)."""
    builders = {n for n, f in inspect.getmembers(m, inspect.isfunction)
                if f.__module__ == m.__name__ and (n.endswith("_request") or n.endswith("_response"))}
    walked = {n for n in builders if any(k.startswith(n) for k in CATALOGUE)} \
        | {"session_establishment_request", "session_modification_request", "session_deletion_request"}
    assert builders - walked == set(), f"builders not in the catalogue: {sorted(builders - walked)}"


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_fixed_length_ie_has_its_release_17_length(name):
    assert R.fixed_length_errors(CATALOGUE[name]) == []


@pytest.mark.parametrize("ie,want", [(sp.IE_ApplyAction(FORW=1), "Apply Action (44) in Create FAR: 1 octets"),
                                     (sp.IE_ReportingTriggers(), "Reporting Triggers (37) in Create FAR: 2 octets")])
def test_a_release_15_form_is_caught(ie, want):
    """The check finds Scapy's default (Release 15) forms, nested in a grouped IE."""
    msg = m.header(m.SESS_EST_REQ, 1, 0) / sp.PFCPSessionEstablishmentRequest(
        IE_list=[sp.IE_CreateFAR(IE_list=[sp.IE_FAR_Id(id=1), ie])])
    errs = R.fixed_length_errors(msg)
    assert len(errs) == 1 and errs[0].startswith(want), errs


def _ies(pkt, t):
    """Every IE of type t in a Scapy PFCP message, depth first, with the grouped IE it sits in."""
    out = []

    def walk(ies, parent):
        for ie in ies:
            if ie.ietype == t:
                out.append((parent, ie))
            if getattr(ie, "IE_list", None) is not None:
                walk(ie.IE_list, ie)
    walk(pkt.payload.IE_list, None)
    return out


@pytest.mark.parametrize("name", [n for n in sorted(CATALOGUE) if " est " in n])
def test_sessions_carry_pdn_type_ipv4_and_the_interface_types_of_a_5g_smf(name):
    """PDN Type 1 (IPv4); uplink PDI: N3 3GPP Access, downlink PDI: N6; FAR to Core: N6, FAR to
    Access: N3 3GPP Access (TS 29.244 8.2.118, as Open5GS's and free5GC's SMFs send them)."""
    p = CATALOGUE[name]
    [(_, pdn)] = _ies(p, 113)
    assert bytes(pdn)[4:] == b"\x01"
    types = {}
    for parent, ie in _ies(p, 160):
        side = {sp.IE_PDI: "pdi", sp.IE_ForwardingParameters: "far"}[type(parent)]
        iface = [x for x in parent.IE_list if x.ietype in (20, 42)][0].interface
        types[(side, iface)] = ie.interface_type
    assert types == {("pdi", 0): R.IF_N3_3GPP_ACCESS, ("pdi", 1): R.IF_N6,
                     ("far", 1): R.IF_N6, ("far", 0): R.IF_N3_3GPP_ACCESS}
    for _, aa in _ies(p, 44):
        assert bytes(aa)[4:] == b"\x02\x00"          # FORW, octet 6 zero


def test_the_catalogue_decodes_cleanly_in_tshark(tmp_path):
    """tshark's PFCP dissector reads every message of the catalogue: none malformed, no expert
    error or warning, no reserved value (the old PDN Type 0 printed 'Reserved (0)')."""
    assert shutil.which("tshark"), "tshark is needed (setup.sh installs it)"
    names = sorted(CATALOGUE)
    pcap = tmp_path / "catalogue.pcap"
    wrpcap(str(pcap), [m.frame(CATALOGUE[n]) for n in names])
    frames = pfcp_decoded_cleanly(pcap, names)
    assert sum(f.count("PDN Type: IPv4 (1)") for f in frames) == sum(" est " in n for n in names)
