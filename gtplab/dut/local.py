"""The embedded lab's DUT seen by a measurement: LocalDut reads the lab's PGW-U (or the reference
forwarder) through its pinned maps and programs, the veths' ethtool counters, and the CPU time of
the DUT's NAPI kthreads. Used by gtplab.measure.runner.Runner (the default DUT of a local backend) and
by the tests. A gtplab.dut.probe.DutProbe, as gtplab.dut.metrics.MetricsDut is.
"""

from __future__ import annotations

import contextlib
import os
import subprocess

from gtplab.dut import PROG, fwd
from gtplab.dut.dataplane import Dataplane
from gtplab.errors import UserError
from gtplab.kernel import bpf
from gtplab.kernel.threads import thread_cpu_ns


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

    def __init__(self, lab, mode: str | None = None):
        """mode: what to read (default the lab's DUT mode); "fwd" on a PGW-U lab reads the reference
        forwarder that gtplab.dut.reference swaps in for a moment."""
        self.lab = lab
        self.mode = mode or lab.dut_mode
        self.dp = None
        if self.mode == "pgwu":
            self.dp = Dataplane(lab.pin_dir)
        elif self.mode != "fwd":
            raise UserError(f"lab {lab.name}: DUT mode {self.mode} has no counters to measure; "
                            "use a lab with --dut pgwu or fwd")

    def close(self) -> None:
        if self.dp:
            self.dp.close()

    def counters(self) -> dict[tuple[str, str], int]:
        if self.dp is None:
            return fwd.counters(self.lab.pin_dir)
        return {k: p for k, (p, _) in self.dp.stats().items()}

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

    def prog_stats(self) -> dict[str, tuple[int, int]]:
        if self.dp is None:
            with bpf.Prog.pinned(os.path.join(self.lab.pin_dir, fwd.PROG_PIN)) as prog:
                i = prog.info()
                return {name: (int(i.run_time_ns), int(i.run_cnt)) for name in PROG.values()}
        out = {}
        for name, prog in self.dp.progs.items():
            i = prog.info()
            out[name] = (int(i.run_time_ns), int(i.run_cnt))
        return out

    def cpu_seconds(self) -> dict[str, float] | None:
        """{"threads": CPU seconds of the DUT's NAPI kthreads, "cpus": busy seconds of the DUT CPUs,
        less the lab's spinner that keeps them awake (gtplab.lab.awake): its time is the lab's own}."""
        lay = self.layout()
        spin = sum(thread_cpu_ns(t) for t in self.lab.awake_threads()) / 1e9
        return {"threads": sum(thread_cpu_ns(t) for t in self.lab.dut_threads()) / 1e9,
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
        if self.dp is None:
            return          # the reference forwarder forwards every frame: it has no bearers
        self.lab.pgwu("session", "flush")
        self.lab.pgwu("session", "load", path, timeout=600)
