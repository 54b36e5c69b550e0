"""A port of the embedded engine: what the caller names (PortSpec) and what the client keeps of it
(Port), as TRex keeps a port's state in trex_stl_port.py apart from the client users call.

Each port gets its own copy of the BPF object (BPF_OBJ): tg_rx attached to the interface (counts,
per-stream trailer stats, capture), and tg_tx run by the port's sending threads
(gtplab.traffic.engine.pacing), worker k with objs[k]. A Stream is one stream added to a port: its
slot in the port's maps, its compiled program, its rate and progress in the latest transmission.
"""

from __future__ import annotations

import base64
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
    attach mode of the receive program ("native" needed for veth peers of XDP_TX/redirect).
    src_mac, dst_mac: the port's own address and its peer's, as TRex's port configuration has them
    (L2 mode): a stream whose flags say "MACs from the port" (TRex's default, flags 0) gets them
    written into its frames; None: its frames keep theirs."""
    port_id: int
    netns: str | None
    ifname: str
    speed_bps: float = 10e9
    mode: str = "native"
    src_mac: str | None = None
    dst_mac: str | None = None


def port_macs(js: dict, spec: PortSpec) -> dict:
    """The stream as TRex sends it from this port: its frame's source MAC the port's unless flags
    bit 0 (mac_src_override_by_pkt), its destination the port's peer unless flags bits 1-2
    (mac_dst_override_mode) say otherwise. A stream without flags (hand-built JSON) is left as is."""
    flags = js.get("flags")
    if flags is None or not (spec.src_mac or spec.dst_mac):
        return js
    frame = bytearray(base64.b64decode(js["packet"]["binary"]))
    if spec.dst_mac and not (flags >> 1) & 3:
        frame[0:6] = bytes.fromhex(spec.dst_mac.replace(":", ""))
    if spec.src_mac and not flags & 1:
        frame[6:12] = bytes.fromhex(spec.src_mac.replace(":", ""))
    return {**js, "packet": {**js["packet"], "binary": base64.b64encode(bytes(frame)).decode()}}


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
        self.bg_out_fd = -1                         # tg_bg_out on the port's tc egress
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
