"""The correctness checks through a live lab, as plain functions: known packets in, every packet out
checked with Scapy. tests/dataplane/test_suite_correctness.py runs them against each UPF with the
embedded engine sending; tests/trex/test_trex_lab.py runs some of them with TRex sending.

Each check takes the lab triple (lab, client, dut): a gtplab.lab.topology.Lab, a TRex-style client (the
embedded engine's, or TRex's with the engine's conveniences) and the DUT's counters. Packets come
from gtplab/gtpu/packets.py with the lab's addresses and are sent as hand-built TRex stream JSON (raw
bytes, no field engine, single bursts); the client captures on the receiving port. For each packet
the check computes the expected output itself:
- uplink (decap): Ether(gen port 1 <- DUT SGi) / the inner packet with TTL-1 and a valid header
  checksum, byte for byte;
- downlink (encap): outer IPv4 PGW -> the bearer's SGW, UDP from the inner flow's port (TS 29.281
  4.4.2.0, tests/lib/oracle.py sport_of_flow; 2152 with `pgwu config --sport-entropy off`) to 2152, GTP-U
  G-PDU with the bearer's SGW TEID, every length, the outer UDP checksum valid (bearer csum on) or 0 (off), the inner packet
  with TTL-1 byte for byte; VLAN tags in and out;
- QFI (5G N3, TS 38.415): bearer QFI_BEARER carries QFI 9; its downlink G-PDUs carry E, the
  optional fields and a DL PDU Session Container with it (byte for byte, tests/lib/oracle.py); its
  uplink G-PDUs are forwarded with an UL PSC carrying it, and without one, with another QFI or with
  a DL PSC are counted drop_qfi_mismatch;
- outer fragments (the lab runs `pgwu reassemble`): an uplink G-PDU in outer IPv4 fragments leaves
  SGi as one inner packet, TTL-1, byte for byte; a downlink packet without DF too big for the
  access MTU once encapsulated leaves in outer fragments that Scapy reassembles into the G-PDU;
- nothing else arrives, nothing comes back, and packet conservation holds for every burst, with
  what the DUT's kernel sent for packets passed to it (reassembled G-PDUs the reassembler
  forwarded, outer fragments the kernel made) counted with the forwarded ones;
- unknown TEIDs, unknown UEs and spoofed sources are not forwarded and are counted by reason.

Where a UPF departs from the specs or from what is expected of the PGW-U (eUPF), the table DEPARTS
says so, row by row, and the checks expect exactly that: a UPF that stops departing fails as surely
as one that departs further.

STATE says what the lab being checked holds: which UPF runs it ("upf") and the bearers whose outer
UDP checksum is on ("csum_on"); whoever provisions a lab sets it (the fixtures), and
bearers_text() writes the bearers the checks expect.
"""

from __future__ import annotations

import collections
import struct
import subprocess

from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

from gtplab.conformance import departs as departs_data
from gtplab.conformance import oracle as conformance_oracle
from gtplab.conformance.cases import (IPV6_BEARERS, downlink6_frames, downlink_frames, qfi_downlink_frames,
                                      qfi_uplink, ue6_prefix, uplink6_frames, uplink_frames)
from gtplab.conformance.runner import transmit
from gtplab.gtpu import packets
from gtplab.measure import conservation
from tests.lib import oracle as O
from tests.lib.lab import reassembler_pid, wait_for

N_EACH = 3          # copies of each packet (one single-burst stream per packet)
CSUM_ON = (0, 1)    # bearers with the outer UDP checksum on; 2, 3 have it off
QFI_BEARER = 4      # a 5G N3 bearer (TS 38.415): QFI both ways; outer UDP checksum on
QFI = 9


# bearers whose downlink has the outer UDP checksum on, as provisioned, and which UPF runs (set by
# the lab fixture)
STATE = {"csum_on": CSUM_ON, "upf": "pgwu"}

# ---------------------------------------------------------------------------------------- per UPF
# Where a UPF departs from the specs or from what gtplab expects of a UPF (what the PGW-U does, which
# the checks are written for): one fact per departure, each with its cause, in
# gtplab/conformance/departs.py (the data `gtplab conformance` reports "departs: <cause>" from); the
# checks below read their values. The PGW-U has none.
DEPARTS: dict[str, dict] = {"pgwu": departs_data.facts("pgwu"), "eupf": departs_data.facts("eupf")}


def bearers_text(a, csum: bool = True) -> str:
    """The 4 bearers the checks send to, as a `pgwu session load` file for the lab's addressing a:
    with csum, CSUM_ON's with the outer UDP checksum on and the others off (without: no csum= field,
    for a UPF provisioned over PFCP, which has no such flag)."""
    return "".join(f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x}"
                   + (f" csum={'on' if i in CSUM_ON else 'off'}" if csum else "")
                   + (f" ue6={ue6_prefix(i)}" if i in IPV6_BEARERS else "") + "\n" for i in range(4))


def departs() -> dict:
    return DEPARTS[STATE["upf"]]


def eupf_encap(d: dict, ip: bytes, *, smac: str, dmac: str, local: str, sgw: str, teid: int,
               qfi: int | None = None) -> bytes:
    """A downlink G-PDU as a UPF with departures d sends it (gtplab/conformance/oracle.py)."""
    return O.encap_departing(d, ip, smac=smac, dmac=dmac, local=local, sgw=sgw, teid=teid, qfi=qfi)


def socket_path(lab_t) -> bool:
    """The DUT is the socket-path PGW-U (docs/socket.md): where it differs from the XDP path, the
    tests say how (the kernel routes and picks IPv4 ids, reassembles and fragments for it)."""
    return lab_t[0].dut_mode == "socket"


