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
- --order random: "bearer" is TRex's op=random (the streams' random_seed is --seed), written into
  the TEID and the inner source as above; the outer source gets the low bits of i by a masked write
  (k = i % sgws exactly: sgws a power of two, sgw_base aligned), the inner destination stays
  pdn_base. The inner checksums are fixed by STLVmFixChecksumHw (no software compensation can
  follow a random index).
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
    CTRexVmInsFixHwCs, STLVmFixChecksumHw, STLVmFixIpv4, STLVmFlowVar, STLVmWrFlowVar,
    STLVmWrMaskFlowVar)
import trex.stl.api as stl  # noqa: E402
from scapy.contrib.gtp import GTP_U_Header  # noqa: E402
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402


class GtpuUplink(object):
    profile = "uplink"

    def __init__(self):
        self.args = None

    def packet(self, a, payload_len, l4_csum=None, comp=None):
        """Bearer 0's packet, every checksum valid (outer UDP: 0 unless --outer-udp-csum valid).
        comp: the value of the compensation word (first 4 payload bytes, software checksum);
        l4_csum: the inner L4 checksum field as given instead of computed (outer UDP then too)."""
        teid, ue, sgw, _ = common.bearer(a, 0)
        if a.l4 == "udp":
            l4 = UDP(sport=a.sport, dport=a.dport)
        else:
            l4 = TCP(sport=a.sport, dport=a.dport, flags="A", seq=1, ack=1)
        if l4_csum is not None:
            l4.chksum = l4_csum
        outer_udp = UDP(sport=common.GTPU_PORT, dport=common.GTPU_PORT)
        if a.outer_udp_csum == "zero":
            outer_udp.chksum = 0
        data = common.payload(payload_len)
        if comp is not None:
            data = comp.to_bytes(common.COMP_LEN, "big") + data[common.COMP_LEN:]
        return (Ether(src=common.SRC_MAC, dst=common.DST_MAC)
                / IP(src=common.ip(sgw), dst=common.ip(a.pgw_addr), ttl=64)
                / outer_udp
                / GTP_U_Header(gtp_type=255, teid=teid)
                / IP(src=common.ip(ue), dst=common.ip(a.pdn_base), ttl=64)
                / l4
                / Raw(data))

    def sw_packet(self, a, payload_len):
        """Bearer 0's packet for the software checksum: the compensation word is N-1+d and the
        inner L4 checksum is 0xfffe, d chosen so that this is right."""
        n = a.flows - 1
        first = self.packet(a, payload_len, comp=n)
        c0 = first[GTP_U_Header][IP].payload.chksum
        if c0 is None:
            c0 = (UDP if a.l4 == "udp" else TCP)(bytes(first[GTP_U_Header][IP].payload)).chksum
        # raising the word by d lowers the checksum by d (mod 0xffff); we want 0xfffe, so that
        # 0xfffe - k stays in 1..0xfffe (0xffff and 0 are refused by some checkers for TCP)
        d = (c0 - 0xFFFE) % 0xFFFF
        pkt = self.packet(a, payload_len, l4_csum=0xFFFE, comp=n + d)
        return pkt.__class__(bytes(pkt))

    def instructions(self, a, sw=False):
        """Field-engine program, fresh objects for every stream (TRex compiles them in place).
        sw: keep the inner checksums valid by construction instead of STLVmFixChecksumHw."""
        inner_l4 = "UDP:1" if a.l4 == "udp" else "TCP"
        l4_type = CTRexVmInsFixHwCs.L4_TYPE_UDP if a.l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
        vm = []
        if a.flows > 1 and a.order == "random":
            # a random bearer per packet: the SGW (i % sgws) is the low bits of i (parse() checked
            # that sgws is a power of two and sgw_base a multiple of it); no software checksum
            vm.append(STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                   op="random"))
            vm += [
                STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                               add_val=common.s32(a.teid_base)),
                STLVmWrFlowVar(fv_name="bearer", pkt_offset="IP:1.src",
                               add_val=common.s32(a.ue_base)),
            ]
            if a.sgw_period > 1:
                vm += [STLVmWrMaskFlowVar(fv_name="bearer", pkt_offset="IP.src", pkt_cast_size=4,
                                          mask=a.sgw_period - 1, shift=0),
                       STLVmFixIpv4(offset="IP")]
        elif a.flows > 1:
            vm.append(STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                   op="inc"))
            if a.sgw_period > 1:
                vm.append(STLVmFlowVar(name="sgw", min_value=0, max_value=a.sgw_period - 1, size=4,
                                       op="inc"))
            if sw:
                # in step with bearer/sgw, downwards: N-1-i and P-1-k
                vm.append(STLVmFlowVar(name="bearer_c", min_value=0, max_value=a.flows - 1,
                                       init_value=a.flows - 1, size=4, op="dec"))
                if a.sgw_period > 1:
                    vm.append(STLVmFlowVar(name="sgw_c", min_value=0, max_value=a.sgw_period - 1,
                                           init_value=a.sgw_period - 1, size=2, op="dec"))
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
            if sw:
                comp_off = 78 if a.l4 == "udp" else 90
                d = int.from_bytes(bytes(self._base)[comp_off:comp_off + 4], "big") - (a.flows - 1)
                # word = d + N-1-i: cancels the +i of the inner source
                vm.append(STLVmWrFlowVar(fv_name="bearer_c", pkt_offset=comp_off,
                                         add_val=common.s32(d)))
                if a.sgw_period > 1:
                    # checksum = 0xfffe - k: cancels the +k of the inner destination
                    vm.append(STLVmWrFlowVar(fv_name="sgw_c", pkt_offset=inner_l4 + ".chksum",
                                             add_val=0xFFFE - (a.sgw_period - 1)))
                vm.append(STLVmFixIpv4(offset="IP:1"))
                return vm
        if vm or a.stats == "latency":
            # after the writes (and after TRex's latency header, which lands in the payload)
            vm.append(STLVmFixChecksumHw(l3_offset="IP:1", l4_offset=inner_l4, l4_type=l4_type))
        return vm

    def get_streams(self, direction=0, tunables=(), **kwargs):
        """direction is ignored: this profile always is the access side's traffic (use it on
        port 0, as `start -f gtpu_uplink.py -p 0 -t size=1424`)."""
        a = self.args = common.parse(self.profile, tunables, kwargs)

        def build(size, plen):
            sw = common.sw_checksum(a, plen)
            self._base = self.sw_packet(a, plen) if sw else self.packet(a, plen)
            return self._base, self.instructions(a, sw)
        return common.make_streams(stl, a, build)


def register():
    return GtpuUplink()
