"""Counters for a UPF on the kernel's path (lab config `dut.counters: kernelpath`): GTP-U on a UDP
socket (port 2152), N6 through a TUN device and the kernel's routing, no XDP and no counters of its
own that count (Open5GS's UPF). What it did with a trial's packets is read from the kernel of its
network namespace, where every packet it loses is counted somewhere:

    the DUT netns's /proc/net/snmp      Ip (InHdrErrors InAddrErrors InDiscards InUnknownProtos
                                        OutDiscards OutNoRoutes FragFails ForwDatagrams InReceives)
                                        Udp (InDatagrams RcvbufErrors MemErrors InCsumErrors InErrors
                                        NoPorts OutDatagrams SndbufErrors)
    its /proc/net/netstat                IpExt InNoRoutes InTruncatedPkts, TcpExt IPReversePathFilter
    its /proc/net/snmp6                  Ip6 (the same drops of IPv6 user packets: InHdrErrors
                                        InTooBigErrors InNoRoutes InAddrErrors InUnknownProtos
                                        InTruncatedPkts InDiscards OutDiscards OutNoRoutes FragFails)
                                        Udp6: added to Udp's (GTP-U over IPv6, sweep --n3 6: the N3
                                        socket of the UPF's IPv6 address; one place per UDP drop)
    its /proc/net/dev                    every device's rx/tx packets and drops (the data veths, TUN)
    its /proc/net/udp, udp6              the drops and queue of the sockets on port 2152 (N3)
    ethtool -S of the DUT veths          rx_queue_N_drops (passed by the lab's XDP_PASS, then dropped)
    the control plane netns's Udp        the N4 datagrams to and from the UPF (taken off the counts)

A trial sends one direction. Its packets go, uplink: the access veth -> IP -> the N3 socket (UDP) ->
the UPF reads -> writes to its TUN device -> IP forwarding -> the SGi veth -> the generator;
downlink: the SGi veth -> IP forwarding -> the TUN device's queue -> the UPF reads -> sends on its
N3 socket -> the access veth -> the generator. places() puts each packet the DUT received on one
named place, per direction:

    fwd                  sent out of the egress veth: its tx_packets + the drops of the stack's
                         sends there (veth tx_dropped, less XDP's: the generator's ring was full,
                         which is the "lost on the way out" of conservation)
    veth_rx_dropped      the ingress veth dropped it after the lab's XDP_PASS (rx_queue_N_drops)
    ip_*                 the IP layer's drops (either IP traversal: the GTP-U packet or, forwarded,
                         the inner packet): ip_in_hdr_errors (also TTL expired when forwarding),
                         ip_in_addr_errors, ip_in_no_routes, ip_in_unknown_protos, ip_in_discards,
                         ip_in_truncated, ip_rp_filter, ip_frag_fails; uplink ip_out_discards
                         (forwarding); downlink ip_out_no_routes (the UPF's UDP sends)
    ip6_*                the IPv6 layer's drops of inner IPv6 packets (forwarded from or to the
                         TUN device): ip6_in_hdr_errors (hop limit expired too), ip6_in_too_big,
                         ip6_in_no_routes, ip6_in_addr_errors (also: not forwarding), ...,
                         ip6_in_discards, ip6_frag_fails; uplink ip6_out_discards, ip6_out_no_routes
    udp_*                the UDP receive side: udp_rcvbuf (RcvbufErrors: the N3 socket's buffer was
                         full, the UPF read too slowly), udp_mem, udp_in_csum, udp_in_other (the
                         rest of InErrors), udp_no_ports (no socket on the port)
    upf_process          the UPF itself: uplink, datagrams it read on N3 (Udp InDatagrams less N4's)
                         less the packets it wrote to its TUN device (rx_packets + rx_dropped: no
                         PDR, buffered, an Error Indication answered ...); downlink, packets its TUN
                         device queued to it (tx_packets) less its N3 sends (Udp OutDatagrams +
                         SndbufErrors + Ip OutNoRoutes, less N4's)
    tun_rx_dropped       uplink: the TUN device refused what the UPF wrote
    tun_tx_dropped       downlink: the TUN device's queue was full (the UPF read too slowly)
    udp_sndbuf           downlink: UDP sends refused (Udp SndbufErrors), less the egress veth's drops
                         (a veth drop of a local send is counted by UDP and IP too)

then conservation.check_places balances: generator tx = DUT rx (the ingress veth's rx_packets) + lost on
the way in; DUT rx = fwd + the places (any remainder is "unexplained": the case is not ok); fwd =
generator rx + lost on the way out. A place that went negative is an error too (the counters do not
tell the path's story: say, a UPF that sent packets of its own).

What is counted and what is left out, and why it is exact on the lab: the netns-wide MIB counts
every packet of the namespace, so the lab keeps others off it (IPv6 is off in its namespaces: no
ND, no router solicitation on the veths or the TUN device; its neighbours are permanent: no ARP on
the data veths); the N4 link's PFCP datagrams are counted in the control plane's namespace, which
holds nothing else, and taken off the UDP counts; lo is not taken off (a UPF that talks to itself
over UDP shows as a remainder, never as a place). Ip OutDiscards on the downlink is not a place: a
refused UDP send is counted in SndbufErrors too. Fragments are not handled (the sweep's sizes fit
the lab's MTU): a fragmented packet shows as a remainder.

Used by gtplab.dut.external.ExternalDut (counters kernelpath: places()), gtplab.measure.runner
(conservation.check_places) and the tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Callable

from gtplab.dut.sockdrop import GTPU_PORT
from gtplab.kernel import rxstats
from gtplab.kernel.netns import Worker

KIND = "kernelpath"
SETTLE_S = 0.05          # two snapshots this far apart, equal: the DUT is idle
SETTLE_MAX_S = 3.0
NETSTAT = {"IpExt": ("InNoRoutes", "InTruncatedPkts"), "TcpExt": ("IPReversePathFilter",)}
# (place, MIB table, counter): the IP and UDP drops that are places in both directions
IP_PLACES = (("ip_in_hdr_errors", "Ip", "InHdrErrors"), ("ip_in_addr_errors", "Ip", "InAddrErrors"),
             ("ip_in_no_routes", "IpExt", "InNoRoutes"), ("ip_in_unknown_protos", "Ip", "InUnknownProtos"),
             ("ip_in_discards", "Ip", "InDiscards"), ("ip_in_truncated", "IpExt", "InTruncatedPkts"),
             ("ip_rp_filter", "TcpExt", "IPReversePathFilter"), ("ip_frag_fails", "Ip", "FragFails"))
IP6_PLACES = (("ip6_in_hdr_errors", "InHdrErrors"), ("ip6_in_too_big", "InTooBigErrors"),
              ("ip6_in_no_routes", "InNoRoutes"), ("ip6_in_addr_errors", "InAddrErrors"),
              ("ip6_in_unknown_protos", "InUnknownProtos"), ("ip6_in_truncated", "InTruncatedPkts"),
              ("ip6_in_discards", "InDiscards"), ("ip6_frag_fails", "FragFails"))
UDP_PLACES = (("udp_rcvbuf", "RcvbufErrors"), ("udp_mem", "MemErrors"), ("udp_in_csum", "InCsumErrors"),
              ("udp_no_ports", "NoPorts"))
_RQ_DROPS = re.compile(r"rx_queue_\d+_drops$")
_XMIT_ERR = re.compile(r"tx_queue_\d+_xdp_xmit_errors$")
_XDP_TX_ERR = re.compile(r"rx_queue_\d+_xdp_tx_errors$")
ETHTOOL_KEEP = (_RQ_DROPS, _XMIT_ERR, _XDP_TX_ERR)


def tun_devices(netns: str | None) -> list[str]:
    """The TUN/TAP devices of a namespace (`ip link show type tun`)."""
    cmd = ["ip", "-j", "link", "show", "type", "tun"]
    p = subprocess.run((["ip", "-n", netns] + cmd[1:]) if netns else cmd, capture_output=True, text=True,
                       timeout=30)
    return [d["ifname"] for d in json.loads(p.stdout or "[]")] if p.returncode == 0 else []


def parse(texts: dict[str, str], port: int = GTPU_PORT) -> dict:
    """One snapshot from the texts of a namespace's /proc/net files (rxstats.read_own_netns)."""
    snmp = rxstats.snmp(texts["snmp"])
    udp = dict(snmp.get("Udp", {}))
    for k, v in rxstats.snmp6(texts.get("snmp6", ""), "Udp6").items():   # N3 over IPv6: the same places
        udp[k] = udp.get(k, 0) + v
    mib = {"Ip": snmp.get("Ip", {}), "Udp": udp, "Ip6": rxstats.snmp6(texts.get("snmp6", ""))}
    if "netstat" in texts:
        ns = rxstats.snmp(texts["netstat"])
        for table, names in NETSTAT.items():
            mib[table] = {k: ns.get(table, {}).get(k, 0) for k in names}
    socks = rxstats.udp_sockets(texts.get("udp", ""), port) + rxstats.udp_sockets(texts.get("udp6", ""), port)
    return {"mib": mib, "dev": rxstats.net_dev(texts.get("dev", "")),
            "n3_socket": {"sockets": len(socks), "drops": sum(s["drops"] for s in socks),
                          "rx_queue": sum(s["rx_queue"] for s in socks)}}