def config_applied(lab) -> None:
    """After a `pgwu config`: the socket path reads the config every 200 ms; wait for it to have read
    the new one (5 of its 50 ms ticks). The XDP programs read it on every packet: nothing to wait for."""
    if lab.dut_mode != "socket":
        return
    from gtplab.dut.sock import SockStats
    st = SockStats(lab.pin_dir)
    try:
        t0 = st.header()["ticks"]
        wait_for(lambda: st.header()["ticks"] >= t0 + 5, what="the socket path's next config read")
    finally:
        st.close()


def id_free(frame: bytes) -> bytes:
    """The frame with its outer IPv4 id and header checksum zeroed, after checking the checksum: the
    kernel picks the id of a packet the socket path sends without DF."""
    l2 = 18 if frame[12:14] == b"\x81\x00" else 14
    ihl = (frame[l2] & 0xF) * 4
    assert _ipv4_csum(frame[l2:l2 + ihl]) == 0, "outer IPv4 header checksum: " + _show(frame)
    b = bytearray(frame)
    b[l2 + 4:l2 + 6] = b"\0\0"
    b[l2 + 10:l2 + 12] = b"\0\0"
    return bytes(b)


SNMP_IP = ("ReasmReqds", "ReasmOKs", "ReasmFails", "FragOKs", "FragCreates", "FragFails", "InAddrErrors",
           "InHdrErrors", "InDiscards", "ForwDatagrams", "OutNoRoutes", "InDelivers")


def kernel_counts(lab) -> dict[str, int]:
    """What the DUT's kernel did with packets the program passed to it: its netns's IP MIB
    (/proc/net/snmp: fragments taken for reassembly, datagrams reassembled, datagrams fragmented and
    the fragments made) and `pgwu reassemble`'s counters (datagrams received, forwarded)."""
    snmp = subprocess.run(["nsenter", f"--net=/run/netns/{lab.dut_ns}", "--", "cat", "/proc/net/snmp"],
                          capture_output=True, text=True, check=True).stdout
    head, vals = [ln.split()[1:] for ln in snmp.splitlines() if ln.startswith("Ip:")][:2]
    ip = dict(zip(head, map(int, vals)))
    r = (lab.pgwu_json("stats").get("reassembler") or {}) if lab.dut_mode == "pgwu" else {}
    return {**{k: ip[k] for k in SNMP_IP}, "reasm_received": r.get("received", 0),
            "reasm_forwarded": r.get("forwarded", 0)}


def send(lab_t, tx: int, frames: list[bytes], returned: list | None = None, *, copies: int = N_EACH,
         spaced_us: float = 0.0) -> tuple[list[bytes], conservation.DutDelta, dict]:
    """Send every frame `copies` times from port tx, capture on the other port; returns the captured
    frames, the DUT's counter deltas and the engine stats (with "kernel": the kernel_counts deltas).
    Asserts packet conservation, with what the DUT's kernel sent for packets passed to it (G-PDUs
    `pgwu reassemble` forwarded, outer fragments the kernel made) on the forwarded side. spaced_us:
    frame k starts k * spaced_us after the first (in order; else all streams run at once). Frames
    that come back to port tx (the DUT's replies: Error Indications ...) are appended to `returned`;
    when it is None, none may come back."""
    lab, c, dut = lab_t
    rx = 1 - tx
    cnt0, link0, k0 = dut.counters(), dut.link(), kernel_counts(lab)
    sent = transmit(c, tx, frames, copies, spaced_us, rx_delay_ms=100)
    got, back = sent.fwd, sent.back
    st = c.get_stats()
    cnt1, link1, k1 = dut.counters(), dut.link(), kernel_counts(lab)
    kd = {k: k1[k] - k0[k] for k in k0}
    st["kernel"] = kd
    dd = conservation.DutDelta.from_counters(cnt0, cnt1)
    ld = dut.link_delta(link0, link1, "uplink" if tx == 0 else "downlink")
    # uplink: a reassembled G-PDU leaves through the reassembler; downlink: an encapsulated packet
    # too big for the access MTU leaves in the fragments the kernel made. The socket path counts
    # such a packet forwarded itself: the kernel's share is the fragments beyond one per packet.
    if socket_path(lab_t):
        kernel_fwd = 0 if tx == 0 else kd["FragCreates"] - kd["FragOKs"]
    else:
        kernel_fwd = kd["reasm_forwarded"] if tx == 0 else kd["FragCreates"]
    cons = conservation.check(st[tx]["opackets"], st[rx]["ipackets"], dd, dut_rx=ld["dut_rx"],
                              link_in_lost=ld["lost_in"], link_out_lost=ld["lost_out"], kernel_fwd=kernel_fwd)
    assert st[tx]["opackets"] == copies * len(frames)
    assert cons.ok, cons.message()
    if hasattr(dut, "cross_check"):        # an external UPF's verdicts against the kernel's count
        disagree = dut.cross_check(dd, link0, link1, "uplink" if tx == 0 else "downlink")
        assert not disagree, disagree
    assert st[tx]["ipackets"] == len(back), "capture and tx port's rx counter disagree"
    if returned is None:
        assert not back, f"{len(back)} frames came back to the sending port"
    else:
        returned += back
    assert len(got) == st[rx]["ipackets"], "capture and rx counter disagree"
    return got, dd, st


# the IPv4 header checksum and a router's TTL-1 are the conformance oracle's (gtplab/conformance/oracle.py)
_ipv4_csum = conformance_oracle.csum16
ttl_minus_one = conformance_oracle.ttl_dec


def _show(frame: bytes) -> str:
    return Ether(frame).command()


def assert_frames(got: list[bytes], expected: collections.Counter) -> None:
    """got is exactly expected ({frame: times}): the first frame that is none of them shown beside
    every one expected, then the counts."""
    unexpected = [g for g in got if g not in expected]
    assert not unexpected, "unexpected frame(s), e.g. " + _show(unexpected[0]) + \
        "\nexpected one of:\n" + "\n".join(_show(e) for e in expected)
    assert collections.Counter(got) == expected


