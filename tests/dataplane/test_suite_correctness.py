"""Correctness through the live lab: known packets in, every packet out checked with Scapy.

One namespace lab per module (gtplab.lab.topology.Lab: generator + XDP PGW-U, always torn down). Packets come
from gtplab/gtpu/packets.py with the lab's addresses and are sent by the embedded engine as hand-built
TRex stream JSON (raw bytes, no field engine, single bursts); the engine captures on the receiving
port. For each packet the check computes the expected output itself: what is checked, packet by
packet, is listed in tests/lib/correctness.py's docstring.

The same packets go through eUPF (`eupf`: an external UPF in the lab, gtplab/lab/external.py,
provisioned over PFCP as the lab config embedded-eupf says; skipped, with the reason, when its
runtime is absent). Where eUPF departs from the specs or from what is expected of the PGW-U, the
table DEPARTS says so, row by row, and the checks expect exactly that: a UPF that stops departing
fails as surely as one that departs further. Its encapsulation is checked byte for byte against a
frame built with Scapy from that table (eupf_encap). The PGW-U's own knobs (`pgwu config`: the
outer source port, egress VLAN tags) are tested on the PGW-U only.

The checks are plain functions in tests/lib/correctness.py (tests/trex/test_trex_lab.py runs them
with TRex sending); this module builds each lab and runs every check on it.
"""

from __future__ import annotations

import subprocess

import pytest

from gtplab.dut.local import LocalDut
from gtplab.traffic.backend import engine_client
from tests.lib import correctness as C

pytestmark = pytest.mark.lab

UPFS = ["pgwu", "pfcp", "socket", pytest.param("eupf", marks=pytest.mark.eupf)]
PGWU_ONLY = pytest.mark.parametrize("lab", ["pgwu", "pfcp"], indirect=True)   # `pgwu config` knobs


@pytest.fixture(scope="module", params=UPFS)
def lab(request, tmp_path_factory):
    if request.param == "eupf":
        yield from eupf_lab(tmp_path_factory)
        return
    C.STATE["upf"] = "pgwu"
    yield from pgwu_lab(request, tmp_path_factory)


def eupf_lab(tmp_path_factory):
    """eUPF in the lab (embedded-eupf's config), 4 bearers over PFCP with gtplab's TEIDs, and the
    QFI bearer over a second association from a second N4 address (one QFI per association)."""
    import dataclasses
    import ipaddress
    from gtplab.dut import pfcp as pfcp_dut
    from gtplab.dut.external import ExternalDut
    from gtplab.lab.topology import Lab
    from gtplab.pfcp import messages as pm
    from gtplab.pfcp import provision
    from tests.lib import eupf as E
    cfg = E.lab_config()                # skips, with the reason, without eUPF's runtime
    lab = Lab.up(dut="external", external_spec=cfg.external_spec())
    client = dut = prov = prov_qfi = None
    try:
        C.STATE["upf"] = "eupf"
        a = lab.addressing
        bf = tmp_path_factory.mktemp("bearers") / "bearers.txt"
        bf.write_text(C.bearers_text(a, csum=False))
        pc, ns = pfcp_dut.in_lab(provision.parse_config(cfg.dut["pfcp"], cfg.path), lab)
        pc = dataclasses.replace(pc, choose=False)
        prov = pfcp_dut.provisioner(pc, ns)
        got = prov.install(str(bf), str(bf.with_suffix(".provisioned")))
        assert [s.teid for s in got] == [a.local_teid(i) for i in range(4)]
        q, second = C.QFI_BEARER, "10.203.0.3"
        subprocess.run(["ip", "-n", ns, "addr", "add", f"{second}/{a.prefixlen('n4')}", "dev",
                        lab.external["n4"]["cp_ifname"]], check=True)
        prov_qfi = pfcp_dut.provisioner(dataclasses.replace(pc, qfi=C.QFI, local=second, node_id=second), ns)
        got = prov_qfi.sessions.establish([pm.Bearer(q, int(ipaddress.IPv4Address(a.ue(q))),
                                                     int(ipaddress.IPv4Address(a.sgw(q))), a.sgw_teid(q),
                                                     a.local_teid(q))])
        assert [s.teid for s in got] == [a.local_teid(q)]
        C.STATE["csum_on"] = ()
        C.STATE["first_qer_qfi"] = C.QFI          # the QFI bearer's QER is the first eUPF stored
        # the kernel answers what eUPF passes it (ICMP errors): one per packet, not rate-limited
        subprocess.run(["ip", "netns", "exec", lab.dut_ns, "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"], check=True)
        client = engine_client(lab)
        client.connect()
        dut = ExternalDut(lab, cfg)
        yield lab, client, dut
    finally:
        C.STATE["upf"] = "pgwu"
        if client:
            client.disconnect()
        if dut:
            dut.close()
        for p in (prov_qfi, prov):
            if p:
                p.close()
        lab.down()


