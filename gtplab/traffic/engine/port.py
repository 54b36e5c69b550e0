"""A port of the embedded engine: what the caller names (PortSpec) and what the client keeps of it
(Port), as TRex keeps a port's state in trex_stl_port.py apart from the client users call.

Each port gets its own copy of the BPF object (BPF_OBJ): tg_rx attached to the interface (counts,
per-stream trailer stats, capture), and tg_tx run by the port's sending threads
(gtplab.traffic.engine.pacing), worker k with objs[k]. A Stream is one stream added to a port: its
slot in the port's maps, its compiled program, its rate and progress in the latest transmission.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine.capture import RingReader
from gtplab.traffic.engine.vm import CompiledStream

BPF_OBJ = Path(__file__).resolve().parent / "bpf" / "trafficgen.bpf.o"   # built by bpf/Makefile


@dataclass
class PortSpec:
    """One generator port: interface `ifname` inside network namespace `netns` (None: this one).

    port_id is TRex's port number (0 = access side, 1 = SGi side in gtplab's labs). speed_bps is
    the nominal line rate that percentage rates and "%" multipliers refer to. mode is the XDP
    attach mode of the receive program ("native" needed for veth peers of XDP_TX/redirect)."""
    port_id: int
    netns: str | None
    ifname: str
    speed_bps: float = 10e9
    mode: str = "native"


@dataclass
class Stream:
    sid: int
    port: int
    slot: int
    cs: CompiledStream
    pps: float = 0.0
    sent: int = 0
    done: bool = False
    cached: int = 0         # frames of its program prebuilt in the cache map (0: runs it per packet)


class Port:
    def __init__(self, spec: PortSpec):
        self.spec = spec
        self.obj: kernel.BpfObject | None = None     # receive program, and worker 0's transmit
        self.tx_objs: list[kernel.BpfObject] = []   # one per extra sending thread (worker 1..)
        self.link_fd = -1
        self.park_fds: list[int] = []
        self.streams: dict[int, Stream] = {}
        self.threads: list[threading.Thread] = []
        self.stop_ev = threading.Event()
        self.error: BaseException | None = None
        self.t_start = 0.0
        self.t_end = 0.0
        self.paced = True       # False at 100 % of line rate: as fast as the engine goes
        self.calls = 0
        self.max_call = 0
        self.cpu_s = 0.0        # CPU seconds the sending threads used in the latest transmission
        self.wall_s = 0.0       # and the seconds they ran
        self.ring: RingReader | None = None
        self.cache_used = 0     # prebuilt frames handed out of each object's cache map

    @property
    def objs(self) -> list[kernel.BpfObject]:
        """Worker k sends with objs[k]: its own streams, variables and counters (no sharing)."""
        return [self.obj] + self.tx_objs

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)