# ---------------------------------------------------------------------------------------- uplink

def uplink_decap_every_packet(lab):
    lab_o = lab[0]
    p1 = lab_o.ports[1]
    d = departs()
    frames = uplink_frames(lab_o)
    if socket_path(lab):
        # a tagged G-PDU reaches no socket: the kernel drops it without a VLAN device (uncounted,
        # SKB_DROP_REASON_OTHERHOST; docs/socket.md)
        frames = [f for f in frames if Dot1Q not in f]
    keep = (lambda ip: ip) if d.get("inner_ttl") == "kept" else ttl_minus_one
    passed = [f for f in frames if Dot1Q in f and d.get("vlan")]
    expected = collections.Counter()
    for f in frames:
        if any(f is x for x in passed):
            continue
        inner = bytes(f[GTP_U_Header].payload)
        inner = inner[:struct.unpack("!H", inner[2:4])[0]]
        # the header chain of the ext-header frame: take the inner IP from the end of the message
        if f[GTP_U_Header].E or f[GTP_U_Header].S:
            g = bytes(f[GTP_U_Header])
            chain_end = 12
            nxt = g[11]
            while nxt:
                ln = g[chain_end] * 4
                nxt = g[chain_end + ln - 1]
                chain_end += ln
            inner = g[chain_end:]
        exp = bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + keep(inner)
        expected[exp] += N_EACH
    got, dd, st = send(lab, 0, [bytes(f) for f in frames])
    assert dd.fwd_packets == N_EACH * (len(frames) - len(passed)) and not dd.drops_by_reason
    assert dd.passed_by_reason == ({d["vlan"]: N_EACH * len(passed)} if passed else {})
    assert_frames(got, expected)
    for g in got:                      # the same facts once more, through Scapy's eyes
        e = Ether(g)
        assert e.type == 0x0800 and Dot1Q not in e
        ip = e[IP]
        assert _ipv4_csum(bytes(ip)[:ip.ihl * 4]) == 0, "inner IPv4 checksum: " + _show(g)


# ---------------------------------------------------------------------------------------- downlink

def check_encap(lab_o, frames, got, vlan: int | None, sport_fixed: bool = False):
    """Every frame in got is one of frames encapsulated as the spec says. The outer UDP source port is
    its inner flow's (sport_of_flow), or 2152 with sport_fixed (`--sport-entropy off`)."""
    a, p0 = lab_o.addressing, lab_o.ports[0]
    by_inner = {}
    for f in frames:
        ip = bytes(f[IP])
        ip = ip[:struct.unpack("!H", ip[2:4])[0]]
        by_inner[ttl_minus_one(ip)] = f
    seen = collections.Counter()
    for g in got:
        e = Ether(g)
        assert (e.dst, e.src) == (p0.mac, p0.dut_mac), _show(g)
        if vlan is None:
            assert e.type == 0x0800 and Dot1Q not in e, _show(g)
        else:
            assert Dot1Q in e and e[Dot1Q].vlan == vlan and e[Dot1Q].prio == 0, _show(g)
        o = e[IP]
        raw_ip = bytes(o)
        assert o.ihl == 5 and o.ttl == 64 and o.proto == 17 and o.src == a.dut_access, _show(g)
        assert _ipv4_csum(raw_ip[:20]) == 0, "outer IPv4 checksum: " + _show(g)
        inner = raw_ip[36:]
        assert inner in by_inner, "inner packet is not one we sent (with TTL-1): " + _show(g)
        src = by_inner[inner]
        sent_ip = src[IP]
        i = int(sent_ip.dst.split(".")[-1]) - 1          # UE i = 10.64.0.1 + i (i < 4 here)
        assert o.dst == a.sgw(i) and o.tos == sent_ip.tos, _show(g)
        assert bool(o.flags.DF) == bool(sent_ip.flags.DF) and (o.id == 0 or not sent_ip.flags.DF), _show(g)
        assert o.len == 36 + len(inner)
        u = e[UDP]
        sport = 2152 if sport_fixed else O.sport_of_flow(inner)
        assert (u.sport, u.dport, u.len) == (sport, 2152, 16 + len(inner)), _show(g)
        gtp = e[GTP_U_Header]
        gh = bytes(gtp)[:8]
        assert gh[0] == 0x30 and gh[1] == 255, _show(g)
        assert struct.unpack("!HI", gh[2:8]) == (len(inner), a.sgw_teid(i)), _show(g)
        udp_raw = raw_ip[20:]
        if i in STATE["csum_on"]:
            assert u.chksum != 0
            ref = UDP(udp_raw)
            ref.chksum = None
            want = IP(src=o.src, dst=o.dst, proto=17) / ref
            assert bytes(want[UDP])[6:8] == udp_raw[6:8], f"outer UDP checksum of bearer {i}: " + _show(g)
        else:
            assert u.chksum == 0, f"bearer {i} opted out of the outer UDP checksum: " + _show(g)
        seen[inner] += 1
    assert seen == collections.Counter({k: N_EACH for k in by_inner})


def check_encap_as_departs(lab_o, frames, got, d: dict, qfi: int | None = None) -> None:
    """Every frame in got is one of frames encapsulated as eupf_encap builds it from d, byte for
    byte, each N_EACH times: bearer i (UE 10.64.0.1 + i) to SGW i with its SGW TEID."""
    a, p0 = lab_o.addressing, lab_o.ports[0]
    if qfi is None and d.get("pdr_without_qer") == "applies the first QER stored":
        qfi = STATE["first_qer_qfi"]
    want = collections.Counter()
    for f in frames:
        ip = bytes(f[IP])
        ip = ip[:struct.unpack("!H", ip[2:4])[0]]
        i = int(f[IP].dst.split(".")[-1]) - 1
        want[eupf_encap(d, ip, smac=p0.dut_mac, dmac=p0.mac, local=a.dut_access, sgw=a.sgw(i),
                        teid=a.sgw_teid(i), qfi=qfi)] += N_EACH
    assert_frames(got, want)
    for g in got:
        assert O.ip_hdr_ok(g[14:34]), "outer IPv4 checksum: " + _show(g)


