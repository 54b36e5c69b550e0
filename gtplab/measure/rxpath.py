"""Where a trial's packets went on the DUT's receive path, and which knob addresses the loss.

    s0 = dut.rx_path(); ... the trial's traffic ...; s1 = dut.rx_path()
    rx = delta(s0, s1, dut_cpus)            # softnet per CPU, the DUT netns's UDP/IP MIB, links, threads
                                            # (and rcvbuf_drops: the socket path with gro, below)
    rx["loss_points"] = loss_points(trial)  # [{"where", "packets", "knob"}], largest first
    rx["dominant"] = sentence(trial)        # one sentence: the dominant loss point and its knob

The snapshots are the probe's (gtplab.dut.local.LocalDut.rx_path: the namespace lab's DUT side,
read with gtplab.kernel.rxstats; a remote DUT's node exporter: its softnet and netstat series).
Where a packet was lost comes from the trial's conservation (the DUT's ingress ring, its drops by
reason, which for the socket path include the kernel's drops on its way in: kernel_udp_rcvbuferrors,
kernel_packet_socket_drops ..., the generator's receive ring); softnet's backlog drops and time
squeezes are the host's and are shown beside them. No I/O here: the runner and the tests call it.

The socket path with UDP GRO (the gro knob) counts its full socket buffers' drops per G-PDU with a
kfree_skb probe (gtplab.dut.sockdrop): the kernel's Udp RcvbufErrors counts a merged datagram once.
Then kernel_udp_rcvbuferrors is the probe's count of G-PDUs, and the snapshots' rcvbuf_probe gives
rx_path.rcvbuf_drops: {"counter": what counted them, "packets": G-PDUs, "datagrams": the merged
datagrams they were dropped in, "kernel_rcvbuferrors": the kernel's count of the same datagrams};
the loss point carries the counter and the kernel's datagram count beside its packets.
"""

from __future__ import annotations

from typing import Any

# (where, knob) per loss point; a drop reason not listed is the gateway's own check (the traffic or
# the bearers are wrong for it, not a capacity limit)
POINTS = {
    "dut_ingress_ring": ("the DUT's receive ring (the veth's 256 frames: its NAPI thread fell behind)",
                         "more DUT CPUs (lab config cpus.dut) or fewer cycles a packet; on this VM, a vCPU "
                         "stall fills it at any rate (docs/lab.md)"),
    "kernel_udp_rcvbuferrors": ("the UDP sockets' receive buffers (Udp RcvbufErrors, or per G-PDU with "
                                "UDP GRO: the workers did not read fast enough)",
                                "socket knobs: rcvbuf (SO_RCVBUF, net.core.rmem_max) for bursts, batch "
                                "(recvmmsg) and threads with reuseport for the rate, busy_poll"),
    "kernel_packet_socket_drops": ("the packet sockets' receive buffers (PACKET_STATISTICS drops: the "
                                   "downlink workers did not read fast enough)",
                                   "socket knobs: rcvbuf for bursts, batch and threads (a fanout group) "
                                   "for the rate, busy_poll"),
    "kernel_udp_memerrors": ("UDP memory accounting (Udp MemErrors: net.ipv4.udp_mem)",
                             "net.ipv4.udp_mem, or smaller socket buffers"),
    "kernel_udp_incsumerrors": ("UDP checksum verification (Udp InCsumErrors, with Udp6's: over IPv6 a zero "
                                "checksum too, RFC 8200 8.1)", "the sender's checksums"),
    "kernel_udp_noports": ("no socket on the port (Udp NoPorts: the gateway was not reading)",
                           "start the socket path before the traffic"),
    "drop_tx_full": ("the egress: the kernel refused to send (ENOBUFS: on the lab's veths the generator's "
                     "receive ring)",
                     "the generator's receive side (its CPUs); on a NIC, its transmit ring and txqueuelen"),
    "generator_ingress_ring": ("the generator's receive ring (the DUT forwarded them)",
                               "the generator's receive side (its CPUs): not the DUT's limit"),
    # a UPF on the kernel's path (dut.counters kernelpath, gtplab.dut.kernelpath)
    "udp_rcvbuf": ("the UPF's N3 socket's receive buffer (Udp RcvbufErrors: it read too slowly)",
                   "the UPF's socket buffer (its own setting, net.core.rmem_default/rmem_max) and its reading "
                   "threads"),
    "tun_tx_dropped": ("the UPF's TUN device's queue (tx_dropped: it read too slowly)",
                       "the TUN device's txqueuelen, and the UPF's reading of it"),
    "tun_rx_dropped": ("the UPF's TUN device refused what the UPF wrote (rx_dropped)", "the UPF's writes"),
    "upf_process": ("the UPF process: read from one side and not written to the other (no rule, buffered, "
                    "its own drops)", "the UPF's rules and log"),
    "udp_sndbuf": ("the UPF's UDP sends refused (Udp SndbufErrors)", "the UPF's socket send buffer"),
    "veth_rx_dropped": ("the DUT veth, after XDP_PASS (no memory for the frame)", "the host's memory"),
}
KERNEL_PREFIX = "kernel_"


