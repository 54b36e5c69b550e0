"""Uplink GTP-U: G-PDUs from the SGWs to the PGW-U (TRex port 0, access side).

    Ether / IPv4 sgw -> pgw / UDP 2152 -> 2152 / GTP-U G-PDU teid / IPv4 ue -> pdn / UDP|TCP / payload

Bearer i (gtpu_common.bearer): TEID = teid_base + i (or line i of --teid-file: the TEIDs a UPF
chose over PFCP, written by a value-list variable "teid" in step with "bearer"), inner source (UE) = ue_base + i,
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

--n3 6 (issue 32, GTP-U over IPv6): the outer header is IPv6, sgw6_base + i % sgws -> pgw_addr6,
hop limit 64, and the outer UDP checksum is always valid (mandatory over IPv6, RFC 8200 8.1; --outer-udp-csum
zero is refused): computed by Scapy over the IPv6 pseudo header for the base packet and kept by the
same construction as over IPv4 (the outer source's +k in its low 32 bits, as the IPv4 source's). Every
offset behind the outer header moves by 20 bytes; the field engine writes the outer source's low 32
bits (offset 34) where it wrote the IPv4 source, and there is no outer header checksum to fix.

--ip 6 (issue 32): the user packet is IPv6 (fd47:7470:XXXX:YYYY::/64 of bearer i -> a server of
fd47:7471::/64), gtpu_uplink6 below; --ip 4v6 sends one IPv4 and one IPv6 stream (docs/profiles.md).

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
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402


class GtpuUplink(object):
    profile = "uplink"

    def __init__(self):
        self.args = None

    def outer(self, a):
        """The tunnel's outer IP header of bearer 0: IPv4 (--n3 4) or IPv6 (--n3 6)."""
        _, _, sgw, _ = common.bearer(a, 0)
        if a.n3 == 6:
            return IPv6(src=common.sgw6_addr(a, 0), dst=a.pgw_addr6, hlim=64)
        return IP(src=common.ip(sgw), dst=common.ip(a.pgw_addr), ttl=64)

    def names(self, a):
        """(inner IPv4 layer, inner IPv6 layer, outer source's low 32 bits, shift of every offset
        behind the outer header) as the field engine's instructions address them."""
        if a.n3 == 6:
            return "IP", "IPv6:1", common.ETH_LEN + 8 + 12, common.IPV6_LEN - common.IPV4_LEN
        return "IP:1", "IPv6", "IP.src", 0

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
                / self.outer(a)
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

    def outer_csums(self, a):
        """Outer UDP checksum of bearer i's packet when its TEID is teids[i] (--teid-file): the
        base packet's, less the one's-complement difference between teids[i] and teids[0] + i."""
        def fold(x):
            return ((x >> 16) + (x & 0xFFFF)) % 0xFFFF
        c0 = self._base.__class__(bytes(self._base))[UDP].chksum     # the outer UDP's, as built
        out = []
        for i, t in enumerate(a.teids[:a.flows]):
            delta = (fold(t) - fold((a.teids[0] + i) & 0xFFFFFFFF)) % 0xFFFF
            c = (c0 - delta) % 0xFFFF
            out.append(c if c else 0xFFFF)
        return out

    def instructions(self, a, sw=False):
        """Field-engine program, fresh objects for every stream (TRex compiles them in place).
        sw: keep the inner checksums valid by construction instead of STLVmFixChecksumHw."""
        inner_l4 = "UDP:1" if a.l4 == "udp" else "TCP"
        l4_type = CTRexVmInsFixHwCs.L4_TYPE_UDP if a.l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
        inner, _, outer_src, shift = self.names(a)
        sgw_add = common.s32(a.sgw6_lo if a.n3 == 6 else a.sgw_base)
        fix_outer = [STLVmFixIpv4(offset="IP")] if a.n3 == 4 else []
        vm = []
        if a.flows > 1 and a.order == "random":
            # a random bearer per packet: the SGW (i % sgws) is the low bits of i (parse() checked
            # that sgws is a power of two and sgw_base a multiple of it); no software checksum
            vm.append(STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                   op="random"))
            vm += [
                STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                               add_val=common.s32(a.teid_base)),
                STLVmWrFlowVar(fv_name="bearer", pkt_offset=inner + ".src",
                               add_val=common.s32(a.ue_base)),
            ]
            if a.sgw_period > 1:
                vm += [STLVmWrMaskFlowVar(fv_name="bearer", pkt_offset=outer_src, pkt_cast_size=4,
                                          mask=a.sgw_period - 1, shift=0)] + fix_outer
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
            if a.teids:
                # the TEIDs a UPF chose: a value list in step with bearer (both inc by 1 from
                # their first entry, same length)
                vm.append(STLVmFlowVar(name="teid", value_list=a.teids[:a.flows], size=4, op="inc"))
                vm.append(STLVmWrFlowVar(fv_name="teid", pkt_offset="GTP_U_Header.teid"))
                if a.outer_udp_csum == "valid":
                    # everything else keeps the outer sum (see above) once the TEID grows by 1 per
                    # bearer; a TEID list deviates from that by a known amount per bearer, so the
                    # outer checksum of bearer i is a list too, in step
                    vm.append(STLVmFlowVar(name="ocsum", value_list=self.outer_csums(a), size=2, op="inc"))
                    vm.append(STLVmWrFlowVar(fv_name="ocsum", pkt_offset="UDP.chksum"))
            else:
                vm.append(STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                                         add_val=common.s32(a.teid_base)))
            vm.append(STLVmWrFlowVar(fv_name="bearer", pkt_offset=inner + ".src",
                                     add_val=common.s32(a.ue_base)))
            if a.sgw_period > 1:
                vm += [
                    STLVmWrFlowVar(fv_name="sgw", pkt_offset=outer_src, add_val=sgw_add),
                    STLVmWrFlowVar(fv_name="sgw", pkt_offset=inner + ".dst",
                                   add_val=common.s32(a.pdn_base)),
                ] + fix_outer
            if sw:
                comp_off = (78 if a.l4 == "udp" else 90) + shift
                d = int.from_bytes(bytes(self._base)[comp_off:comp_off + 4], "big") - (a.flows - 1)
                # word = d + N-1-i: cancels the +i of the inner source
                vm.append(STLVmWrFlowVar(fv_name="bearer_c", pkt_offset=comp_off,
                                         add_val=common.s32(d)))
                if a.sgw_period > 1:
                    # checksum = 0xfffe - k: cancels the +k of the inner destination
                    vm.append(STLVmWrFlowVar(fv_name="sgw_c", pkt_offset=inner_l4 + ".chksum",
                                             add_val=0xFFFE - (a.sgw_period - 1)))
                vm.append(STLVmFixIpv4(offset=inner))
                return vm
        if vm or a.stats == "latency":
            # after the writes (and after TRex's latency header, which lands in the payload)
            vm.append(STLVmFixChecksumHw(l3_offset=inner, l4_offset=inner_l4, l4_type=l4_type))
        return vm

    # ---- inner IPv6 (--ip 6 / 4v6) ------------------------------------------------------------
    # Offsets: outer Ether 0, IPv4 14, UDP 34, GTP-U 42, IPv6 50 (src 58, dst 74), L4 90, payload
    # 98 (UDP) / 110 (TCP); with --n3 6 (outer IPv6 14, UDP 54, GTP-U 62) each 20 more (set_offsets6). Bearer i's UE is fd47:7470:XXXX:YYYY:(N-1-i):0:1 (its /64 = i; the
    # interface identifier's upper 32 bits count down as the prefix counts up), the server
    # fd47:7471::(1 + k) with k = i % sgws, the source port sport + (P-1-k) (P = the SGW period).
    # Every write is answered inside the inner UDP/TCP checksum's own coverage (prefix +i, IID -i;
    # server +k, port -k), so the inner checksum of bearer 0, computed by Scapy, is right for every
    # packet with no fix instruction, on any port (RFC 8200 8.1: mandatory over IPv6, never 0).
    V6_L3 = 50
    V6_SRC_PREFIX = V6_L3 + 8 + 4       # the 32 bits XXXX:YYYY of the UE's /64
    V6_SRC_IID_HI = V6_L3 + 8 + 8       # upper 32 bits of the UE's interface identifier
    V6_DST_LO = V6_L3 + 24 + 12         # low 32 bits of the server's address
    V6_SPORT = V6_L3 + 40

    def set_offsets6(self, a):
        """The inner IPv6 header's offsets for the outer header of --n3."""
        self.V6_L3 = 50 + self.names(a)[3]
        self.V6_SRC_PREFIX = self.V6_L3 + 8 + 4
        self.V6_SRC_IID_HI = self.V6_L3 + 8 + 8
        self.V6_DST_LO = self.V6_L3 + 24 + 12
        self.V6_SPORT = self.V6_L3 + 40

    def packet6(self, a, payload_len):
        """Bearer 0's IPv6 G-PDU, every checksum valid (outer UDP: 0 unless --outer-udp-csum valid)."""
        teid, _, sgw, _ = common.bearer(a, 0)
        multi = a.flows > 1 and a.order == "seq"
        iid = ((a.flows - 1) << 32 | common.UE6_IID) if multi else common.UE6_IID
        sport = a.sport + (a.sgw_period - 1 if multi else 0)
        if a.l4 == "udp":
            l4 = UDP(sport=sport, dport=a.dport)
        else:
            l4 = TCP(sport=sport, dport=a.dport, flags="A", seq=1, ack=1)
        outer_udp = UDP(sport=common.GTPU_PORT, dport=common.GTPU_PORT)
        if a.outer_udp_csum == "zero":
            outer_udp.chksum = 0
        pkt = (Ether(src=common.SRC_MAC, dst=common.DST_MAC)
               / self.outer(a)
               / outer_udp
               / GTP_U_Header(gtp_type=255, teid=teid)
               / IPv6(src=common.ue6_addr(0, iid), dst=common.server6_addr(1), hlim=64)
               / l4
               / Raw(common.payload(payload_len)))
        return pkt.__class__(bytes(pkt))

    def outer_csums6(self, a):
        """Outer UDP checksum of bearer i's IPv6 packet: the inner datagram's sum never changes
        (see packet6), the TEID (+i) and the outer source (+k) do: the base packet's checksum less
        their ones'-complement difference, one per bearer (a value list in step with "bearer")."""
        def fold(x):
            return ((x >> 16) + (x & 0xFFFF)) % 0xFFFF
        c0 = self._base[UDP].chksum
        out = []
        for i in range(a.flows):
            teid, _, sgw, _ = common.bearer(a, i)
            t0, _, s0, _ = common.bearer(a, 0)
            if a.n3 == 6:        # the outer IPv6 source's low 32 bits, in the pseudo header
                sgw, s0 = a.sgw6_lo + i % a.sgws, a.sgw6_lo
            delta = (fold(teid) - fold(t0) + fold(sgw) - fold(s0)) % 0xFFFF
            c = (c0 - delta) % 0xFFFF
            out.append(c if c else 0xFFFF)
        return out

    def instructions6(self, a, hw):
        """Field-engine program of the IPv6 stream. hw: STLVmFixChecksumHw at the inner IPv6
        header last (--checksum hw, --stats latency: TRex's latency header changes the payload,
        --order random: nothing can answer a random index)."""
        inner_l4 = "UDP:1" if a.l4 == "udp" else "TCP"
        l4_type = CTRexVmInsFixHwCs.L4_TYPE_UDP if a.l4 == "udp" else CTRexVmInsFixHwCs.L4_TYPE_TCP
        _, inner6, outer_src, _ = self.names(a)
        sgw_add = common.s32(a.sgw6_lo if a.n3 == 6 else a.sgw_base)
        fix_outer = [STLVmFixIpv4(offset="IP")] if a.n3 == 4 else []
        vm = []
        if a.flows > 1 and a.order == "random":
            vm += [STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4,
                                op="random"),
                   STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                                  add_val=common.s32(a.teid_base)),
                   STLVmWrFlowVar(fv_name="bearer", pkt_offset=self.V6_SRC_PREFIX)]
            if a.sgw_period > 1:
                vm += [STLVmWrMaskFlowVar(fv_name="bearer", pkt_offset=outer_src, pkt_cast_size=4,
                                          mask=a.sgw_period - 1, shift=0)] + fix_outer
            hw = True
        elif a.flows > 1:
            vm += [STLVmFlowVar(name="bearer", min_value=0, max_value=a.flows - 1, size=4, op="inc"),
                   STLVmFlowVar(name="bearer_c", min_value=0, max_value=a.flows - 1,
                                init_value=a.flows - 1, size=4, op="dec")]
            if a.sgw_period > 1:
                vm += [STLVmFlowVar(name="sgw", min_value=0, max_value=a.sgw_period - 1, size=4,
                                    op="inc"),
                       STLVmFlowVar(name="sgw_c", min_value=0, max_value=a.sgw_period - 1,
                                    init_value=a.sgw_period - 1, size=2, op="dec")]
            if a.teids:
                vm += [STLVmFlowVar(name="teid", value_list=a.teids[:a.flows], size=4, op="inc"),
                       STLVmWrFlowVar(fv_name="teid", pkt_offset="GTP_U_Header.teid")]
            else:
                vm.append(STLVmWrFlowVar(fv_name="bearer", pkt_offset="GTP_U_Header.teid",
                                         add_val=common.s32(a.teid_base)))
            vm += [STLVmWrFlowVar(fv_name="bearer", pkt_offset=self.V6_SRC_PREFIX),
                   STLVmWrFlowVar(fv_name="bearer_c", pkt_offset=self.V6_SRC_IID_HI)]
            if a.sgw_period > 1:
                vm += [STLVmWrFlowVar(fv_name="sgw", pkt_offset=outer_src, add_val=sgw_add),
                       STLVmWrFlowVar(fv_name="sgw", pkt_offset=self.V6_DST_LO, add_val=1),
                       STLVmWrFlowVar(fv_name="sgw_c", pkt_offset=self.V6_SPORT,
                                      add_val=a.sport)] + fix_outer
            if a.outer_udp_csum == "valid":
                vm += [STLVmFlowVar(name="ocsum", value_list=self.outer_csums6(a), size=2, op="inc"),
                       STLVmWrFlowVar(fv_name="ocsum", pkt_offset="UDP.chksum")]
        if hw or (a.stats == "latency"):
            vm.append(STLVmFixChecksumHw(l3_offset=inner6, l4_offset=inner_l4, l4_type=l4_type))
        return vm

    def get_streams(self, direction=0, tunables=(), **kwargs):
        """direction is ignored: this profile always is the access side's traffic (use it on
        port 0, as `start -f gtpu_uplink.py -p 0 -t size=1424`)."""
        a = self.args = common.parse(self.profile, tunables, kwargs)
        self.set_offsets6(a)
        if 6 in a.families and a.sport + a.sgw_period - 1 > 0xFFFF:
            raise common.ProfileError(f"--sport {a.sport}: the IPv6 stream uses sport .. sport + "
                                      f"{a.sgw_period - 1}, above 65535")

        def build(size, plen, ip=4):
            if ip == 6:
                self._base = self.packet6(a, plen)
                return self._base, self.instructions6(a, a.checksum == "hw")
            sw = common.sw_checksum(a, plen)
            self._base = self.sw_packet(a, plen) if sw else self.packet(a, plen)
            return self._base, self.instructions(a, sw)
        return common.make_streams(stl, a, build)


def register():
    return GtpuUplink()