def downlink_encap_every_packet(lab):
    lab_o = lab[0]
    d = departs()
    frames = downlink_frames(lab_o)
    passed = [f for f in frames if Dot1Q in f and d.get("vlan")]
    got, dd, st = send(lab, 1, [bytes(f) for f in frames])
    fwd = [f for f in frames if not any(f is x for x in passed)]
    assert dd.fwd_packets == N_EACH * len(fwd) and not dd.drops_by_reason
    assert dd.passed_by_reason == ({d["vlan"]: N_EACH * len(passed)} if passed else {})
    if d:
        check_encap_as_departs(lab_o, fwd, got, d)
        return
    check_encap(lab_o, frames, got, vlan=None)
    # the lab's PGW-U is loaded with its defaults: source-port entropy on, one port per flow
    assert len({Ether(g)[UDP].sport for g in got}) == len(frames), [Ether(g)[UDP].sport for g in got]


def downlink_sport_fixed(lab):
    """pgwu config --sport-entropy off: every encapsulated frame leaves from port 2152 (for peers that
    need it), and on brings the flows' ports back."""
    lab_o = lab[0]
    frames = downlink_frames(lab_o)[:4]
    lab_o.pgwu("config", "--sport-entropy", "off")
    config_applied(lab_o)
    try:
        got, dd, st = send(lab, 1, [bytes(f) for f in frames])
    finally:
        lab_o.pgwu("config", "--sport-entropy", "on")
        config_applied(lab_o)
    check_encap(lab_o, frames, got, vlan=None, sport_fixed=True)
    got, dd, st = send(lab, 1, [bytes(f) for f in frames])
    check_encap(lab_o, frames, got, vlan=None)


def downlink_egress_vlan(lab):
    """pgwu config --vlan access ID: every encapsulated frame leaves with that 802.1Q tag. The socket
    path does not tag (the kernel routes its packets: docs/socket.md): they leave untagged."""
    lab_o = lab[0]
    frames = downlink_frames(lab_o)[:3]
    lab_o.pgwu("config", "--vlan", "access", "7")
    config_applied(lab_o)
    try:
        got, dd, st = send(lab, 1, [bytes(f) for f in frames])
    finally:
        lab_o.pgwu("config", "--vlan", "access", "0")
        config_applied(lab_o)
    check_encap(lab_o, frames, got, vlan=None if socket_path(lab) else 7)


def uplink_egress_vlan(lab):
    lab_o = lab[0]
    p1 = lab_o.ports[1]
    f = uplink_frames(lab_o)[0]
    lab_o.pgwu("config", "--vlan", "sgi", "300")
    config_applied(lab_o)
    try:
        got, dd, st = send(lab, 0, [bytes(f)])
    finally:
        lab_o.pgwu("config", "--vlan", "sgi", "0")
        config_applied(lab_o)
    inner = bytes(f[GTP_U_Header].payload)
    if socket_path(lab):        # untagged: the kernel routes the socket path's packets
        exp = bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + ttl_minus_one(inner)
    else:
        exp = bytes(Ether(dst=p1.mac, src=p1.dut_mac) / Dot1Q(vlan=300, prio=0, type=0x0800)) + ttl_minus_one(inner)
    assert got == [exp] * N_EACH, _show(got[0]) if got else "nothing forwarded"


# ---------------------------------------------------------------------------------------- negative

def icmp_from_kernel(frame: bytes, *, smac: str, dmac: str, src: str, dst: str, kind: tuple[int, int],
                     quoted: bytes) -> None:
    """frame is an ICMP error (type, code = kind) of the DUT's kernel: src -> dst, quoting the start
    of the packet it answers (the IP header and 8 octets at least, RFC 792)."""
    from scapy.layers.inet import ICMP, IPerror
    e = Ether(frame)
    assert (e.dst, e.src) == (dmac, smac) and IP in e and ICMP in e, _show(frame)
    assert (e[IP].src, e[IP].dst, e[ICMP].type, e[ICMP].code) == (src, dst, *kind), _show(frame)
    q = bytes(e[IPerror])
    assert q[:28] == quoted[:28], _show(frame)


def not_forwarded_and_counted_by_reason(lab):
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    kw = dict(outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac, outer_src=a.sgw(0))
    unknown_teid = packets.gpdu(a.local_teid(999), a.ue(999), a.pdn(0), size=128, **kw)
    spoofed = packets.gpdu(a.local_teid(0), a.ue(1), a.pdn(0), size=128, **kw)   # bearer 0, UE 1's address
    unknown_ue = packets.downlink_ip(a.ue(500), a.pdn(0), 128, src_mac=p1.mac, dst_mac=p1.dut_mac)
    d = departs()
    if d:
        check_not_forwarded_as_departs(lab, d, unknown_teid, spoofed, unknown_ue)
        return
    back: list = []
    got, dd, st = send(lab, 0, [bytes(unknown_teid), bytes(spoofed), bytes(spoofed)], returned=back)
    assert got == []
    assert dd.fwd_packets == 0 and not dd.passed_by_reason
    assert dd.drops_by_reason == {"drop_unknown_teid": N_EACH, "drop_spoofed": 2 * N_EACH}
    # TS 29.281 7.3.1: each unknown-TEID G-PDU (3, within the per-peer budget of 10) is answered with
    # an Error Indication back to its sender: TEID Data I = its TEID, GTP-U Peer Address = the DUT's
    from scapy.contrib.gtp import GTPErrorIndication, IE_GSNAddress, IE_TEIDI
    ei = (Ether(dst=p0.mac, src=p0.dut_mac) / IP(src=a.dut_access, dst=a.sgw(0), ttl=64, id=0, flags=0)
          / UDP(sport=2152, dport=2152)
          / GTP_U_Header(version=1, PT=1, E=0, S=1, PN=0, gtp_type=26, teid=0, seq=0, npdu=0, next_ex=0)
          / GTPErrorIndication(IE_list=[IE_TEIDI(TEIDI=a.local_teid(999)),
                                        IE_GSNAddress(length=4, ipv4_address=a.dut_access)]))
    if socket_path(lab):            # the kernel picks the id of the socket path's reply
        back, ei = [id_free(b) for b in back], Ether(id_free(bytes(ei)))
    assert back == [bytes(ei)] * N_EACH, _show(back[0]) if back else "no Error Indication came back"

    got, dd, st = send(lab, 1, [bytes(unknown_ue)])
    assert got == []
    assert dd.fwd_packets == 0 and dd.drops_by_reason == {"drop_unknown_ue": N_EACH}


