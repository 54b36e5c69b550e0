"""The reference forwarder swapped in for the PGW-U on the lab's own DUT ports, for a moment: the
DUT's cost above the reference in the same run, on the same CPUs and veths (docs/lab.md, "What the lab
can resolve").

    ref = Reference(lab)                     # loads the forwarder into the lab's pin dir (once)
    with ref.swapped():                      # xdp_access/xdp_sgi -> xdp_fwd on both DUT ports
        ... trials, read with ref.probe ...  # a LocalDut of the forwarder's counters and program
    # the PGW-U's programs are back

The swap is BPF_LINK_UPDATE on the PGW-U's own XDP links (`pgwu attach` pins them as
link_xdp_<ifname>): one step per port, the links and the veths' receive setup stay (a detach and
attach would make the DUT's NAPI threads anew, unpinned), the PGW-U's maps and bearers stay loaded.
Frames that cross the swap are forwarded by one program or the other, never dropped by the swap.

Used by gtplab.measure.runner.Runner.case_costs. Takes the lab as it is (gtplab.lab.topology.Lab);
imports nothing of gtplab.lab.
"""

from __future__ import annotations

import contextlib
import os
import socket

from gtplab.dut import fwd
from gtplab.dut.local import LocalDut
from gtplab.errors import UserError
from gtplab.kernel import bpf
from gtplab.kernel.netns import run_in

LINK_PREFIX = "link_xdp_"      # PGWU_XDP_LINK_PREFIX, dataplane/pgwu_cli.h
PGWU_PROGS = ("xdp_access", "xdp_sgi")   # by port: access, SGi


class Reference:
    """The reference forwarder, loaded beside the PGW-U in a lab's pin dir, ready to be swapped in."""

    def __init__(self, lab):
        if lab.dut_mode != "pgwu":
            raise UserError(f"lab {lab.name}: the reference is swapped in for the PGW-U; this lab's DUT is "
                            f"{lab.dut_mode}")
        self.lab = lab
        self.links = [os.path.join(lab.pin_dir, LINK_PREFIX + p.dut_ifname) for p in lab.ports]
        missing = [p for p in self.links if not os.path.exists(p)]
        if missing:
            raise UserError(f"lab {lab.name}: no PGW-U XDP link pinned at {', '.join(missing)} (pgwu attach)")
        if not os.path.exists(os.path.join(lab.pin_dir, fwd.PROG_PIN)):
            fwd.load(lab.pin_dir)
        idx = run_in(lab.dut_ns, lambda: [socket.if_nametoindex(p.dut_ifname) for p in lab.ports])
        for (i, p), q in zip(enumerate(lab.ports), reversed(lab.ports)):
            fwd.set_port(lab.pin_dir, idx[i], idx[1 - i], q.dut_mac, q.mac)
        self.probe = LocalDut(lab, mode="fwd")

    @contextlib.contextmanager
    def swapped(self):
        """The forwarder on both DUT ports while the block runs; the PGW-U's programs back after it,
        whatever happened (each link is given back the program it had)."""
        fds = []
        try:
            fwd_prog = bpf.obj_get(os.path.join(self.lab.pin_dir, fwd.PROG_PIN))
            fds.append(fwd_prog)
            links = [bpf.obj_get(p) for p in self.links]
            fds += links
            progs = [bpf.obj_get(os.path.join(self.lab.pin_dir, name)) for name in PGWU_PROGS]
            fds += progs
            done = []
            try:
                for link, prog in zip(links, progs):
                    bpf.link_update(link, fwd_prog, old_prog_fd=prog)
                    done.append((link, prog))
                yield self.probe
            finally:
                for link, prog in done:
                    bpf.link_update(link, prog, old_prog_fd=fwd_prog)
        finally:
            for fd in fds:
                os.close(fd)

    def close(self) -> None:
        self.probe.close()
