"""TRex's side of conservation on a real network: the frames of a trial that are not the test's,
counted apart by kind (issue 34, item 3; gtplab/measure/conservation.py, Background).

TRex's port counters count every frame: `ipackets` of the receiving port holds the test's frames and
whatever else arrived (the DUT host's ARP, ND and router solicitations, a switch's LLDP, a stray
datagram). TRex's per-stream counters cannot tell the test's frames at the receiving port either:
a plain stream is known by its IPv4 id, which GTP-U encapsulation and decapsulation replace, and a
latency stream runs at TRex's own rate (gtplab/measure/runner.py). So the background is what is
measured, and the test's frames are the rest:

- During each trial a TRex capture runs on both ports with a BPF filter that selects every frame
  which is *not* the test's (capture_filter: the test's frames at the receiving port are known by
  their stream's fixed fields after the DUT: a decapsulated uplink packet by its L4 destination
  port, an encapsulated downlink packet as a GTP-U G-PDU; non-first IPv4 fragments are the test's).
  TRex's receive core runs the filter in software; only background is stored, so the capture's
  memory is the background's, not the trial's.
- count() sorts the captured frames by kind (classify: the embedded engine's kinds,
  gtplab/traffic/engine/stats.py BG_KINDS, by the same rules as its tg_classify) and by where they
  went. A frame captured on the receiving port is background received (Background.gen_rx). With
  af_packet ports TRex also receives what its host's own stack sends out of a port (measured: an
  ARP request written to the interface by another socket is TRex's `ipackets` + 1): such a frame,
  known by the port's own source MAC, went to the DUT as well, into its other port
  (to_dut_other) from the receiving port, into its ingress port (to_dut_in) from the transmitting
  port. TRex itself sends only the streams (dest_mac mode, no service mode).

Limits (docs/trex.md, "Background frames"): a background frame that matches the test's filter (a
datagram to the test's destination port, a G-PDU the DUT sends on its own) is counted as the test's
and shows as "unexplained"; a frame sent on the generator host with another source MAC is taken as
received; with DPDK ports the host's stack cannot send on the port at all, and frames that reach
the DUT from elsewhere (a switch's LLDP towards the DUT) are not seen by TRex: they are unexplained
on the DUT's side. A capture that fills (CAPTURE_LIMIT) leaves frames of unknown port and kind:
count() reports them as an error, never as the test's.

No Scapy here: gtplab/traffic/trex/worker.py's process may not import it (its TRex bundles another).
"""

from __future__ import annotations

import base64
from typing import Any

# the embedded engine's kinds, in its order (gtplab/traffic/engine/stats.py BG_KINDS; a test keeps
# the two equal without importing the engine here)
KINDS = ("arp", "lldp", "nd", "icmp6", "ipv6", "ipv4", "udp", "other")
CAPTURE_LIMIT = 10000          # frames a trial's background capture holds
CAPTURE_SNAPLEN = 128          # bytes kept of each (classify reads at most 72)
GTPU_PORT = 2152
DEFAULT_DPORT = 5001           # trex_profiles/gtpu_common.py --dport


def classify(frame: bytes) -> str:
    """What a frame is (one of KINDS): the engine's tg_classify (gtplab/traffic/engine/bpf), in
    Python. Ethernet, then ARP / LLDP / IPv4 protocol / IPv6 next header, one hop-by-hop header
    skipped, then the ICMPv6 type (133..137: router and neighbour discovery, redirect)."""
    h, n = frame, len(frame)
    if n < 14:
        return "other"
    proto = h[12] << 8 | h[13]
    if proto == 0x0806:
        return "arp"
    if proto == 0x88CC:
        return "lldp"
    if proto == 0x0800:
        if n < 14 + 20:
            return "ipv4"
        return "udp" if h[14 + 9] == 17 else "ipv4"
    if proto != 0x86DD:
        return "other"
    if n < 14 + 40:
        return "ipv6"
    nh, off = h[14 + 6], 14 + 40
    if nh == 0:                        # hop-by-hop: its next header; its length in 8-byte units after 8
        if n < off + 2:
            return "ipv6"
        nh = h[off]
        off += 8 + 8 * h[off + 1]
    if nh == 17:
        return "udp"
    if nh != 58:
        return "ipv6"
    if off >= n or off >= 72:
        return "icmp6"
    return "nd" if 133 <= h[off] <= 137 else "icmp6"


def test_frames_filter(direction: str, dport: int = DEFAULT_DPORT) -> str:
    """A BPF expression (pcap-filter syntax) for the test's frames as they reach TRex's receiving
    port: uplink, the UE's packet after decapsulation (UDP or TCP to the stream's destination port;
    the source port varies across IPv6 SGWs); downlink, the PGW-U's G-PDU (outer UDP to 2152, GTP
    message type 255; IPv6 outer: ip6[40 + 9], with no extension header). An outer IPv4 fragment
    after the first carries no ports: the test's (the DUT fragments, nothing else on the link does)."""
    frag = "(ip and ip[6:2] & 0x1fff != 0)"
    if direction == "uplink":
        t = f"((udp or tcp) and dst port {int(dport)}) or {frag}"
    elif direction == "downlink":
        t = (f"(ip and udp dst port {GTPU_PORT} and udp[9] = 255) or "
             f"(ip6 and ip6[6] = 17 and udp dst port {GTPU_PORT} and ip6[49] = 255) or {frag}")
    else:
        raise ValueError(f"direction {direction!r}")
    return f"({t}) or (vlan and ({t}))"


def capture_filter(direction: str, dport: int = DEFAULT_DPORT) -> str:
    """The background capture's filter: every frame that is not the test's."""
    return f"not ({test_frames_filter(direction, dport)})"


def count(capture: dict[str, Any], tx: int, rx: int, macs: dict[int, str]) -> dict[str, Any]:
    """The background of a trial from its capture (worker.capture_fetch: {"status": TRex's capture
    status, "pkts": [{"port", "origin", "binary" (base64)}]}): {"gen_rx", "to_dut_in",
    "to_dut_other": {kind: frames} (kinds seen only), "tx_port_rx": frames the transmitting port
    received from the DUT side (in no balance), "errors": [...]}. macs: each port's own MAC."""
    out: dict[str, Any] = {"gen_rx": {}, "to_dut_in": {}, "to_dut_other": {}, "tx_port_rx": {}, "errors": []}
    own = {p: (m or "").lower() for p, m in macs.items()}
    for p in capture.get("pkts") or []:
        if p.get("origin", "RX") != "RX":
            continue
        frame = base64.b64decode(p["binary"])
        kind = classify(frame)
        src = ":".join(f"{b:02x}" for b in frame[6:12]) if len(frame) >= 12 else ""
        port = int(p["port"])
        mine = src == own.get(port)
        if port == rx:
            places = ["gen_rx", "to_dut_other"] if mine else ["gen_rx"]
        elif port == tx:
            places = ["to_dut_in"] if mine else ["tx_port_rx"]
        else:
            continue
        for place in places:
            out[place][kind] = out[place].get(kind, 0) + 1
    st = capture.get("status") or {}
    lost = int(st.get("matched", 0)) - len(capture.get("pkts") or [])
    if lost > 0:
        out["errors"].append(f"{lost} background frames matched beyond the capture's limit "
                             f"{st.get('limit')}: their port and kind are not known")
    return out