def check_not_forwarded_as_departs(lab, d: dict, unknown_teid, spoofed, unknown_ue) -> None:
    """The negative packets through a UPF with departures d: an unknown TEID and an unknown UE
    passed to the kernel (by d's reason), each answered by the kernel's ICMP error (d's type and
    code) back to its sender; a spoofed source forwarded as any packet of its bearer."""
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    reason, kind = d["unknown_teid"]
    back: list = []
    got, dd, st = send(lab, 0, [bytes(unknown_teid)], returned=back)
    assert got == [] and dd.fwd_packets == 0 and not dd.drops_by_reason
    assert dd.passed_by_reason == {reason: N_EACH}
    assert len(back) == N_EACH, [_show(b) for b in back]
    for b in back:      # no Error Indication (TS 29.281 7.3.1): the kernel's port unreachable
        icmp_from_kernel(b, smac=p0.dut_mac, dmac=p0.mac, src=a.dut_access, dst=a.sgw(0), kind=kind,
                         quoted=bytes(unknown_teid[IP]))
    assert d["spoofed_source"] == "forwarded"
    got, dd, st = send(lab, 0, [bytes(spoofed)])
    inner = O.gpdu_inner(bytes(spoofed))
    keep = (lambda ip: ip) if d.get("inner_ttl") == "kept" else ttl_minus_one
    assert got == [bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + keep(inner)] * N_EACH
    assert dd.fwd_packets == N_EACH and not dd.drops_by_reason and not dd.passed_by_reason
    reason, kind = d["unknown_ue"]
    back = []
    got, dd, st = send(lab, 1, [bytes(unknown_ue)], returned=back)
    assert got == [] and dd.fwd_packets == 0 and dd.passed_by_reason == {reason: N_EACH}
    assert len(back) == N_EACH, [_show(b) for b in back]
    for b in back:
        icmp_from_kernel(b, smac=p1.dut_mac, dmac=p1.mac, src=a.dut_sgi, dst=a.pdn(0), kind=kind,
                         quoted=bytes(unknown_ue[IP]))


# ---------------------------------------------------------------------------------------- IPv6 UEs
# Bearers 0-3 are IPv4v6: each has its UE's /64 (ue6_prefix) beside its IPv4 address. The packets are
# gtplab conformance's (uplink6_frames, downlink6_frames): IPv6 UDP, TCP with hop limit 2 and ICMPv6,
# one with a traffic class and flow label.

def _l4_csum_ok6(ip6: bytes) -> bool:
    """The UDP/TCP/ICMPv6 checksum of an IPv6 packet (no extension header) is right and not 0."""
    nh, plen = ip6[6], struct.unpack("!H", ip6[4:6])[0]
    l4 = ip6[40:40 + plen]
    off = {17: 6, 6: 16, 58: 2}[nh]
    if l4[off:off + 2] == b"\0\0":
        return False
    pseudo = ip6[8:40] + struct.pack("!IxxxB", plen, nh)
    return O.csum16(pseudo + l4) == 0


