"""The lab's reference DUT (`gtplab lab up --dut fwd`, lab config `dut.mode: fwd`): a plain XDP
forwarder (fwd.bpf.c) between the two DUT ports, with the PGW-U's CPU layout. Used by gtplab/lab/topology.py
to attach it and by gtplab/dut/local.py to read its counters in the PGW-U's shape, so the same trial,
conservation and NDR search run on it (docs/lab.md: "A reference DUT").

Pinned in the lab's DUT pin dir: fwd_prog, fwd_ports, fwd_stats.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from gtplab.errors import require_built
from gtplab.kernel import bpf
from gtplab.kernel.libbpf import BpfObject

FWD_OBJ = Path(__file__).resolve().parent / "fwd.bpf.o"
# enum fwd_reason of fwd.h, as (reason, verdict) keys in the PGW-U's counter shape
REASONS = (("fwd_fwd", "redirect"), ("drop_short", "drop"), ("drop_no_port", "drop"))
PROG_PIN, PORTS_PIN, STATS_PIN = "fwd_prog", "fwd_ports", "fwd_stats"


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def load(pin_dir: str) -> str:
    """Load fwd.bpf.o and pin its program and maps in pin_dir; returns the program's pin path."""
    require_built(FWD_OBJ)
    os.makedirs(pin_dir, exist_ok=True)
    obj = BpfObject(FWD_OBJ)
    try:
        bpf.obj_pin(obj.prog_fd("xdp_fwd"), os.path.join(pin_dir, PROG_PIN))
        bpf.obj_pin(obj.map("fwd_ports").fd, os.path.join(pin_dir, PORTS_PIN))
        bpf.obj_pin(obj.map("fwd_stats").fd, os.path.join(pin_dir, STATS_PIN))
    finally:
        obj.close()     # the pins keep program and maps
    return os.path.join(pin_dir, PROG_PIN)


def set_port(pin_dir: str, in_ifindex: int, out_ifindex: int, src_mac: str, dst_mac: str) -> None:
    """Frames arriving on in_ifindex leave through out_ifindex, from src_mac to dst_mac."""
    with bpf.Map.pinned(os.path.join(pin_dir, PORTS_PIN)) as m:
        m.update(struct.pack("<I", in_ifindex),
                 struct.pack("<I", out_ifindex) + _mac(src_mac) + _mac(dst_mac))


def counters(pin_dir: str) -> dict[tuple[str, str], int]:
    """{(reason, verdict): packets} summed over CPUs, as gtplab.measure.conservation.DutDelta reads them."""
    out = {}
    with bpf.Map.pinned(os.path.join(pin_dir, STATS_PIN)) as m:
        for i, key in enumerate(REASONS):
            per_cpu = m.lookup(struct.pack("<I", i)) or []
            out[key] = sum(struct.unpack_from("<Q", v, 0)[0] for v in per_cpu)
    return out
