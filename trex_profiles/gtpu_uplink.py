"""Uplink GTP-U: G-PDUs from the SGWs to the PGW-U (TRex port 0, access side).

    Ether / IPv4 sgw -> pgw / UDP 2152 -> 2152 / GTP-U G-PDU teid / IPv4 ue -> pdn / UDP|TCP / payload

Bearer i (gtpu_common.bearer): TEID = teid_base + i, inner source (UE) = ue_base + i,
outer source (SGW) = sgw_base + i % sgws. The PGW-U drops a G-PDU whose inner source is not its
bearer's UE, so every packet must carry a matching (TEID, UE) pair; `gtplab bearers --profile
uplink` writes the bearers for the same tunables.

Field engine (multi mode):
- "bearer" (i = 0..flows-1) is written, with different add values, into the TEID and the inner
  source: one variable, so they can never disagree.
- "sgw" (k = 0..period-1, period = min(sgws, flows), which divides flows) is written into the outer
  source and the inner destination. TRex has no modulo instruction, so k is a second variable of the
  same step: packet n of core c (of C) gets i = (c + nC) mod flows and k = (c + nC) mod period
  (TRex's inc is modular, and split_to_cores gives every core the phase c and step C for both
  variables alike), hence k == i % sgws for every packet on any number of cores.
- outer IPv4 checksum: STLVmFixIpv4 (software). Inner IPv4 and UDP/TCP checksums:
  STLVmFixChecksumHw at the inner IPv4 header (l2_len = 50); TRex's hardware fix covers the IPv4
  header and the L4 checksum of the header it points at.
- outer UDP checksum: zero by default (allowed for GTP-U over IPv4, TS 29.281 5.1). With
  --outer-udp-csum valid it is computed once, for the base packet, and stays valid for every packet
  without a fix instruction (TRex cannot fix an outer UDP checksum in software, and the NIC offload
  is already used for the inner headers): in one's-complement arithmetic (mod 0xffff) the TEID adds
  +i and the inner source +i, which the inner L4 checksum turns into -i; the outer source adds +k
  (pseudo header) and the inner destination +k, which the inner L4 checksum turns into -k; the inner
  IPv4 header always sums to 0. The sum over the outer UDP datagram never changes.

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
    CTRexVmInsFixHwCs, STLVmFixChecksumHw, STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar)
import trex.stl.api as stl  # noqa: E402
from scapy.contrib.gtp import GTP_U_Header  # noqa: E402
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402


class GtpuUplink(object):
    profile = "uplink"

    def __init__(self):
        self.args = None

    def packet(self, a, payload_len):
        """Bearer 0's packet, every checksum valid (outer UDP: 0 unless --outer-udp-csum valid)."""
        teid, ue, sgw, _ = common.bearer(a, 0)
        if a.l4 == "udp":
            l4 = UDP(sport=a.sport, dport=a.dport)
        else:
            l4 = TCP(sport=a.sport, dport=a.dport, flags="A", seq=1, ack=1)
        outer_udp = UDP(sport=common.GTPU_PORT, dport=common.GTPU_PORT)
        if a.outer_udp_csum == "zero":
            outer_udp.chksum = 0
        return (Ether(src=common.SRC_MAC, dst=common.DST_MAC)
                / IP(src=common.ip(sgw), dst=common.ip(a.pgw_addr), ttl=64)
                / outer_udp
                / GTP_U_Header(gtp_type=255, teid=teid)
                / IP(src=common.ip(ue), dst=common.ip(a.pdn_base), ttl=64)
                / l4
                / Raw(common.payload(payload_len)))

    def instructions(self, a):
        """Field-engine program, fresh objects for every stream (TRex compiles them in place)."""
        inner_l4 = "UDP:1" if a.l4 == "udp" else "TCP"
        l4_type = CTRexVmInsFixHwCs.L4_TYPE_UDP if a.l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
        vm = []
        if a.flows > 1:
            vm.append(STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                   op="inc"))
            if a.sgw_period > 1:
                vm.append(STLVmFlowVar(name="sgw", min_value=0, max_value=a.sgw_period - 1, size=4,
                                       op="inc"))
            vm += [
                STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                               add_val=common.s32(a.teid_base)),
                STLVmWrFlowVar(fv_name="bearer", pkt_offset="IP:1.src",
                               add_val=common.s32(a.ue_base)),
            ]
            if a.sgw_period > 1:
                vm += [
                    STLVmWrFlowVar(fv_name="sgw", pkt_offset="IP.src",
                                   add_val=common.s32(a.sgw_base)),
                    STLVmWrFlowVar(fv_name="sgw", pkt_offset="IP:1.dst",
                                   add_val=common.s32(a.pdn_base)),
                    STLVmFixIpv4(offset="IP"),
                ]
        if vm or a.stats == "latency":
            # after the writes (and after TRex's latency header, which lands in the payload)
            vm.append(STLVmFixChecksumHw(l3_offset="IP:1", l4_offset=inner_l4, l4_type=l4_type))
        return vm

    def get_streams(self, direction=0, tunables=(), **kwargs):
        """direction is ignored: this profile always is the access side's traffic (use it on
        port 0, as `start -f gtpu_uplink.py -p 0 -t size=1424`)."""
        a = self.args = common.parse(self.profile, tunables, kwargs)
        return common.make_streams(stl, a, lambda size, plen: (self.packet(a, plen),
                                                               self.instructions(a)))


def register():
    return GtpuUplink()