def ipv6_every_packet(lab):
    """IPv6 through the IPv4v6 bearers, packet by packet. Uplink: each inner packet on N6 with hop
    limit-1, byte for byte, its L4 checksum over the IPv6 pseudo header still right; a packet from
    another bearer's /64 dropped as drop_spoofed. Downlink: each in its bearer's G-PDU, outer IPv4
    local -> the bearer's SGW with the traffic class as TOS, DF clear, UDP from the flow's port
    (sport_of_flow6) with the bearer's checksum choice, the inner packet hop limit-1 byte for byte; a
    /64 without a session dropped as drop_unknown_ue. Conservation holds for every send. A UPF that
    forwards no IPv6 (departs "ipv6") is held to exactly that: nothing forwarded, each packet passed
    to its kernel, the kernel's ICMPv6 error back for the downlink ones."""
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    d = departs()
    ul, dl = uplink6_frames(lab_o), downlink6_frames(lab_o)
    if d.get("ipv6"):
        _reason, kind = d["ipv6"]
        got, dd, st = send(lab, 0, [bytes(f) for f in ul])
        assert got == [] and dd.fwd_packets == 0 and not dd.drops_by_reason, dd
        assert sum(dd.passed_by_reason.values()) == N_EACH * len(ul), dd.passed_by_reason
        back: list = []
        got, dd, st = send(lab, 1, [bytes(f) for f in dl], returned=back)
        assert got == [] and dd.fwd_packets == 0 and not dd.drops_by_reason, dd
        assert sum(dd.passed_by_reason.values()) == N_EACH * len(dl), dd.passed_by_reason
        want = collections.Counter({bytes(f[IPv6])[:48]: N_EACH for f in dl})
        seen = collections.Counter()
        for b in back:
            e = Ether(b)
            assert (e.dst, e.src) == (p1.mac, p1.dut_mac) and IPv6 in e and e[IPv6].nh == 58, _show(b)
            icmp = bytes(e[IPv6].payload)
            assert (icmp[0], icmp[1]) == tuple(kind) and e[IPv6].src == a.dut_sgi6, _show(b)
            seen[icmp[8:56]] += 1
        assert seen == want, (seen, want)
        return

    # uplink
    expected = collections.Counter()
    for f in ul[:4]:
        inner = O.gpdu_inner(bytes(f))
        expected[bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x86DD)) + O.ttl_dec(inner)] += N_EACH
    got, dd, st = send(lab, 0, [bytes(f) for f in ul[:4]])
    assert dd.fwd_packets == N_EACH * 4 and not dd.drops_by_reason and not dd.passed_by_reason, dd
    assert_frames(got, expected)
    for g in got:                       # the same facts once more, through Scapy's eyes
        e = Ether(g)
        assert e.type == 0x86DD and e[IPv6].hlim in (63, 1), _show(g)
        assert _l4_csum_ok6(bytes(e[IPv6])), "inner L4 checksum over the IPv6 pseudo header: " + _show(g)
    got, dd, st = send(lab, 0, [bytes(ul[4])])
    assert got == [] and dd.fwd_packets == 0 and dd.drops_by_reason == {"drop_spoofed": N_EACH}, dd

    # downlink
    got, dd, st = send(lab, 1, [bytes(f) for f in dl[:4]])
    assert dd.fwd_packets == N_EACH * 4 and not dd.drops_by_reason and not dd.passed_by_reason, dd
    want = collections.Counter()
    for k, f in enumerate(dl[:4]):
        ip6 = bytes(f[IPv6])
        want[id_free(O.encap_expected(ip6, smac=p0.dut_mac, dmac=p0.mac, vlan=None, local=a.dut_access,
                                      sgw=a.sgw(k), teid=a.sgw_teid(k), csum=k in STATE["csum_on"],
                                      ip_id=0))] += N_EACH
    norm = [id_free(g) for g in got]
    assert_frames(norm, want)
    for g in got:
        e = Ether(g)
        assert O.ip_hdr_ok(g[14:34]) and not e[IP].flags.DF, "outer IPv4 header: " + _show(g)
        k = next(i for i in IPV6_BEARERS if e[IP].dst == a.sgw(i))
        inner = O.gpdu_inner(g)
        assert e[IP].tos == O.traffic_class(inner) and _l4_csum_ok6(inner), _show(g)
        assert e[UDP].sport == O.sport_of_flow6(inner), _show(g)
        assert (e[UDP].chksum != 0) == (k in STATE["csum_on"]), _show(g)
        if e[UDP].chksum:
            assert O.outer_udp_ok(g), "outer UDP checksum: " + _show(g)
    got, dd, st = send(lab, 1, [bytes(dl[4])])
    assert got == [] and dd.fwd_packets == 0 and dd.drops_by_reason == {"drop_unknown_ue": N_EACH}, dd


# ---------------------------------------------------------------------------------------- QFI (5G N3)
# Bearer QFI_BEARER carries QFI (TS 38.415): its downlink G-PDUs carry E, the optional fields and a
# DL PDU Session Container with it; its uplink G-PDUs must carry an UL PDU Session Container with it.

def qfi_downlink_carries_a_dl_pdu_session_container(lab):
    """Every G-PDU to the QFI bearer, byte for byte as tests/lib/oracle.py builds it (encap_expected with
    qfi: flags 0x34, GTP length = T-PDU + 8, sequence and N-PDU 0, next type 0x85, PSC length 1,
    PDU type 0, the QFI, next type 0; outer IPv4 and UDP lengths 8 more, both checksums valid)."""
    from scapy.contrib.gtp import GTPPDUSessionContainer
    lab_o = lab[0]
    a, p0, q = lab_o.addressing, lab_o.ports[0], QFI_BEARER
    frames = qfi_downlink_frames(lab_o)
    sent = {}
    for f in frames:
        ip = bytes(f[IP])
        ip = ip[:struct.unpack("!H", ip[2:4])[0]]
        sent[ttl_minus_one(ip)] = ip
    got, dd, st = send(lab, 1, [bytes(f) for f in frames])
    assert dd.fwd_packets == N_EACH * len(frames) and not dd.drops_by_reason and not dd.passed_by_reason
    if departs():
        check_encap_as_departs(lab_o, frames, got, departs(), qfi=QFI)
        return
    seen = collections.Counter()
    for g in got:
        inner = O.gpdu_inner(g)
        assert inner in sent, "inner packet is not one we sent (with TTL-1): " + _show(g)
        ip = sent[inner]
        df = bool(ip[6] & 0x40)
        # the outer id: 0 with DF, else the PGW-U's counter (any value), taken from the frame
        want = O.encap_expected(ip, smac=p0.dut_mac, dmac=p0.mac, vlan=None, local=a.dut_access,
                                sgw=a.sgw(q), teid=a.sgw_teid(q), csum=True,
                                ip_id=0 if df else Ether(g)[IP].id, qfi=QFI)
        assert g == want, O.mismatch_report(want, g)
        assert O.outer_udp_ok(g) and O.ip_hdr_ok(g[14:34]), _show(g)
        psc = Ether(g)[GTPPDUSessionContainer]                  # the same, through Scapy's eyes
        assert (Ether(g)[GTP_U_Header].E, psc.type, psc.QFI) == (1, 0, QFI), _show(g)
        seen[inner] += 1
    assert seen == collections.Counter({k: N_EACH for k in sent})