class Snapshot(dict):
    """What KernelPath.counters() returns: the direction-free drops as {(place, "drop"): count so far}
    (the shape every DUT probe's counters() has: DutDelta.from_counters, upftest and conformance
    evidence), and in .raw the whole snapshot that places() and balance() read."""

    def __init__(self, raw: dict):
        super().__init__(flat(raw))
        self.raw = raw


def flat(snap: dict) -> dict[tuple[str, str], int]:
    """A snapshot's drop counters that need no direction, as {(place, "drop"): count}: the IP and
    UDP places, both veths' rx drops, the TUN devices' drops both ways."""
    m = snap["mib"]
    out = {(name, "drop"): m.get(t, {}).get(c, 0) for name, t, c in IP_PLACES}
    out.update({(name, "drop"): m.get("Ip6", {}).get(c, 0) for name, c in IP6_PLACES})
    out.update({(name, "drop"): m["Udp"].get(c, 0) for name, c in UDP_PLACES})
    out[("veth_rx_dropped", "drop")] = sum(_eth(snap, i, _RQ_DROPS) for i in snap.get("ports", []))
    tun = snap.get("tun", [])
    out[("tun_rx_dropped", "drop")] = _sum(snap["dev"], tun, "rx_dropped")
    out[("tun_tx_dropped", "drop")] = _sum(snap["dev"], tun, "tx_dropped")
    return out


