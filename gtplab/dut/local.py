"""The embedded lab's DUT seen by a measurement: LocalDut reads the lab's PGW-U (XDP or the socket
path) or the reference forwarder through its pinned maps and programs, the veths' ethtool counters,
and the CPU time of the DUT's NAPI kthreads (and of the socket path's threads). Used by
gtplab.measure.runner.Runner (the default DUT of a local backend) and by the tests. A
gtplab.dut.probe.DutProbe, as gtplab.dut.metrics.MetricsDut is.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from gtplab.dut import PROG, fwd
from gtplab.dut.dataplane import Dataplane
from gtplab.dut.sock import SockStats
from gtplab.dut.sockdrop import SOURCE as PROBE_SOURCE
from gtplab.dut.sockdrop import RcvbufProbe
from gtplab.errors import UserError
from gtplab.kernel import bpf, rxstats
from gtplab.kernel.threads import thread_cpu_ns


# The kernel's drops on the socket path's way in, from the DUT netns's SNMP MIB (/proc/net/snmp),
# as (reason, verdict) keys beside the program's own: "kernel_<mib>_<counter>". Uplink G-PDUs go
# through IP and UDP (a full socket buffer is Udp RcvbufErrors); downlink packets are read by a
# packet socket before IP, whose drops the program counts (its threads' sock_drops).
KERNEL_DROPS = (("Udp", "RcvbufErrors"), ("Udp", "MemErrors"), ("Udp", "InCsumErrors"), ("Udp", "NoPorts"),
                ("Ip", "InHdrErrors"), ("Ip", "InAddrErrors"), ("Ip", "InDiscards"), ("Ip", "InUnknownProtos"),
                ("Ip", "ReasmFails"))
SETTLE_TICKS = 2        # the socket path's main-thread ticks (50 ms) its counters must hold still for
RCVBUF_KEY = ("kernel_udp_rcvbuferrors", "drop")


def cpus_busy_seconds(cpus: list[int] | None = None) -> float:
    """Busy time (user nice system irq softirq) of the given CPUs (None: all) since boot, from
    /proc/stat. Steal is not busy: it is time the hypervisor gave to someone else."""
    total = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *vals = line.split()
            if not name.startswith("cpu"):
                break
            if (cpus is None and name == "cpu") or (cpus is not None and name[3:].isdigit()
                                                      and int(name[3:]) in cpus):
                v = [int(x) for x in vals] + [0] * 8
                total += v[0] + v[1] + v[2] + v[5] + v[6]
    return total / os.sysconf("SC_CLK_TCK")


class LocalDut:
    """The embedded lab's DUT (PGW-U, or the reference forwarder): counters from its pinned stats
    map, program run time from the pinned programs (kernel.bpf_stats_enabled), link losses from
    the veths, CPU time from its receive NAPI kthreads (where its XDP programs run, on the DUT
    CPUs) and the DUT CPUs' busy time (/proc/stat: the kthreads plus anything else run there)."""

    kind = "local"
    sock: SockStats | None = None       # the socket path's counters (mode socket); a subclass may not set it
    rcvbuf_probe: RcvbufProbe | None = None     # the socket path with gro: its drops per G-PDU
    rcvbuf_probe_error: str | None = None
    _probe_base: int | None = None      # Udp RcvbufErrors at the probe's first read, less its count then

    def __init__(self, lab, mode: str | None = None):
        """mode: what to read (default the lab's DUT mode); "fwd" on a PGW-U lab reads the reference
        forwarder that gtplab.dut.reference swaps in for a moment."""
        self.lab = lab
        self.mode = mode or lab.dut_mode
        self.dp = None
        self.sock = None
        if self.mode == "pgwu":
            self.dp = Dataplane(lab.pin_dir)
        elif self.mode == "socket":
            self.sock = SockStats(lab.pin_dir)
            self._rcvbuf_probe()
        elif self.mode != "fwd":
            raise UserError(f"lab {lab.name}: DUT mode {self.mode} has no counters to measure; "
                            "use a lab with --dut pgwu, socket or fwd")

    def close(self) -> None:
        if self.dp:
            self.dp.close()
        if self.sock:
            self.sock.close()
        if self.rcvbuf_probe:
            self.rcvbuf_probe.close()
            self.rcvbuf_probe = None

    def _rcvbuf_probe(self) -> RcvbufProbe | None:
        """With the gro knob on, the probe that counts the socket-buffer drops per G-PDU (the kernel
        counts a merged datagram once: gtplab.dut.sockdrop), loaded once and kept while this
        LocalDut lives (the sockets of pgwu socket may come and go: the counts are the probe's).
        Without gro nothing is loaded and Udp RcvbufErrors is exact. A probe that cannot load is
        said in rx_path (rcvbuf_drops.error), and the drops stay counted per datagram."""
        if self.rcvbuf_probe is None and self.rcvbuf_probe_error is None:
            knobs = self.lab.socket_knobs()
            if knobs is not None and knobs.gro:
                try:
                    self.rcvbuf_probe = RcvbufProbe(self.lab.dut_ns)
                except OSError as e:
                    self.rcvbuf_probe_error = str(e)
        return self.rcvbuf_probe

    def counters(self) -> dict[tuple[str, str], int]:
        if self.sock is not None:
            return self._socket_counters()
        if self.dp is None:
            return fwd.counters(self.lab.pin_dir)
        return {k: p for k, (p, _) in self.dp.stats().items()}

    def kernel_snmp(self) -> dict[str, dict[str, int]]:
        """The DUT netns's SNMP MIB: through the socket path's /proc/PID/net (no process started),
        else read by a `cat` in the netns. Its Udp6 counters (/proc/net/snmp6: the socket path's N3
        IPv6 socket, GTP-U over IPv6) are added to Udp's, as gtplab.dut.kernelpath adds them: a
        G-PDU over IPv6 with a zero or wrong UDP checksum is dropped by the kernel before the socket
        path reads it, in Udp6 InCsumErrors."""
        pid = self.lab.socket_pid() if self.mode == "socket" else None
        mib = rxstats.snmp_of_netns(self.lab.dut_ns, pid)
        udp = dict(mib.get("Udp", {}))
        for k, v in rxstats.snmp6(rxstats.snmp6_of_netns(self.lab.dut_ns, pid), "Udp6").items():
            udp[k] = udp.get(k, 0) + v
        mib["Udp"] = udp
        return mib

    def _socket_counters(self) -> dict[tuple[str, str], int]:
        """The socket path's counters and the kernel's drops on its way in, once they hold still
        for SETTLE_TICKS of its main thread (packets still queued in a socket when the traffic
        stopped are counted, and the drops at each socket are folded in every tick), at most 3 s."""
        deadline = time.monotonic() + 3.0
        last, since = None, None
        while True:
            w = self.sock.words()
            if w is None:
                raise UserError(f"lab {self.lab.name}: no pgwu socket has run (no {self.sock.path})")
            cur = self.sock.counters(w)
            for t in self.sock.threads(w):
                if t["direction"] == "downlink" and t["sock_drops"]:
                    key = ("kernel_packet_socket_drops", "drop")
                    cur[key] = cur.get(key, 0) + t["sock_drops"]
            mib = self.kernel_snmp()
            for table, name in KERNEL_DROPS:
                n = mib.get(table, {}).get(name, 0)
                if n:
                    cur[(f"kernel_{table.lower()}_{name}".lower(), "drop")] = n
            probe = self._rcvbuf_probe()
            if probe is not None:
                # the full socket buffers' drops in G-PDUs, the probe's count since it was attached
                # on top of the kernel's count then (Udp RcvbufErrors: a delta across the attach
                # stays continuous); the kernel's count of datagrams is in rx_path
                seg = probe.read()["segments"]
                if self._probe_base is None:
                    self._probe_base = mib.get("Udp", {}).get("RcvbufErrors", 0) - seg
                n = self._probe_base + seg
                if n:
                    cur[RCVBUF_KEY] = n
                else:
                    cur.pop(RCVBUF_KEY, None)
            ip = mib.get("Ip", {})
            merged = ip.get("ReasmReqds", 0) - ip.get("ReasmOKs", 0)
            if merged:
                # fragments the kernel took to reassemble, beyond one per datagram it made: each
                # datagram is then counted once by the socket path
                cur[("kernel_ip_reasm_absorbed", "pass")] = merged
            ticks = self.sock.header(w)["ticks"]
            if cur != last:
                last, since = cur, ticks
            elif ticks >= since + SETTLE_TICKS or time.monotonic() > deadline:
                return cur
            time.sleep(0.025)

    def layout(self) -> dict | None:
        return self.lab.state.get("cpu_layout")

    def _ethtool(self, ns: str, ifname: str) -> dict[str, int]:
        p = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "ethtool", "-S", ifname],
                           capture_output=True, text=True, timeout=30)
        out = {}
        for line in p.stdout.splitlines()[1:]:
            k, _, v = line.partition(":")
            with contextlib.suppress(ValueError):
                out[k.strip()] = int(v)
        return out

    def link(self) -> dict[str, dict[str, int]]:
        acc, sgi = self.lab.ports
        return {"gen_access": self._ethtool(self.lab.gen_ns, acc.ifname),
                "gen_sgi": self._ethtool(self.lab.gen_ns, sgi.ifname),
                "dut_access": self._ethtool(self.lab.dut_ns, acc.dut_ifname),
                "dut_sgi": self._ethtool(self.lab.dut_ns, sgi.dut_ifname)}

    @staticmethod
    def link_delta(before, after, direction: str) -> dict[str, int]:
        """DUT ingress XDP packets, losses generator -> DUT and DUT -> generator (veth xdp_xmit errors)."""
        def d(dev, key):
            return after[dev].get(key, 0) - before[dev].get(key, 0)
        gin, din, dout = (("gen_access", "dut_access", "dut_sgi") if direction == "uplink"
                          else ("gen_sgi", "dut_sgi", "dut_access"))
        other_in = "dut_sgi" if direction == "uplink" else "dut_access"
        gen_out = "gen_sgi" if direction == "uplink" else "gen_access"
        # (TRex's af_packet sends through veth_xmit, not XDP: a frame the veth refuses because the
        # DUT's ring is full is counted in the veth's tx_dropped, but af_packet keeps it in its ring
        # and sends it again: measured, the DUT received every packet TRex counted while tx_dropped
        # rose by up to 346. So tx_dropped is not a loss, and is not read.)
        return {"dut_rx": d(din, "rx_queue_0_xdp_packets"),
                "lost_in": d(gin, "tx_queue_0_xdp_xmit_errors"),
                "lost_out": d(dout, "tx_queue_0_xdp_xmit_errors"),
                "other_side_rx": d(other_in, "rx_queue_0_xdp_packets"),
                # what reached the generator's receiving port (its XDP program saw it), counted by
                # the kernel: a generator that receives with a socket (TRex) may still lose it there
                "gen_port_rx": d(gen_out, "rx_queue_0_xdp_packets")}

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        if self.mode == "socket":
            return None             # no XDP program of the DUT's: its cost is its threads' CPU time
        if self.dp is None:
            with bpf.Prog.pinned(os.path.join(self.lab.pin_dir, fwd.PROG_PIN)) as prog:
                i = prog.info()
                return {name: (int(i.run_time_ns), int(i.run_cnt)) for name in PROG.values()}
        out = {}
        for name, prog in self.dp.progs.items():
            i = prog.info()
            out[name] = (int(i.run_time_ns), int(i.run_cnt))
        return out

    def dut_threads(self) -> list[int]:
        """The threads whose CPU time is the DUT's: its receive NAPI kthreads, and the socket path's
        own threads (its workers and main thread) in socket mode."""
        tids = list(self.lab.dut_threads())
        pid = self.lab.socket_pid() if self.mode == "socket" else None
        if pid:
            with contextlib.suppress(OSError):
                tids += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        return tids

    def rx_path(self) -> dict:
        """A snapshot of the DUT side's receive path (gtplab.measure.rxpath takes the deltas):
        softnet_stat per CPU (the host's), the DUT netns's SNMP MIB, its links' counters, and each
        DUT thread (name, the CPU it last ran on, run time)."""
        threads = {}
        for tid in self.dut_threads():
            t = rxstats.task(tid)
            if t:
                threads[tid] = t
        out = {"softnet": rxstats.softnet(), "snmp": self.kernel_snmp(),
               "links": rxstats.link_stats(self.lab.dut_ns), "threads": threads}
        if self.mode == "socket" and self._rcvbuf_probe() is not None:
            out["rcvbuf_probe"] = dict(self.rcvbuf_probe.read(), source=PROBE_SOURCE)
        elif self.rcvbuf_probe_error:
            out["rcvbuf_probe"] = {"error": self.rcvbuf_probe_error}
        return out

    def cpu_seconds(self) -> dict[str, float] | None:
        """{"threads": CPU seconds of the DUT's threads (dut_threads), "cpus": busy seconds of the
        DUT CPUs, less the lab's spinner that keeps them awake (gtplab.lab.awake): its time is the
        lab's own}."""
        lay = self.layout()
        spin = sum(thread_cpu_ns(t) for t in self.lab.awake_threads()) / 1e9
        return {"threads": sum(thread_cpu_ns(t) for t in self.dut_threads()) / 1e9,
                "cpus": (cpus_busy_seconds(lay["dut"]) if lay else cpus_busy_seconds()) - spin}

    @contextlib.contextmanager
    def bpf_stats(self):
        """kernel.bpf_stats_enabled while the block runs (BPF_ENABLE_STATS: off again when the fd closes)."""
        fd = bpf.enable_stats()
        try:
            yield
        finally:
            os.close(fd)

    def install_bearers(self, path: str) -> None:
        if self.mode == "fwd":
            return          # the reference forwarder forwards every frame: it has no bearers
        self.lab.pgwu("session", "flush")
        self.lab.pgwu("session", "load", path, timeout=600)