def qfi_uplink_with_its_psc_forwarded(lab):
    lab_o = lab[0]
    p1 = lab_o.ports[1]
    psc = packets.pdu_session_container(qfi=QFI, uplink=True)
    frames = [qfi_uplink(lab_o, [psc], 0, size=128),
              qfi_uplink(lab_o, [psc], 1, size=1518, l4="tcp", seq=11),
              qfi_uplink(lab_o, [packets.ext_header(0x40, b"\x00\x00"), psc], 2, size=300)]
    # the last one has a UDP Port extension header before the PSC
    aborted = frames[2:] if departs().get("gtp_ext_headers") == "psc only, else aborted" else []
    keep = (lambda ip: ip) if departs().get("inner_ttl") == "kept" else ttl_minus_one
    expected = collections.Counter()
    for f in frames[:len(frames) - len(aborted)]:
        expected[bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + keep(O.gpdu_inner(bytes(f)))] += N_EACH
    got, dd, st = send(lab, 0, [bytes(f) for f in frames])
    assert dd.fwd_packets == N_EACH * (len(frames) - len(aborted)) and not dd.passed_by_reason
    assert dd.drops_by_reason == ({"aborted": N_EACH * len(aborted)} if aborted else {})
    assert_frames(got, expected)


def qfi_uplink_without_its_qfi_not_forwarded_and_counted(lab):
    """No PDU Session Container, an UL PSC with another QFI, a DL PSC (PDU type 0) with the QFI:
    not forwarded, nothing comes back, each counted drop_qfi_mismatch."""
    lab_o = lab[0]
    frames = [qfi_uplink(lab_o, [], 0, size=128),
              qfi_uplink(lab_o, [packets.pdu_session_container(qfi=(QFI + 1) % 64, uplink=True)], 1, size=200),
              qfi_uplink(lab_o, [packets.pdu_session_container(qfi=QFI, uplink=False)], 2, size=200)]
    got, dd, st = send(lab, 0, [bytes(f) for f in frames])
    if departs().get("uplink_qfi") == "not checked":
        # forwarded as if they carried it
        assert len(got) == N_EACH * len(frames) and dd.fwd_packets == N_EACH * len(frames)
        keep = (lambda ip: ip) if departs().get("inner_ttl") == "kept" else ttl_minus_one
        assert collections.Counter(O.ip_payload(g) for g in got) == collections.Counter(
            {keep(O.gpdu_inner(bytes(f))): N_EACH for f in frames})
        return
    assert got == [], _show(got[0])
    assert dd.fwd_packets == 0 and not dd.passed_by_reason
    assert dd.drops_by_reason == {"drop_qfi_mismatch": N_EACH * len(frames)}


# ---------------------------------------------------------------------------------------- outer fragments
# docs/dataplane.md "Outer fragments": the lab runs `pgwu reassemble`; xdp_access passes outer
# fragments to the kernel (pass_outer_frag), which reassembles them for the reassembler, which
# forwards the inner packet; a downlink packet without DF too big for the access MTU once
# encapsulated is passed to the kernel encapsulated (pass_fib_other), which fragments it.

def uplink_outer_fragments_reassembled_and_forwarded(lab):
    """N_EACH uplink G-PDUs (each its own outer IP id), each in outer IPv4 fragments sent in order,
    1 ms apart: N_EACH inner packets on SGi, TTL-1, byte for byte; every fragment counted
    pass_outer_frag, taken by the kernel for reassembly, and every datagram forwarded by
    `pgwu reassemble`. The socket path: the kernel reassembles for its UDP socket, each datagram
    forwarded once (ul_fwd), the other fragments counted as absorbed (kernel_ip_reasm_absorbed)."""
    from scapy.layers.inet import fragment
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    if departs():
        check_outer_fragments_as_departs(lab, departs())
        return
    sock = socket_path(lab)
    assert sock or reassembler_pid(lab_o), f"the lab did not start pgwu reassemble: {lab_o.state.get('reassembler')}"
    frames, expected = [], collections.Counter()
    for c in range(N_EACH):
        g = packets.gpdu(a.local_teid(1), a.ue(1), a.pdn(8), size=1400, inner_id=0x100 + c, outer_id=0x5000 + c,
                         outer_src=a.sgw(1), outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac)
        frs = fragment(g[IP], fragsize=512)
        assert len(frs) == 3 and all(f.flags.MF for f in frs[:-1]) and frs[-1].frag > 0
        frames += [bytes(Ether(src=p0.mac, dst=p0.dut_mac) / f) for f in frs]
        expected[bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + ttl_minus_one(O.gpdu_inner(bytes(g)))] += 1
    assert len(expected) == N_EACH
    got, dd, st = send(lab, 0, frames, copies=1, spaced_us=1000)
    k = st["kernel"]
    assert not dd.drops_by_reason
    if sock:
        assert dd.fwd_packets == N_EACH
        assert dd.passed_by_reason == {"kernel_ip_reasm_absorbed": len(frames) - N_EACH}
    else:
        assert dd.fwd_packets == 0 and dd.passed_by_reason == {"pass_outer_frag": len(frames)}
        assert (k["reasm_received"], k["reasm_forwarded"]) == (N_EACH, N_EACH), k
    assert (k["ReasmReqds"], k["ReasmOKs"], k["ReasmFails"]) == (len(frames), N_EACH, 0), k
    assert_frames(got, expected)