class KernelPath:
    """Snapshots of a kernel-path UPF's namespace (module doc). netns: the DUT's; ports: its data
    veths (access, sgi); cp_netns: the namespace of its N4 peer (the N4 datagrams are taken off),
    None: none; ethtool(ifname) -> ethtool -S of a DUT veth."""

    kind = KIND

    def __init__(self, netns: str, ports: tuple[str, str], ethtool: Callable[[str], dict[str, int]],
                 cp_netns: str | None = None, port: int = GTPU_PORT):
        self.netns, self.ports, self.ethtool, self.port = netns, tuple(ports), ethtool, port
        self._dut = Worker(netns)
        try:
            self._cp = Worker(cp_netns) if cp_netns else None
        except BaseException:
            self._dut.close()
            raise

    def close(self) -> None:
        self._dut.close()
        if self._cp is not None:
            self._cp.close()

    def read(self) -> dict:
        """One snapshot, as it is now."""
        snap = parse(self._dut.call(rxstats.read_own_netns, ("snmp", "netstat", "dev", "udp", "snmp6", "udp6")),
                     self.port)
        snap["ports"] = list(self.ports)
        snap["tun"] = tun_devices(self.netns)
        snap["ethtool"] = {i: {k: v for k, v in self.ethtool(i).items() if any(r.match(k) for r in ETHTOOL_KEEP)}
                           for i in self.ports}
        if self._cp is not None:
            snap["cp_udp"] = rxstats.snmp(self._cp.call(rxstats.read_own_netns, ("snmp",))["snmp"]).get("Udp", {})
        return snap

    def counters(self) -> Snapshot:
        """A snapshot (Snapshot: .raw) once the DUT is idle: two reads SETTLE_S apart agree (what its socket and its
        TUN device's queue held when the traffic stopped has been read and counted) and nothing is
        queued on its N3 socket; at most SETTLE_MAX_S."""
        deadline = time.monotonic() + SETTLE_MAX_S
        last = self.read()
        while True:
            time.sleep(SETTLE_S)
            cur = self.read()
            if (cur == last and not cur["n3_socket"]["rx_queue"]) or time.monotonic() > deadline:
                return Snapshot(cur)
            last = cur


def _sum(d: dict, names, key: str) -> int:
    return sum(d.get(n, {}).get(key, 0) for n in names)


def _eth(snap: dict, ifname: str, rx: re.Pattern) -> int:
    return sum(v for k, v in snap.get("ethtool", {}).get(ifname, {}).items() if rx.match(k))