def delta(a: dict | None, b: dict | None, dut_cpus: list[int] | None = None) -> dict[str, Any] | None:
    """What moved between two rx_path snapshots: softnet per CPU (the DUT CPUs, and any other CPU
    that dropped or squeezed), the UDP and IP counters of the DUT's netns that moved, the links' drop
    counters that moved, and each DUT thread: the CPU it ran on last and its run time."""
    if not a or not b:
        return None
    out: dict[str, Any] = {"softnet": [], "udp": {}, "ip": {}, "links": {}, "threads": []}
    sa, sb = a.get("softnet") or {}, b.get("softnet") or {}
    for cpu in sorted(set(sa) & set(sb), key=int):
        d = [y - x for x, y in zip(sa[cpu], sb[cpu])]
        if (dut_cpus is not None and int(cpu) in dut_cpus) or d[1] or d[2]:
            out["softnet"].append({"cpu": int(cpu), "processed": d[0], "dropped": d[1], "time_squeeze": d[2]})
    for table in ("Udp", "Ip"):
        ta, tb = (a.get("snmp") or {}).get(table, {}), (b.get("snmp") or {}).get(table, {})
        out[table.lower()] = {k: tb[k] - ta.get(k, 0) for k in tb if tb[k] - ta.get(k, 0)}
    la, lb = a.get("links") or {}, b.get("links") or {}
    for ifname in sorted(lb):
        d = {k: v - la.get(ifname, {}).get(k, 0) for k, v in lb[ifname].items() if "drop" in k or "error" in k
             or "missed" in k}
        d = {k: v for k, v in d.items() if v}
        if d:
            out["links"][ifname] = d
    pa, pb = a.get("rcvbuf_probe"), b.get("rcvbuf_probe")
    if pb and "error" in pb:
        out["rcvbuf_drops"] = {"counter": "Udp RcvbufErrors (datagrams: with gro a merged datagram's "
                               "G-PDUs beyond the first are not counted)", "error": pb["error"]}
    elif pa and pb and "segments" in pa:
        out["rcvbuf_drops"] = {"counter": pb["source"], "packets": pb["segments"] - pa["segments"],
                               "datagrams": pb["datagrams"] - pa["datagrams"],
                               "kernel_rcvbuferrors": out["udp"].get("RcvbufErrors", 0)}
    ta, tb = a.get("threads") or {}, b.get("threads") or {}
    for tid in sorted(tb, key=int):
        t1, t0 = tb[tid], ta.get(tid)
        run = t1["run_ns"] - (t0["run_ns"] if t0 else 0)
        out["threads"].append({"tid": int(tid), "name": t1["name"], "cpu": t1["cpu"],
                               "run_s": round(run / 1e9, 6)})
    return out


def loss_points(t: dict) -> list[dict[str, Any]]:
    """The places a trial lost packets, from its record (loss, dut.drops_by_reason), largest first:
    [{"where", "packets", "knob", "key"}]. The generator's receive ring is listed when it lost any."""
    loss = t.get("loss") or {}
    dut = t.get("dut") or {}
    probe = (t.get("rx_path") or {}).get("rcvbuf_drops")
    counts: dict[str, int] = {}
    if loss.get("dut_ingress_ring"):
        counts["dut_ingress_ring"] = loss["dut_ingress_ring"]
    for reason, n in (dut.get("drops_by_reason") or {}).items():
        if n:
            counts[reason] = counts.get(reason, 0) + n
    if loss.get("generator_ingress_ring"):
        counts["generator_ingress_ring"] = loss["generator_ingress_ring"]
    out = []
    for key, n in counts.items():
        if key in POINTS:
            where, knob = POINTS[key]
        elif key.startswith(KERNEL_PREFIX):
            where, knob = f"the DUT's kernel ({key[len(KERNEL_PREFIX):]})", "see the DUT netns's /proc/net/snmp"
        else:
            where, knob = (f"the gateway's own check ({key})",
                           "the traffic or the bearers (a check the packets failed, not a capacity limit)")
        point = {"key": key, "where": where, "packets": n, "knob": knob}
        if key == "kernel_udp_rcvbuferrors" and probe:
            # with gro: which counter counted them, and the kernel's count of datagrams beside it
            point["counter"] = probe["counter"]
            if "datagrams" in probe:
                point["datagrams"] = probe["datagrams"]
                point["kernel_rcvbuferrors"] = probe["kernel_rcvbuferrors"]
        out.append(point)
    return sorted(out, key=lambda p: (-p["packets"], p["key"]))


def sentence(t: dict) -> str:
    """One sentence: how many packets the trial lost, the dominant loss point and its knob."""
    pts = loss_points(t)
    tx = t.get("tx_packets") or 0
    rx = t.get("rx_path") or {}
    squeezed = sum(r.get("time_squeeze", 0) for r in rx.get("softnet", []))
    backlog = sum(r.get("dropped", 0) for r in rx.get("softnet", []))
    extra = ""
    if backlog:
        extra += f" (softnet also dropped {backlog} at a CPU's backlog: net.core.netdev_max_backlog)"
    if squeezed:
        extra += f" ({squeezed} NAPI polls ran out of budget: net.core.netdev_budget, netdev_budget_usecs)"
    if not pts:
        return "No packet was lost on the receive path" + (f" of {tx} sent" if tx else "") + extra + "."
    total = sum(p["packets"] for p in pts)
    top = pts[0]
    share = top["packets"] / total
    if top.get("datagrams") and top["datagrams"] != top["packets"]:
        extra = (f" (UDP GRO: the {top['packets']} G-PDUs were dropped in {top['datagrams']} merged "
                 f"datagrams, counted by the kfree_skb probe; Udp RcvbufErrors counted "
                 f"{top['kernel_rcvbuferrors']})") + extra
    return (f"{total} of {tx} packets lost ({total / tx:.2%}), {share:.0%} of them at {top['where']}; "
            f"knob: {top['knob']}{extra}.") if tx else \
           (f"{total} packets lost, {share:.0%} of them at {top['where']}; knob: {top['knob']}{extra}.")


def summarize(t: dict) -> None:
    """Add loss_points and the dominant sentence to a trial's rx_path (when it has one)."""
    rx = t.get("rx_path")
    if rx is None:
        return
    rx["loss_points"] = loss_points(t)
    rx["dominant"] = sentence(t)