def pgwu_lab(request, tmp_path_factory):
    """The lab with 5 bearers, provisioned with `pgwu session load` (pgwu; socket: the same bearers,
    the socket-path PGW-U as the DUT, docs/socket.md) or over PFCP by the
    PGW-U's own agent, as the lab config embedded-pfcp says (pfcp: the agent must be built in; a
    pgwu without `pfcp` fails here, with the reason). PFCP has no per-bearer outer checksum flag:
    those bearers take the PGW-U's default (on). Bearer QFI_BEARER is a 5G N3 QoS flow with QFI:
    `qfi=` in the loaded file, or over PFCP a session of a second association (its own Node ID)
    whose SessionOptions carry the QFI (one QFI per association: docs/pfcp.md), in its QER
    (downlink marking) and its uplink PDR's PDI (uplink check)."""
    from gtplab.lab.topology import Lab
    lab = Lab.up(dut="socket" if request.param == "socket" else "pgwu")
    client = dut = agent = prov = prov_qfi = None
    try:
        a = lab.addressing
        bf = tmp_path_factory.mktemp("bearers") / "bearers.txt"
        bf.write_text(C.bearers_text(a))
        q = C.QFI_BEARER
        if request.param in ("pgwu", "socket"):
            bf_qfi = bf.with_name("bearers-qfi.txt")
            bf_qfi.write_text(f"{a.local_teid(q):#x} {a.ue(q)} {a.sgw(q)} {a.sgw_teid(q):#x} csum=on qfi={C.QFI}\n")
            lab.pgwu("session", "load", str(bf))
            lab.pgwu("session", "load", str(bf_qfi))
            C.STATE["csum_on"] = C.CSUM_ON + (q,)
        else:
            import dataclasses
            import ipaddress
            from gtplab.dut import pfcp as pfcp_dut
            from gtplab.lab import config as labconfig
            from gtplab.pfcp import messages as pm
            from gtplab.pfcp import provision
            cfg = provision.parse_config(labconfig.load("embedded-pfcp").dut["pfcp"], "embedded-pfcp")
            agent = pfcp_dut.EmbeddedAgent(lab.pin_dir)
            prov = provision.Provisioner(cfg, agent.addr)
            got = prov.install(str(bf), str(bf.with_suffix(".provisioned")))
            assert [s.teid for s in got] == [a.local_teid(i) for i in range(4)]
            prov_qfi = provision.Provisioner(dataclasses.replace(cfg, qfi=C.QFI, node_id="qfi.gtplab.test"),
                                             agent.addr)
            # bearer index q: its CP SEID (base + index + 1) is none of the first association's
            got = prov_qfi.sessions.establish([pm.Bearer(q, int(ipaddress.IPv4Address(a.ue(q))),
                                                         int(ipaddress.IPv4Address(a.sgw(q))), a.sgw_teid(q),
                                                         a.local_teid(q))])
            assert [s.teid for s in got] == [a.local_teid(q)]
            C.STATE["csum_on"] = (0, 1, 2, 3, q)
        qfis = {b["teid"]: (b["qfi"], b["ul_qfi"]) for b in lab.pgwu_json("session", "list")["bearers"]}
        assert qfis == {**{a.local_teid(i): (None, None) for i in range(4)}, a.local_teid(q): (C.QFI, C.QFI)}, qfis
        client = engine_client(lab)
        client.connect()
        dut = LocalDut(lab)
        yield lab, client, dut
    finally:
        if client:
            client.disconnect()
        if dut:
            dut.close()
        for p in (prov_qfi, prov):
            if p:
                p.close()
        if agent:
            agent.close()
        lab.down()


# ---------------------------------------------------------------------------------------- the checks, on each lab

@pytest.mark.parametrize("lab", ["pgwu", "socket", "pfcp", pytest.param("eupf", marks=pytest.mark.eupf)],
                         indirect=True)
def test_ipv6_ues_every_packet_both_ways(lab):
    C.ipv6_every_packet(lab)


def test_uplink_decap_every_packet(lab):
    C.uplink_decap_every_packet(lab)


def test_downlink_encap_every_packet(lab):
    C.downlink_encap_every_packet(lab)


@PGWU_ONLY
def test_downlink_sport_fixed(lab):
    C.downlink_sport_fixed(lab)


@PGWU_ONLY
def test_downlink_egress_vlan(lab):
    C.downlink_egress_vlan(lab)


@PGWU_ONLY
def test_uplink_egress_vlan(lab):
    C.uplink_egress_vlan(lab)


def test_not_forwarded_and_counted_by_reason(lab):
    C.not_forwarded_and_counted_by_reason(lab)


def test_qfi_downlink_carries_a_dl_pdu_session_container(lab):
    C.qfi_downlink_carries_a_dl_pdu_session_container(lab)


def test_qfi_uplink_with_its_psc_forwarded(lab):
    C.qfi_uplink_with_its_psc_forwarded(lab)


def test_qfi_uplink_without_its_qfi_not_forwarded_and_counted(lab):
    C.qfi_uplink_without_its_qfi_not_forwarded_and_counted(lab)


def test_uplink_outer_fragments_reassembled_and_forwarded(lab):
    C.uplink_outer_fragments_reassembled_and_forwarded(lab)


def test_downlink_too_big_leaves_in_outer_fragments(lab):
    C.downlink_too_big_leaves_in_outer_fragments(lab)