def check_outer_fragments_as_departs(lab, d: dict) -> None:
    """A UPF that does not reassemble (d["outer_fragments"]: "first decapsulated alone"): of each
    G-PDU's 3 outer fragments, the first, which holds UDP and GTP-U, leaves SGi as what follows its
    GTP-U header (a truncated inner packet: its length field is the whole packet's), TTL as d says;
    the two others are passed to the kernel (not GTP-U to its parser), which takes them for
    reassembly and never completes one."""
    from scapy.layers.inet import fragment
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    assert d["outer_fragments"] == "first decapsulated alone"
    keep = (lambda ip: ip) if d.get("inner_ttl") == "kept" else ttl_minus_one
    frames, expected = [], collections.Counter()
    for c in range(N_EACH):
        g = packets.gpdu(a.local_teid(1), a.ue(1), a.pdn(8), size=1400, inner_id=0x100 + c, outer_id=0x5000 + c,
                         outer_src=a.sgw(1), outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac)
        frs = fragment(g[IP], fragsize=512)
        assert len(frs) == 3
        frames += [bytes(Ether(src=p0.mac, dst=p0.dut_mac) / f) for f in frs]
        first_payload = bytes(frs[0])[20 + 8 + 8:]            # after outer IPv4, UDP, GTP-U
        expected[bytes(Ether(dst=p1.mac, src=p1.dut_mac, type=0x0800)) + keep(first_payload)] += 1
    got, dd, st = send(lab, 0, frames, copies=1, spaced_us=1000)
    k = st["kernel"]
    assert dd.fwd_packets == N_EACH and not dd.drops_by_reason
    assert dd.passed_by_reason == {"pass_no_match": 2 * N_EACH}
    assert (k["ReasmReqds"], k["ReasmOKs"]) == (2 * N_EACH, 0), k
    assert collections.Counter(got) == expected, [_show(x) for x in got]
    for x in got:
        ip = Ether(x)[IP]
        assert ip.len > len(x) - 14, "the inner length field is the whole packet's: " + _show(x)


def _dut_mtu(lab, ifname: str) -> int:
    import json
    out = subprocess.run(["ip", "-n", lab.dut_ns, "-j", "link", "show", "dev", ifname],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["mtu"]


def downlink_too_big_leaves_in_outer_fragments(lab):
    """A downlink packet without DF as big as the SGi MTU allows is too big for the access MTU once
    encapsulated (+36): it leaves in outer fragments (the kernel's: each within the access MTU, the
    same id, MF on all but the last, contiguous offsets), which Scapy's defragment() makes into the
    G-PDU the oracle builds, byte for byte, except that the kernel forwarded it once more (outer
    TTL 63, checksum redone). The socket path: the raw socket refuses it (EMSGSIZE), it is sent
    again through a socket whose IP output fragments it: counted forwarded (dl_fwd), outer TTL 64."""
    from scapy.layers.inet import defragment
    lab_o = lab[0]
    a, p0, p1 = lab_o.addressing, lab_o.ports[0], lab_o.ports[1]
    mtu_acc, mtu_sgi = _dut_mtu(lab_o, p0.dut_ifname), _dut_mtu(lab_o, p1.dut_ifname)
    size = mtu_sgi                                     # the largest inner packet SGi carries
    assert size + 36 > mtu_acc, f"access MTU {mtu_acc} takes a {size}-octet packet encapsulated: no fragments"
    f = packets.downlink_ip(a.ue(0), a.pdn(9), size + 18, src_mac=p1.mac, dst_mac=p1.dut_mac)
    ip = bytes(f[IP])
    assert len(ip) == size and not ip[6] & 0x40
    if departs():
        # passed to the kernel already encapsulated, with the outer DF the UPF sets: dropped there
        reason = departs()["downlink_too_big"]
        back: list = []
        got, dd, st = send(lab, 1, [bytes(f)], returned=back)
        k = st["kernel"]
        assert got == [] and back == [] and dd.fwd_packets == 0 and not dd.drops_by_reason
        assert dd.passed_by_reason == {reason: N_EACH}
        assert (k["FragOKs"], k["FragCreates"], k["ForwDatagrams"]) == (0, 0, 0), k
        return
    per_frag = (mtu_acc - 20) // 8 * 8
    n_frags = -(-(size + 16) // per_frag)              # outer payload: UDP 8 + GTP-U 8 + the packet
    got, dd, st = send(lab, 1, [bytes(f)])
    k = st["kernel"]
    sock = socket_path(lab)
    assert not dd.drops_by_reason
    if sock:
        assert dd.fwd_packets == N_EACH and not dd.passed_by_reason
    else:
        assert dd.fwd_packets == 0 and dd.passed_by_reason == {"pass_fib_other": N_EACH}
    assert (k["FragOKs"], k["FragCreates"], k["FragFails"]) == (N_EACH, N_EACH * n_frags, 0), k
    assert len(got) == N_EACH * n_frags
    by_id = collections.defaultdict(list)
    for g in got:
        e = Ether(g)
        o = e[IP]
        assert (e.dst, e.src, e.type) == (p0.mac, p0.dut_mac, 0x0800), _show(g)
        assert len(g) - 14 <= mtu_acc and o.len == len(g) - 14, _show(g)
        assert (o.src, o.dst, o.proto, o.ttl, o.flags.DF) == (a.dut_access, a.sgw(0), 17, 64 if sock else 63,
                                                              False), _show(g)
        assert O.ip_hdr_ok(g[14:34]), "fragment's IPv4 checksum: " + _show(g)
        by_id[o.id].append(e)
    assert len(by_id) == N_EACH, sorted(by_id)
    for ident, frs in by_id.items():
        frs.sort(key=lambda e: e[IP].frag)
        offs = [e[IP].frag * 8 for e in frs]
        assert offs == [i * per_frag for i in range(n_frags)], offs
        assert [bool(e[IP].flags.MF) for e in frs] == [True] * (n_frags - 1) + [False]
        whole = defragment(frs)
        assert len(whole) == 1
        g = bytes(whole[0])
        want = O.encap_expected(ip, smac=p0.dut_mac, dmac=p0.mac, vlan=None, local=a.dut_access, sgw=a.sgw(0),
                                teid=a.sgw_teid(0), csum=True, ip_id=ident)
        if not sock:
            want = want[:14] + ttl_minus_one(want[14:])     # the kernel forwarded the outer packet
        assert g == want, O.mismatch_report(want, g)
        assert O.outer_udp_ok(g)
