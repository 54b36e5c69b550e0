"""Where a UPF is known to depart from the specs or from what gtplab expects of a UPF (what the PGW-U
does, which the cases are written for): per UPF, one fact per departure, each with its value (what
the cases' expectations read) and its cause (why, with the clause it departs from). The PGW-U has
none. A case whose output is exactly what the UPF's facts predict is reported "departs: <cause>",
not pass; one whose output is neither is a failure. A UPF that stops departing passes (the
spec's output), and its row here is then stale: tests/conformance/test_conformance.py, which
expects each case's result, fails until the row is changed, with the evidence.

eUPF a8d774a (../shared/eupf/README.md), seen in this lab; its sources at that commit say why
(cmd/ebpf/xdp/n3n6_entrypoint.c, utils/routing.h, utils/gtp_utils.h). Open5GS's UPF 8f25f3b
(../shared/open5gs/README.md), likewise (src/upf/gtp-path.c, lib/gtp/, lib/tun/tunio.c); what is
not its code (802.1Q, which it never sees) is in NOT_SUPPORTED, with why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Departure:
    value: object
    cause: str


DEPARTS: dict[str, dict[str, Departure]] = {
    "pgwu": {},
    "eupf": {
        "inner_ttl": Departure(
            "kept", "the inner TTL is not decremented, either way (RFC 1812 5.3.1; eUPF's routing.h has "
                    "_decr_ttl commented out): a TTL 1 packet goes on as TTL 1"),
        "outer_udp_sport": Departure(
            2152, "the outer UDP source port is always 2152 (allowed by TS 29.281 4.4.2.0; the PGW-U "
                  "spreads flows over 49152-65535)"),
        "outer_udp_csum": Departure(
            0, "no outer UDP checksum (0, allowed in IPv4 by RFC 768), whatever the session"),
        "outer_ip": Departure(
            {"flags": 2, "id": 0, "tos": 0, "ttl": 64},
            "the outer IPv4 header has DF set, id 0, TOS 0: the inner DSCP is not copied out (RFC 2983's "
            "uniform model, which the PGW-U follows)"),
        "dl_psc_qfi": Departure(
            0, "every downlink G-PDU carries a DL PDU Session Container (E=1), with QFI 0 when the session "
               "has none (a 4G bearer gets a 5G header)"),
        "pdr_without_qer": Departure(
            "applies the first QER stored",
            "a PDR without a QER applies eUPF's QER number 0, the first QER it stored, whichever session's: "
            "once a QFI session exists, every bearer without a QER is marked with its QFI"),
        "vlan": Departure(
            "pass_no_match", "802.1Q-tagged frames (either side) are not parsed: passed to the kernel, which "
                             "has no VLAN device and drops them"),
        "unknown_teid": Departure(
            ("pass_no_match", (3, 3)),
            "a G-PDU for an unknown TEID gets no Error Indication (TS 29.281 7.3.1): it is passed to the "
            "kernel, which answers ICMP port unreachable (nothing listens on 2152)"),
        "spoofed_source": Departure(
            "forwarded", "the uplink PDR's UE address (TS 29.244 5.2.1 PDI) is not matched: the TEID only, so "
                         "another UE's packets in a bearer go through"),
        "unknown_ue": Departure(
            ("pass_no_match", (3, 0)),
            "a downlink packet for no UE is passed to the kernel, which has no route: ICMP net unreachable"),
        "uplink_qfi": Departure(
            "not checked", "the uplink PDR's QFI (TS 29.244 8.2.89) is not checked: G-PDUs without it, with "
                           "another or with a DL container are forwarded"),
        "outer_fragments": Departure(
            "first decapsulated alone",
            "outer IPv4 fragments are not reassembled (TS 29.281 4.4.2.0 via RFC 791): the first is "
            "decapsulated alone, a truncated inner packet whose length field is the whole's, the others "
            "passed to the kernel"),
        "downlink_too_big": Departure(
            "pass_fib", "a downlink packet too big for N3 once encapsulated is passed to the kernel already "
                        "encapsulated, with DF: nothing leaves (neither fragments nor an ICMP error)"),
        "gtp_ext_headers": Departure(
            "psc only, else aborted",
            "only the PDU Session Container is read (TS 29.281 5.2.1): a G-PDU with another extension header "
            "in its chain (UDP Port 0x40, comprehension not required) is XDP_ABORTED"),
        # seen by gtplab conformance in this lab (2026-11-29, the packets in its cases.jsonl)
        "unknown_ext_header": Departure(
            "ignored", "an extension header that must be comprehended and is not known (0xC1) is skipped: the "
                       "G-PDU is forwarded, no Supported Extension Headers Notification (TS 29.281 5.2.1, 7.2.3)"),
        "echo_response": Departure(
            "no Recovery IE, no UDP checksum",
            "the Echo Response carries no Recovery IE (mandatory in TS 29.281 7.2.2, restart counter 0) and "
            "UDP checksum 0"),
        "ipv6": Departure(
            ("pass", (1, 0)),
            "IPv6 user packets are not forwarded (eUPF's issue #293: the PDRs of IPv6 UEs are not applied), "
            "though it accepts IPv4v6 sessions: an uplink G-PDU with an IPv6 T-PDU is passed to the kernel "
            "(pass_fib), which routes no IPv6 from N3; a downlink IPv6 packet, for a session's /64 or not, is "
            "passed to the kernel (pass_no_match), which has no route to the UE prefixes: ICMPv6 Destination "
            "Unreachable 1/0 from the N6 address"),
        "end_marker": Departure(
            ("pass_no_match", (3, 3)),
            "an End Marker (TS 29.281 7.3.2) is not taken as GTP-U signalling: passed to the kernel, which "
            "answers ICMP port unreachable (nothing listens on 2152)"),
    },
    # Open5GS's UPF 8f25f3b (../shared/open5gs/README.md): seen by gtplab conformance in this lab
    # (2026-11-29, the packets in its cases.jsonl); why, from its sources at that commit
    # (git show 8f25f3b:PATH). It sends through the kernel's UDP socket bound to N3:2152 and reads
    # and writes user packets through a TUN device: the outer IPv4/UDP header is the kernel's.
    "open5gs": {
        "outer_udp_sport": Departure(
            2152, "every G-PDU leaves from UDP port 2152, the N3 socket's (allowed by TS 29.281 4.4.2.0; "
                  "lib/pfcp/path.c:431 sends on far->gnode->sock, the GTP-U server socket, "
                  "lib/gtp/path.c:63)"),
        "outer_ip": Departure(
            {"flags": 2, "id": "kernel", "tos": 0, "ttl": 64},
            "the outer IPv4 header is the kernel's socket default: DF set (path MTU discovery), the "
            "kernel's id, TOS 0 (the inner DSCP not copied: RFC 2983's pipe model, allowed; the PGW-U "
            "copies it), TTL 64 (lib/gtp/path.c:151 sendto on the N3 socket, no IP_TOS set): allowed "
            "choices of the sender"),
        "max_packet": Departure(
            2032, "packets over 2032 octets are cut: its buffers are OGS_MAX_PKT_LEN 2048 (lib/core/"
                  "ogs-macros.h:211) less 16 of headroom; uplink, recvfrom() into 2032 octets "
                  "(src/upf/gtp-path.c:946-951) cuts a bigger G-PDU's T-PDU, which the kernel drops "
                  "(its length field says more): not forwarded; downlink, read() from the TUN device into "
                  "2032 octets (lib/tun/tunio.c:32-37) cuts the packet, forwarded in a G-PDU with DF, its "
                  "IP length field the whole's: neither fragmented nor answered with ICMP 3/4 (RFC 791, "
                  "RFC 1191). Open5GS's gap"),
        "unknown_teid": Departure(
            ("silent after start", 11),
            "no Error Indication for an unknown TEID during association_interval after its start (11 s: "
            "max(3 s, the 10 s message duration + 1 s), lib/app/ogs-config.c:396; src/upf/gtp-path.c:408, "
            "TS 23.527 4.3.2's configurable period after a restart); after it, an Error Indication "
            "(lib/gtp/v2/path.c:239-279) with the unknown TEID in its header (the PGW-U puts 0) and a "
            "UDP Port extension header of port 0 (TS 29.281 5.2.2.1: the G-PDU's source port), from the "
            "socket (DF, the kernel's id)"),
        "unknown_ext_header": Departure(
            "ignored", "an extension header that must be comprehended and is not known (0xC1) is skipped "
                       "(lib/gtp/util.c:122 default: break): the G-PDU is forwarded, no Supported Extension "
                       "Headers Notification (TS 29.281 5.2.1, 7.2.3). Open5GS's gap"),
        "echo_response": Departure(
            "DF set, the kernel's id",
            "the Echo Response is the spec's (Recovery 0, src/upf/gtp-path.c:312-320) sent from the socket: "
            "DF set and the kernel's IPv4 id (allowed)"),
        "ttl_expired": Departure(
            "the kernel's",
            "the ICMP Time Exceeded is the DUT kernel's, not Open5GS's (it never reads the TTL: the kernel "
            "routing N6 <-> its TUN device decrements it): TOS 0xc0, the kernel's id, quoting the whole "
            "packet up to 576 octets (RFC 1812 4.3.2.3); downlink from the N6 address, uplink to the UE "
            "through the TUN device, so Open5GS tunnels it as any downlink packet (from 10.201.0.1, the "
            "address the kernel picks). IPv6 likewise: the kernel's ICMPv6 Time Exceeded 3/0, the same "
            "octets as the PGW-U's but the kernel's flow label (RFC 6437); downlink from the N6 address "
            "(fd47:7472::1), uplink from the address its source selection picks for the UE's prefix, which "
            "only the TUN device routes and which has none of its own (RFC 6724: the N3 address "
            "fd47:7473::1 when the lab gives it one, else the N6 address), in a G-PDU from the socket (DF, "
            "the kernel's id, a UDP checksum)"),
        "packet_too_big": Departure(
            "the kernel's",
            "the ICMPv6 Packet Too Big of an uplink packet over the N6 route's MTU is the DUT kernel's, not "
            "Open5GS's (it writes the T-PDU to its TUN device; the kernel routing it to N6 finds the MTU, "
            "RFC 8200 5): the same octets as the PGW-U's (2/0, the route's MTU, quoting up to 1280) but the "
            "kernel's flow label and the source its selection picks for the UE's prefix (fd47:7473::1, as "
            "for Time Exceeded), routed to the UE through the TUN device and tunnelled by Open5GS from its "
            "socket (DF, the kernel's id, a UDP checksum). Downlink it has no such answer: a packet too big "
            "for N3 once encapsulated leaves in outer IPv4 fragments (the kernel fragments the socket's "
            "datagram under a locked route MTU), no Packet Too Big: that case fails"),
    },
}

# Cases a UPF cannot be judged on, with why: not a departure of the UPF's (not its code), not a pass.
NOT_SUPPORTED: dict[str, dict[str, str]] = {
    "open5gs": {
        "vlan": "Open5GS sees no Ethernet frame (GTP-U from a UDP socket, N6 through a TUN device): an 802.1Q "
                "tag is the host's (a VLAN device, which the lab's DUT namespace does not have, so the "
                "kernel drops tagged frames); a VLAN device would test the kernel's 8021q, not Open5GS",
    },
}


def upf_key(cfg) -> str:
    """Which row of DEPARTS a lab config's UPF is: the PGW-U (XDP or socket path) "pgwu", an external
    UPF the first word of its dut.name lowercased ("eUPF a8d774a" -> "eupf"), else the config's name."""
    if cfg.dut_mode in ("pgwu", "socket"):
        return "pgwu"
    name = (cfg.dut_name or cfg.name or "").split()
    return name[0].lower() if name else "upf"


def facts(upf: str) -> dict:
    """The UPF's departures as {fact: value} (what the expectations read); {} for none known."""
    return {k: d.value for k, d in DEPARTS.get(upf, {}).items()}


def not_supported(upf: str, keys) -> str | None:
    """Why a case reading these facts cannot be judged on this UPF (NOT_SUPPORTED), or None."""
    ns = NOT_SUPPORTED.get(upf, {})
    return next((ns[k] for k in keys if k in ns), None)


def causes(upf: str, keys) -> list[str]:
    """The causes of the UPF's departures among keys, in the table's order."""
    d = DEPARTS.get(upf, {})
    return [f"{k}: {d[k].cause}" for k in d if k in keys]