def places(before: dict, after: dict, direction: str) -> dict:
    """Where the DUT's packets went in a trial of one direction (module doc), from two snapshots
    (or Snapshots): {"dut_rx", "fwd", "lost_out" (the egress veth's drops of the stack's sends),
    "places" {name: packets, nonzero only}, "detail" {the counters it came from}, "errors" (the N3
    socket's drops against the MIB)}; gtplab.measure.conservation.check_places balances it."""
    before, after = getattr(before, "raw", before), getattr(after, "raw", after)
    def mib(table, name):
        return after["mib"].get(table, {}).get(name, 0) - before["mib"].get(table, {}).get(name, 0)

    def dev(names, key):
        return _sum(after["dev"], names, key) - _sum(before["dev"], names, key)

    def eth(ifname, rx):
        return _eth(after, ifname, rx) - _eth(before, ifname, rx)

    def cp(name):
        return (after.get("cp_udp") or {}).get(name, 0) - (before.get("cp_udp") or {}).get(name, 0)

    access, sgi = after["ports"]
    ingress, egress = (access, sgi) if direction == "uplink" else (sgi, access)
    tun = sorted(set(before.get("tun", [])) & set(after.get("tun", [])))
    dut_rx = dev([ingress], "rx_packets")
    # the egress veth's tx_dropped counts XDP's failures too (its redirects, XDP_TX): not the stack's
    stack_drops = dev([egress], "tx_dropped") - eth(egress, _XMIT_ERR) - eth(egress, _XDP_TX_ERR)
    fwd = dev([egress], "tx_packets") + stack_drops
    p = {"veth_rx_dropped": eth(ingress, _RQ_DROPS)}
    for name, table, counter in IP_PLACES:
        p[name] = mib(table, counter)
    for name, counter in UDP_PLACES:
        p[name] = mib("Udp", counter)
    for name, counter in IP6_PLACES:
        p[name] = mib("Ip6", counter)
    p["udp_in_other"] = mib("Udp", "InErrors") - mib("Udp", "RcvbufErrors") - mib("Udp", "MemErrors") \
        - mib("Udp", "InCsumErrors")
    detail = {"ingress": ingress, "egress": egress, "tun": tun, "dut_rx": dut_rx,
              "egress_tx_packets": dev([egress], "tx_packets"), "egress_stack_drops": stack_drops,
              "ip_in_receives": mib("Ip", "InReceives"), "ip_forw_datagrams": mib("Ip", "ForwDatagrams"),
              "ip_out_discards": mib("Ip", "OutDiscards"),
              "n3_socket_drops": after["n3_socket"]["drops"] - before["n3_socket"]["drops"],
              "n3_sockets": after["n3_socket"]["sockets"]}
    if direction == "uplink":
        n4_in = cp("OutDatagrams")                     # gtplab's PFCP to the UPF, read by it
        reads = mib("Udp", "InDatagrams") - n4_in
        writes = dev(tun, "rx_packets") + dev(tun, "rx_dropped")
        p["upf_process"] = reads - writes
        p["tun_rx_dropped"] = dev(tun, "rx_dropped")
        p["ip_out_discards"] = mib("Ip", "OutDiscards")
        p["ip6_out_discards"] = mib("Ip6", "OutDiscards")
        p["ip6_out_no_routes"] = mib("Ip6", "OutNoRoutes")
        detail.update(n4_datagrams=n4_in, n3_reads=reads, tun_writes=writes)
    else:
        n4_out = cp("InDatagrams") + cp("InErrors") + cp("NoPorts")    # the UPF's PFCP to gtplab
        sends = mib("Udp", "OutDatagrams") + mib("Udp", "SndbufErrors") + mib("Ip", "OutNoRoutes") \
            + mib("Ip6", "OutNoRoutes") - n4_out
        queued = dev(tun, "tx_packets")
        p["upf_process"] = queued - sends
        p["tun_tx_dropped"] = dev(tun, "tx_dropped")
        p["udp_sndbuf"] = mib("Udp", "SndbufErrors") - stack_drops
        p["ip_out_no_routes"] = mib("Ip", "OutNoRoutes")
        p["ip6_out_no_routes"] = mib("Ip6", "OutNoRoutes")          # its sends over IPv6 (N3 over IPv6)
        detail.update(n4_datagrams=n4_out, tun_queued=queued, n3_sends=sends)
    errors = []
    udp_in_errors = p["udp_rcvbuf"] + p["udp_mem"] + p["udp_in_csum"] + p["udp_in_other"]
    if detail["n3_socket_drops"] > udp_in_errors:
        # the N3 socket's own count (sk_drops) is part of the namespace's Udp InErrors
        errors.append(f"the N3 socket counted {detail['n3_socket_drops']} drops, the namespace's Udp InErrors "
                      f"only {udp_in_errors}")
    return {"dut_rx": dut_rx, "fwd": fwd, "lost_out": stack_drops,
            "places": {k: v for k, v in p.items() if v}, "detail": detail, "errors": errors}
