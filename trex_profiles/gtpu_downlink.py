"""Downlink: plain IPv4 from the packet data network to the UEs (TRex port 1, SGi side).

    Ether [/ 802.1Q vlan] / IPv4 pdn -> ue / UDP|TCP / payload

The PGW-U looks up the destination (a UE) and tunnels the packet to the bearer's SGW, so the
destinations are exactly the UEs of bearers 0..flows-1 (ue_base + i, gtpu_common.bearer); `gtplab
bearers --profile downlink` writes those bearers for the same tunables.

Field engine (multi mode), three independent incrementing variables:
- "bearer" (i = 0..flows-1): IPv4 destination = ue_base + i
- "src" (0..pdn_addrs-1): IPv4 source = pdn_base + src, from the PDN range 198.18.0.0/15
- "vlan" (0..vlans-1, only with --vlans > 1): the 12-bit VLAN id of the 802.1Q TCI
  (write_mask_flow_var with mask 0x0fff: priority and DEI bits stay as built)
then STLVmFixChecksumHw at the IPv4 header fixes the IPv4 header and the UDP/TCP checksum.

--ip 6 (issue 32): plain IPv6 from a server of fd47:7471::/64 (host 1 + src) to bearer i's UE
fd47:7470:XXXX:YYYY::1 (its /64: XXXX:YYYY = i, written by "bearer" into the destination's bits
32..63), the UDP/TCP checksum by STLVmFixChecksumHw at the IPv6 header (mandatory over IPv6,
RFC 8200 8.1); --ip 4v6 sends one stream of each family.

Tunables: `-t --help`, or docs/profiles.md. Load it from the directory it lives in (it imports
gtpu_common.py next to it).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import gtpu_common as common  # noqa: E402

from trex.stl.api import (  # noqa: E402
    CTRexVmInsFixHwCs, STLVmFixChecksumHw, STLVmFlowVar, STLVmWrFlowVar, STLVmWrMaskFlowVar)
import trex.stl.api as stl  # noqa: E402
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402


class GtpuDownlink(object):
    profile = "downlink"

    def __init__(self):
        self.args = None

    def packet(self, a, payload_len, ip=4):
        """Bearer 0's packet from the first PDN address (IPv6: server 1), every checksum valid."""
        _, ue, _, _ = common.bearer(a, 0)
        pkt = Ether(src=common.SRC_MAC, dst=common.DST_MAC)
        if a.vlans:
            pkt = pkt / Dot1Q(prio=0, vlan=a.vlan_base)
        if a.l4 == "udp":
            l4 = UDP(sport=a.sport, dport=a.dport)
        else:
            l4 = TCP(sport=a.sport, dport=a.dport, flags="A", seq=1, ack=1)
        if ip == 6:
            l3 = IPv6(src=common.server6_addr(1), dst=common.ue6_addr(0), hlim=64)
        else:
            l3 = IP(src=common.ip(a.pdn_base), dst=common.ip(ue), ttl=64)
        return pkt / l3 / l4 / Raw(common.payload(payload_len))

    def instructions(self, a, ip=4):
        """Field-engine program, fresh objects for every stream (TRex compiles them in place).
        IPv6: "bearer" into the UE prefix's XXXX:YYYY (destination + 4), "src" into the low 32
        bits of the server's address (source + 12, add 1)."""
        l4 = "UDP" if a.l4 == "udp" else "TCP"
        l4_type = CTRexVmInsFixHwCs.L4_TYPE_UDP if a.l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
        l3 = common.ETH_LEN + (common.VLAN_LEN if a.vlans else 0)
        if ip == 6:
            dst, dst_add = l3 + 24 + 4, 0
            src, src_add = l3 + 8 + 12, 1
        else:
            dst, dst_add = "IP.dst", common.s32(a.ue_base)
            src, src_add = "IP.src", common.s32(a.pdn_base)
        vm = []
        if a.flows > 1:
            vm += [STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                op="random" if a.order == "random" else "inc"),
                   STLVmWrFlowVar(fv_name="bearer", pkt_offset=dst, add_val=dst_add)]
        if a.flow_mode == "multi" and a.pdn_addrs > 1:
            vm += [STLVmFlowVar(name="src", min_value=0, max_value=a.pdn_addrs - 1, size=4,
                                op="inc"),
                   STLVmWrFlowVar(fv_name="src", pkt_offset=src, add_val=src_add)]
        if a.flow_mode == "multi" and a.vlans > 1:
            vm += [STLVmFlowVar(name="vlan", min_value=0, max_value=a.vlans - 1, size=2, op="inc"),
                   # the TCI is the first field of the 802.1Q header, right after the Ethernet one
                   STLVmWrMaskFlowVar(fv_name="vlan", pkt_offset=common.ETH_LEN, pkt_cast_size=2,
                                      mask=0x0FFF, shift=0, add_value=a.vlan_base)]
        if vm or a.stats == "latency":
            vm.append(STLVmFixChecksumHw(l3_offset="IPv6" if ip == 6 else "IP", l4_offset=l4,
                                         l4_type=l4_type))
        return vm

    def get_streams(self, direction=0, tunables=(), **kwargs):
        """direction is ignored: this profile always is the SGi side's traffic (use it on port 1,
        as `start -f gtpu_downlink.py -p 1 -t size=64`)."""
        a = self.args = common.parse(self.profile, tunables, kwargs)
        return common.make_streams(stl, a, lambda size, plen, ip=4: (self.packet(a, plen, ip),
                                                                     self.instructions(a, ip)))


def register():
    return GtpuDownlink()
