"""LocalClient: TRex's STLClient API over the embedded BPF traffic engine.

The same runner code drives either a TRex server (trex.stl.api.STLClient) or this engine. Ports
are network interfaces inside network namespaces (PortSpec); each port gets its own copy of the
BPF object: tg_rx attached to the interface (counts, per-stream trailer stats, capture), and
tg_tx run with BPF_PROG_RUN live frames from a transmitter thread that lives in the port's
namespace and paces the port's streams by the clock.

Typical use (what gtplab's runner does):

    c = LocalClient(ports=[PortSpec(0, "gl-ab12-gen", "acc0"), PortSpec(1, "gl-ab12-gen", "sgi0")])
    c.connect()
    c.reset(ports=[0, 1])
    c.load_profile("trex_profiles/gtpu_uplink.py", ports=[0], tunables={"flows": 100})
    c.start(ports=[0], mult="50kpps", duration=10)
    c.wait_on_traffic(ports=[0], timeout=30)
    stats = c.get_stats()            # {0: {opackets, ...}, 1: {...}, "total", "flow_stats", "latency"}
    c.disconnect()

Errors in what is asked (unsupported instruction, bad mult, unknown port) raise EngineError (a
gtplab.errors.UserError) before anything starts.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gtplab.kernel import bpf
from gtplab.kernel import libbpf as kernel
from gtplab.rates import FCS_LEN, L1_OVERHEAD, RateError, l1_bps, parse_mult
from gtplab.traffic.engine.capture import RingReader, write_pcap
from gtplab.traffic.engine.vm import (CACHE_FRAME, CACHE_FRAMES, MAX_PGIDS, MAX_STREAMS, MAX_VARS,
                                      STATE_TX_OFF, CompiledStream, EngineError, compile_stream)

BPF_OBJ = Path(__file__).resolve().parent / "bpf" / "trafficgen.bpf.o"   # built by bpf/Makefile
_FLOW_HDR = struct.Struct("<QQIIQQQQQQQQ")     # struct tg_flow without hist
_LAT_BUCKETS = 256
_RING_SIZE = 8 << 20
# Frames per batch of a live-frames run call (the kernel's page pool, and how often it flushes the
# frames out): the kernel's maximum, 256, as fast as it goes (unpaced); 64 when paced, so frames leave
# within a few microseconds of their time.
DEFAULT_BATCH = 256
PACED_BATCH = 64
MAX_CALL_FRAMES = 1 << 16
# Runs per call of a paced stream (each run sends the frame that is due, or nothing): ~15 ms. Few
# calls matter beyond their own cost: each call makes a page pool, and the frames still in flight
# when it returns make the kernel release that pool later, from a kworker on the sending CPU whose
# every release walks the table of all pools not yet released (mem_allocator_disconnect): at
# thousands of calls a second that kworker alone took a whole CPU here (perf, docs/engine.md).
PACED_CALL = 1 << 18
PACED_CALL_SHARED = 1 << 14    # ~1.5 ms: a port with several paced streams (IMIX) takes turns
# Paced streams send at most this many frames back to back: half a veth receive ring (256). A
# transmitter that was held up (scheduling, a VM's steal) does not catch up with a burst the DUT's
# ring cannot hold; the frames it missed are not sent (counted), and the rate achieved shows it.
MAX_BURST = 128
UNPARKED_LATE_NS = 50_000_000
_PACE = struct.Struct("<QQQQQQQ")    # struct tg_pace


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
class _Stream:
    sid: int
    port: int
    slot: int
    cs: CompiledStream
    pps: float = 0.0
    sent: int = 0
    done: bool = False
    cached: int = 0         # frames of its program prebuilt in the cache map (0: runs it per packet)


def prebuild_frames(obj: kernel.BpfObject, cs: CompiledStream, slot: int) -> list[bytes] | None:
    """The frames of one period of a stream's program (cs.period() of them), made by tg_tx itself
    run not live on the template, the stream loaded (uncached) in slot of obj. Its state is set
    back to the start. None when the program is not periodic or fails on a frame (it then runs,
    and counts its errors, per packet)."""
    n = cs.period()
    if not n:
        return None
    key = struct.pack("<I", slot)
    obj.map("cur_slot").update(b"\0\0\0\0", b"\0\0\0\0")     # the slot from data_meta
    prog = obj.prog_fd("tg_tx")
    frames = []
    try:
        for _ in range(n):
            verdict, f = kernel.run_once(prog, cs.frame, slot)
            if verdict != bpf.XDP_TX or len(f) != len(cs.frame):
                return None
            frames.append(f)
    finally:
        obj.map("state").update(key, cs.state_value())
    return frames


def install_cache(obj: kernel.BpfObject, cs: CompiledStream, slot: int, frames: list[bytes],
                  base: int) -> None:
    """Store frames at cache entries base.. of obj and switch the stream in slot to them, its
    state (cache_pos 0, counters 0) from the start."""
    c = obj.map("cache")
    for j, f in enumerate(frames):
        c.update(struct.pack("<I", base + j), f.ljust(CACHE_FRAME, b"\0"))
    key = struct.pack("<I", slot)
    obj.map("state").update(key, cs.state_value())
    obj.map("streams").update(key, cs.stream_value(cache=(len(frames), base)))


def _due(s: _Stream, elapsed: float) -> int:
    """Packets stream s should have sent `elapsed` seconds after the port started."""
    cs = s.cs
    t = elapsed - cs.isg_us / 1e6
    if t <= 0 or s.pps <= 0:
        return 0
    if cs.mode == "continuous":
        return int(t * s.pps)
    if cs.mode == "single_burst":
        return min(cs.total_pkts, int(t * s.pps))
    burst_t = cs.pkts_per_burst / s.pps
    period = burst_t + cs.ibg_us / 1e6
    k = int(t // period)
    if k >= cs.count:
        return cs.count * cs.pkts_per_burst
    return k * cs.pkts_per_burst + min(cs.pkts_per_burst, int((t - k * period) * s.pps))


def _total(s: _Stream) -> float:
    cs = s.cs
    if cs.mode == "single_burst":
        return cs.total_pkts
    if cs.mode == "multi_burst":
        return cs.count * cs.pkts_per_burst
    return math.inf


class _Port:
    def __init__(self, spec: PortSpec):
        self.spec = spec
        self.obj: kernel.BpfObject | None = None     # receive program, and worker 0's transmit
        self.tx_objs: list[kernel.BpfObject] = []   # one per extra sending thread (worker 1..)
        self.link_fd = -1
        self.park_fds: list[int] = []
        self.streams: dict[int, _Stream] = {}
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


class LocalClient:
    """TRex STLClient look-alike on the embedded engine (see the module docstring)."""

    def __init__(self, ports: list[PortSpec], batch_size: int = DEFAULT_BATCH,
                 cpus: list[int] | None = None, park: list[tuple[str | None, str]] = (),
                 on_attach=None):
        """cpus: the CPUs the engine's threads run on (None: wherever the caller's do). With more
        than one, each port sends with one thread per CPU, each pinned to its CPU and running its
        own copy of the transmit program and streams: a continuous stream's rate is shared out
        among them (each runs the stream's variables from their start, as TRex's cores do without
        split_to_cores), while streams with per-stream statistics (one sequence) and bursts (exact
        counts) are sent by the first thread alone.
        park: spare interfaces (netns, ifname), one per port and thread: each transmit program is
        attached there too, so the kernel's XDP dispatcher holds it and BPF_PROG_RUN does not
        switch the dispatcher (two synchronize_rcu) at every call (docs/engine.md). Without
        them the engine works, slower. on_attach(): called after the receive programs are
        attached (the lab pins the new NAPI kthreads then)."""
        ids = [p.port_id for p in ports]
        if len(set(ids)) != len(ids):
            raise EngineError(f"duplicate port ids {ids}")
        self.ports = {p.port_id: _Port(p) for p in ports}
        self.batch_size = batch_size
        self.frame_cache = True     # prebuild periodic programs' frames (False: run them per packet)
        self.cpus = list(cpus) if cpus else None
        self.park = list(park)
        self.on_attach = on_attach
        self._next_sid = 1
        self._connected = False
        self._base: dict = {}
        self._captures: dict[int, dict] = {}
        self._next_cap = 1
        self._cap_lock = threading.Lock()
        self._run_t0 = 0.0

    # ---- connection -------------------------------------------------------------------------
    def connect(self) -> None:
        """Load one BPF object per port and attach its receive program to the port."""
        if self._connected:
            return
        try:
            for p in self.ports.values():
                p.obj = kernel.BpfObject(BPF_OBJ)
                rx = p.obj.prog_fd("tg_rx")
                spec = p.spec
                p.link_fd = kernel.in_netns(
                    spec.netns, lambda s=spec, fd=rx: kernel.xdp_link(fd, kernel.ifindex(s.ifname), s.mode))
                p.ring = RingReader(p.obj.map("cap_ring").fd, _RING_SIZE)
            for p in self.ports.values():
                p.tx_objs = [kernel.BpfObject(BPF_OBJ) for _ in range(self.workers - 1)]
            spares = iter(self.park)
            for k in range(self.workers):
                for p in self.ports.values():
                    ns, ifname = next(spares, (None, None))
                    if ifname is None:
                        break
                    tx = p.objs[k].prog_fd("tg_tx")
                    p.park_fds.append(kernel.in_netns(
                        ns, lambda i=ifname, fd=tx: kernel.xdp_link(fd, kernel.ifindex(i), "native")))
            if self.on_attach:
                self.on_attach()
        except BaseException:
            self._release()
            raise
        self._connected = True

    def disconnect(self) -> None:
        """Stop traffic, detach and unload everything this client created."""
        try:
            self.stop()
        finally:
            self._release()
            self._connected = False

    def _release(self) -> None:
        for p in self.ports.values():
            if p.ring:
                p.ring.close()
                p.ring = None
            if p.link_fd >= 0:
                os.close(p.link_fd)
                p.link_fd = -1
            for fd in p.park_fds:
                os.close(fd)
            p.park_fds = []
            for o in p.tx_objs:
                o.close()
            p.tx_objs = []
            if p.obj:
                p.obj.close()
                p.obj = None
            p.streams.clear()
            p.cache_used = 0

    @property
    def workers(self) -> int:
        """Sending threads per port: one per generator CPU."""
        return len(self.cpus) if self.cpus else 1

    def _ports(self, ports) -> list[_Port]:
        if not self._connected:
            raise EngineError("not connected (call connect() first)")
        if ports is None:
            return list(self.ports.values())
        if isinstance(ports, int):
            ports = [ports]
        out = []
        for pid in ports:
            if pid not in self.ports:
                raise EngineError(f"unknown port {pid} (have {sorted(self.ports)})")
            out.append(self.ports[pid])
        return out

    def get_all_ports(self) -> list[int]:
        return sorted(self.ports)

    def reset(self, ports=None) -> None:
        """Stop, remove all streams and clear the stats of ports (TRex: reset)."""
        self.stop(ports)
        self.remove_all_streams(ports)
        self.clear_stats(ports)

    # ---- streams ----------------------------------------------------------------------------
    def add_streams(self, streams, ports=None) -> list[int]:
        """Add TRex stream JSON dicts (STLStream.to_json()) to each port; returns stream ids.

        All streams are compiled and checked first: an unsupported instruction or field raises
        EngineError naming it, and then nothing has been added."""
        if isinstance(streams, dict):
            streams = [streams]
        targets = self._ports(ports)
        compiled = [compile_stream(js) for js in streams]
        pgs: dict[int, str] = {}
        for p in self.ports.values():
            for s in p.streams.values():
                if s.cs.pg_id is not None:
                    pgs[s.cs.pg_id] = f"port {p.spec.port_id}"
        for p in targets:
            if len(p.streams) + len(compiled) > MAX_STREAMS:
                raise EngineError(f"port {p.spec.port_id}: more than {MAX_STREAMS} streams")
            for cs in compiled:
                if cs.pg_id is not None:
                    if cs.pg_id in pgs:
                        raise EngineError(f"flow_stats id {cs.pg_id} is already used ({pgs[cs.pg_id]})")
                    pgs[cs.pg_id] = f"port {p.spec.port_id}"
        if len(pgs) > MAX_PGIDS:
            raise EngineError(f"more than {MAX_PGIDS} flow_stats ids")
        ids = []
        for p in targets:
            if p.alive():
                raise EngineError(f"port {p.spec.port_id} is transmitting (stop it first)")
            used = {s.slot for s in p.streams.values()}
            for cs in compiled:
                slot = next(i for i in range(MAX_STREAMS) if i not in used)
                used.add(slot)
                s = _Stream(self._next_sid, p.spec.port_id, slot, cs)
                self._next_sid += 1
                self._load_stream(p, s)
                p.streams[s.sid] = s
                ids.append(s.sid)
        self._register_pgids()
        return ids

    def _load_stream(self, p: _Port, s: _Stream) -> None:
        key = struct.pack("<I", s.slot)
        for o in p.objs:
            o.map("streams").update(key, s.cs.stream_value())
            o.map("state").update(key, s.cs.state_value())
            o.map("pace").update(key, bytes(_PACE.size))
            tm = o.map("tmpl")
            tm.update(key, struct.pack("<II", len(s.cs.frame), 0) + s.cs.frame
                      + bytes(tm.value_size - 8 - len(s.cs.frame)))
            for var in s.cs.lists:
                for k, v in s.cs.list_entries(s.slot, var):
                    o.map("lists").update(k, v)
        self._prebuild(p, s)

    def _prebuild(self, p: _Port, s: _Stream) -> None:
        """The frame cache (struct tg_cframe in bpf/trafficgen.h), see prebuild_frames. Streams
        that do not qualify, or that find the port's cache full, run their program per packet."""
        n = s.cs.period()
        if not self.frame_cache or not n or p.cache_used + n > CACHE_FRAMES:
            return
        frames = prebuild_frames(p.objs[0], s.cs, s.slot)
        if frames is None:
            return
        base = p.cache_used
        p.cache_used += n
        for o in p.objs:
            install_cache(o, s.cs, s.slot, frames, base)
        s.cached = n

    def _register_pgids(self) -> None:
        """Every receive port tracks every flow-stats id of any port (the DUT may cross ports)."""
        pgs = {s.cs.pg_id for p in self.ports.values() for s in p.streams.values()
               if s.cs.pg_id is not None}
        for p in self.ports.values():
            m = p.obj.map("rx_flow")
            have = {struct.unpack("<I", k)[0] for k in m.keys()}
            for pg in pgs - have:
                m.update(struct.pack("<I", pg), bytes(m.value_size), bpf.BPF_NOEXIST)
            for pg in have - pgs:
                m.delete(struct.pack("<I", pg))

    def remove_all_streams(self, ports=None) -> None:
        for p in self._ports(ports):
            if p.alive():
                raise EngineError(f"port {p.spec.port_id} is transmitting (stop it first)")
            p.streams.clear()
            p.cache_used = 0
        self._register_pgids()

    def get_stream_id_list(self, ports=None) -> list[int]:
        return [sid for p in self._ports(ports) for sid in p.streams]

    def load_profile(self, path: str, ports=None, direction: int = 0, tunables: dict | None = None) -> list[int]:
        """Load a TRex STL profile (.py) with TRex's own client library in a subprocess (its
        bundled scapy 2.4.3 must stay out of this process), then add_streams on each port."""
        ids = []
        for p in self._ports(ports):
            streams = load_profile_streams(path, direction=direction, port_id=p.spec.port_id,
                                           tunables=tunables)
            ids += self.add_streams(streams, ports=[p.spec.port_id])
        return ids

    # ---- traffic ----------------------------------------------------------------------------
    def start(self, ports=None, mult="1", duration: float = -1, force: bool = True) -> None:
        """Start the streams of ports: mult scales each port's streams together (TRex semantics:
        a factor "2x", or a total for the port "10kpps", "1gbps" (L2), "1gbpsl1", "50%" of line
        rate); duration in seconds (-1: until stop() or the bursts end)."""
        targets = self._ports(ports)
        try:
            kind, val = parse_mult(mult)
        except RateError as e:
            raise EngineError(str(e)) from None
        for p in targets:
            if p.alive():
                if not force:
                    raise EngineError(f"port {p.spec.port_id} is already transmitting")
                self._stop_port(p)
            if not p.streams:
                raise EngineError(f"port {p.spec.port_id} has no streams")
            active = [s for s in p.streams.values() if s.cs.json.get("enabled", True)]
            base = [s.cs.pps(p.spec.speed_bps) for s in active]
            if kind == "factor":
                f = val
            else:
                if kind == "pps":
                    tot = sum(base)
                elif kind == "bps_l2":
                    tot = sum(b * (s.cs.l2_len() + FCS_LEN) * 8 for b, s in zip(base, active))
                else:
                    tot = sum(b * (s.cs.l2_len() + FCS_LEN + L1_OVERHEAD) * 8 for b, s in zip(base, active))
                target = val if kind != "percent" else val / 100 * p.spec.speed_bps
                f = target / tot
            p.paced = not (kind == "percent" and val >= 100)
            p.calls = p.max_call = 0
            p.cpu_s = p.wall_s = 0.0
            for s, b in zip(active, base):
                s.pps = b * f
                s.sent = 0
                s.done = False
            for s in p.streams.values():
                if s not in active:
                    s.done = True
        for p in targets:
            for s in p.streams.values():
                self._load_stream(p, s)      # fresh variables and sequence, like TRex's start
            self._reset_rx_sequence()
        if not self.is_traffic_active():
            self._run_t0 = time.monotonic()
        for p in targets:
            p.stop_ev = threading.Event()
            p.error = None
            p.t_start = time.monotonic()
            p.t_end = 0.0
            p.threads = [threading.Thread(target=self._tx_loop, args=(p, duration, k),
                                          name=f"tx-port{p.spec.port_id}-{k}", daemon=True)
                         for k in range(self.workers)]
            for t in p.threads:
                t.start()

    def _reset_rx_sequence(self) -> None:
        for p in self.ports.values():
            m = p.obj.map("rx_flow")
            for k, v in list(m.items()):
                v = bytearray(v)
                struct.pack_into("<II", v, 16, 0, 0)    # expected, started
                m.update(k, bytes(v))

    def _share(self, s: _Stream, k: int) -> float:
        """Worker k's rate of stream s (0: not this worker's)."""
        if self.workers == 1 or s.cs.pg_id is not None or s.cs.mode != "continuous":
            return s.pps if k == 0 else 0.0
        return s.pps / self.workers

    def _tx_loop(self, p: _Port, duration: float, k: int = 0) -> None:
        paced = []
        c0, w0 = time.thread_time(), time.monotonic()
        try:
            self._pin_thread(k)
            kernel.enter_netns(p.spec.netns)
            ifx = kernel.ifindex(p.spec.ifname)
            obj = p.objs[k]
            prog = obj.prog_fd("tg_tx")
            pps = {s.sid: self._share(s, k) for s in p.streams.values()}
            streams = [s for s in p.streams.values() if not s.done and pps[s.sid] > 0]
            sent = {s.sid: 0 for s in streams}
            done = set()
            cur = obj.map("cur_slot")
            # continuous streams at a rate and single bursts are paced in the kernel (struct tg_pace):
            # the loop only keeps calling; multi-bursts are paced here, by the clock; at 100 % the
            # engine goes flat out
            paced = [s for s in streams if (p.paced and s.cs.mode == "continuous") or s.cs.mode == "single_burst"]
            flat = [s for s in streams if not p.paced and s.cs.mode == "continuous"]
            runners = {s.sid: kernel.LiveRunner(prog, s.cs.frame, s.slot, ifx,
                                                PACED_BATCH if s in paced else self.batch_size, cur)
                       for s in streams}
            t0 = p.t_start
            t0_ns = int(t0 * 1e9)
            parked = len(p.park_fds) > k        # p.park_fds[k]: worker k's transmit program, parked
            bursts = [s for s in paced if s.cs.mode == "single_burst"]
            for s in paced:
                gap = round(256e9 / pps[s.sid])
                # unparked, every call sleeps in two synchronize_rcu (ms): catch up after them
                late = MAX_BURST * gap if parked else max(MAX_BURST * gap, UNPARKED_LATE_NS << 8)
                left = 0
                if s in bursts:     # exact count: never skip, catch up instead
                    late, left = (1 << 63), s.cs.total_pkts + 1
                obj.map("pace").update(struct.pack("<I", s.slot), _PACE.pack(
                    (t0_ns + int(s.cs.isg_us * 1e3)) << 8, gap,
                    t0_ns + int(duration * 1e9) if duration > 0 and s not in bursts else 0, late, 0, 0, left))
            # one call serves one stream: with several, short calls, so each waits little
            chunk = PACED_CALL if len(paced) <= 1 else PACED_CALL_SHARED
            while not p.stop_ev.is_set():
                now = time.monotonic()
                el = now - t0
                if duration > 0 and el >= duration:
                    el = duration
                busy = False
                for s in streams:
                    if s.sid in done:
                        continue
                    if s in paced or s in flat:
                        runners[s.sid].run(chunk if s in paced else MAX_CALL_FRAMES)
                        p.calls += 1
                        busy = True
                        if s in bursts and _PACE.unpack(obj.map("pace").lookup(struct.pack("<I", s.slot)))[6] == 1:
                            done.add(s.sid)         # the whole burst is out
                        continue
                    # one call per stream and round, so time, stop and duration are rechecked
                    # even when the rate asked for is more than the port can do
                    n = min(_due(s, el) - sent[s.sid], MAX_CALL_FRAMES)
                    if n > 0:
                        runners[s.sid].run(n)
                        sent[s.sid] += n
                        p.calls += 1
                        p.max_call = max(p.max_call, n)
                        busy = True
                    if sent[s.sid] >= _total(s):
                        done.add(s.sid)
                if len(done) == len(streams) or (duration > 0 and now - t0 >= duration):
                    if duration > 0 and not p.stop_ev.is_set():
                        # the frames each paced stream had due before the end (end_ns) while another
                        # stream's call ran: sent now, or counted as skipped, never left out
                        for s in paced:
                            runners[s.sid].run(MAX_BURST * 4)
                    break
                if not busy:
                    # next packet of any stream, at most 1 ms away (stop stays responsive)
                    wait = 0.001
                    for s in streams:
                        if s.sid not in done:
                            wait = min(wait, max(0.0, (sent[s.sid] + 1) / s.pps - el + s.cs.isg_us / 1e6))
                    if wait > 0:
                        p.stop_ev.wait(wait)
        except BaseException as e:
            p.error = p.error or e
        finally:
            # a paced port's last call may end a little after the kernel stopped sending (end_ns)
            end = time.monotonic()
            if paced and duration > 0:
                end = min(end, p.t_start + duration)
            p.t_end = max(p.t_end, end)
            p.cpu_s += time.thread_time() - c0
            p.wall_s += time.monotonic() - w0

    def _pin_thread(self, k: int = 0) -> None:
        if self.cpus:
            os.sched_setaffinity(0, [self.cpus[k]] if self.workers > 1 else self.cpus)

    def _stop_port(self, p: _Port) -> None:
        p.stop_ev.set()
        for t in p.threads:
            t.join()
        p.threads = []

    def stop(self, ports=None) -> None:
        """Stop transmitting on ports (all by default)."""
        if not self._connected:
            return
        for p in self._ports(ports):
            self._stop_port(p)
        self._raise_errors(ports)

    def _raise_errors(self, ports) -> None:
        for p in self._ports(ports):
            if p.error:
                e, p.error = p.error, None
                raise RuntimeError(f"port {p.spec.port_id} transmitter failed: {e}") from e

    def is_traffic_active(self, ports=None) -> bool:
        return any(p.alive() for p in self._ports(ports))

    def wait_on_traffic(self, ports=None, timeout: float | None = None, rx_delay_ms: float = 10) -> None:
        """Block until the ports' traffic ends (bursts done or duration over); TimeoutError if
        it has not after timeout seconds. Then waits rx_delay_ms for frames in flight."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self._ports(ports):
            for t in p.threads:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    raise TimeoutError(f"port {p.spec.port_id} still transmitting after {timeout} s")
            p.threads = []
        self._raise_errors(ports)
        time.sleep(rx_delay_ms / 1000)

    # ---- stats ------------------------------------------------------------------------------
    def _raw(self) -> dict:
        """Counters straight from the maps (monotonic since load)."""
        raw = {"port": {}, "pg_tx": {}, "pg_rx": {}}
        for pid, p in self.ports.items():
            tx_p = tx_b = skipped = 0
            for k, o in enumerate(p.objs):      # every sending thread's own counters
                st, pace = o.map("state"), o.map("pace")
                for s in p.streams.values():
                    v = st.lookup(struct.pack("<I", s.slot))
                    pk, by, _ = struct.unpack_from("<QQQ", v, STATE_TX_OFF)
                    tx_p += pk
                    tx_b += by + FCS_LEN * pk
                    skipped += _PACE.unpack(pace.lookup(struct.pack("<I", s.slot)))[4]
                    if s.cs.pg_id is not None and k == 0:    # sent by the first thread only
                        raw["pg_tx"][s.cs.pg_id] = {"port": pid, "pkts": pk, "bytes": by + FCS_LEN * pk}
            rx = p.obj.map("rx_port").lookup(b"\0\0\0\0")
            rx_p = sum(struct.unpack_from("<Q", c, 0)[0] for c in rx)
            rx_b = sum(struct.unpack_from("<Q", c, 8)[0] for c in rx)
            lost = sum(struct.unpack_from("<Q", c, 24)[0] for c in rx)
            raw["port"][pid] = {"opackets": tx_p, "obytes": tx_b, "ipackets": rx_p,
                                "ibytes": rx_b + FCS_LEN * rx_p, "cap_lost": lost, "tx_skipped": skipped}
            for k, v in p.obj.map("rx_flow").items():
                pg = struct.unpack("<I", k)[0]
                f = _FLOW_HDR.unpack_from(v, 0)
                hist = struct.unpack_from(f"<{_LAT_BUCKETS}Q", v, _FLOW_HDR.size)
                raw["pg_rx"][(pg, pid)] = {
                    "pkts": f[0], "bytes": f[1] + FCS_LEN * f[0], "dropped": f[4], "out_of_order": f[5],
                    "seq_too_high": f[6], "seq_too_low": f[7], "lat_min": f[8], "lat_max": f[9],
                    "lat_sum": f[10], "lat_cnt": f[11], "hist": hist}
        return raw

    def clear_stats(self, ports=None) -> None:
        """Zero the counters get_stats reports (a baseline is kept; the maps are not written)."""
        self._base = self._raw()

    def get_stats(self, ports=None) -> dict:
        """Stats in TRex's shape: {port_id: {...}, "total": {...}, "flow_stats": {pg_id: ...},
        "latency": {pg_id: ...}, "global": {...}}. Rates are averages over the port's last
        transmission (start to stop, or to now while running)."""
        raw = self._raw()
        base = self._base or {"port": {}, "pg_tx": {}, "pg_rx": {}}
        out: dict = {}
        total = {k: 0 for k in ("opackets", "ipackets", "obytes", "ibytes", "oerrors", "ierrors",
                                "tx_pps", "rx_pps", "tx_bps", "rx_bps", "tx_bps_L1", "rx_bps_L1")}
        sel = [p.spec.port_id for p in self._ports(ports)]
        for pid in sel:
            p = self.ports[pid]
            r, b = raw["port"][pid], base["port"].get(pid, {})
            d = {k: r[k] - b.get(k, 0) for k in ("opackets", "obytes", "ipackets", "ibytes")}
            secs = self._window(p)
            rsecs = self._rx_window()
            d.update(oerrors=0, ierrors=0, capture_lost=r["cap_lost"] - b.get("cap_lost", 0))
            # engine only: frames a paced stream gave up after its transmitter was held up, and
            # how it sent (paced in the kernel, or as fast as it goes; run calls, largest call)
            d["tx_skipped"] = r["tx_skipped"] - b.get("tx_skipped", 0)
            d["pacing"] = {"paced": p.paced, "calls": p.calls, "max_call_frames": p.max_call}
            d["tx_pps"] = d["opackets"] / secs if secs else 0.0
            d["rx_pps"] = d["ipackets"] / rsecs if rsecs else 0.0
            d["tx_bps"] = d["obytes"] * 8 / secs if secs else 0.0
            d["rx_bps"] = d["ibytes"] * 8 / rsecs if rsecs else 0.0
            d["tx_bps_L1"] = l1_bps(d["tx_bps"], d["tx_pps"])
            d["rx_bps_L1"] = l1_bps(d["rx_bps"], d["rx_pps"])
            d["tx_util"] = d["tx_bps_L1"] / p.spec.speed_bps * 100
            d["rx_util"] = d["rx_bps_L1"] / p.spec.speed_bps * 100
            out[pid] = d
            for k in total:
                total[k] += d[k]
        out["total"] = total
        out["flow_stats"], out["latency"] = self._pg_stats(raw, base)
        # TRex's cpu_util: % busy of the sending threads over their transmission (measured with
        # each thread's own CPU clock); TRex's queue_full and rx_drop_bps have no counterpart
        # here and are absent, not zero
        busy = [(p.cpu_s, p.wall_s) for p in self.ports.values() if p.wall_s]
        out["global"] = {"tx_pps": total["tx_pps"], "rx_pps": total["rx_pps"],
                         "tx_bps": total["tx_bps"], "rx_bps": total["rx_bps"],
                         "cpu_util": (100.0 * sum(c for c, _ in busy) / sum(w for _, w in busy)
                                      if busy and sum(w for _, w in busy) else None)}
        return out

    def _window(self, p: _Port) -> float:
        if not p.t_start:
            return 0.0
        end = p.t_end if p.t_end else time.monotonic()
        return max(0.0, end - p.t_start)

    def _rx_window(self) -> float:
        """Receive rates are over the span of the latest transmission of any port (a port
        may only receive)."""
        started = [p for p in self.ports.values() if p.t_start >= self._run_t0 > 0]
        if not started:
            return 0.0
        t0 = self._run_t0
        ends = [p.t_end if p.t_end else time.monotonic() for p in started]
        return max(0.0, max(ends) - t0)

    def _pg_stats(self, raw: dict, base: dict) -> tuple[dict, dict]:
        flow: dict = {"global": {"rx_err": {}, "tx_err": {}}}
        lat: dict = {"global": {"bad_hdr": 0, "old_flow": 0}}
        pgs = {s.cs.pg_id: s for p in self.ports.values() for s in p.streams.values()
               if s.cs.pg_id is not None}
        for pg, s in pgs.items():
            tx = raw["pg_tx"].get(pg, {"port": s.port, "pkts": 0, "bytes": 0})
            btx = base["pg_tx"].get(pg, {"pkts": 0, "bytes": 0})
            txp, txb = tx["pkts"] - btx["pkts"], tx["bytes"] - btx["bytes"]
            secs = self._window(self.ports[s.port])
            fs = {"tx_pkts": {s.port: txp, "total": txp}, "tx_bytes": {s.port: txb, "total": txb},
                  "rx_pkts": {"total": 0}, "rx_bytes": {"total": 0}}
            agg = {"dropped": 0, "out_of_order": 0, "seq_too_high": 0, "seq_too_low": 0,
                   "lat_min": None, "lat_max": 0, "lat_sum": 0, "lat_cnt": 0,
                   "hist": [0] * _LAT_BUCKETS}
            for pid in self.ports:
                r = raw["pg_rx"].get((pg, pid))
                if r is None:
                    continue
                b = base["pg_rx"].get((pg, pid))
                def d(k):
                    return r[k] - (b[k] if b else 0)
                fs["rx_pkts"][pid] = d("pkts")
                fs["rx_bytes"][pid] = d("bytes")
                fs["rx_pkts"]["total"] += d("pkts")
                fs["rx_bytes"]["total"] += d("bytes")
                for k in ("dropped", "out_of_order", "seq_too_high", "seq_too_low", "lat_sum", "lat_cnt"):
                    agg[k] += d(k)
                hist = [x - (b["hist"][i] if b else 0) for i, x in enumerate(r["hist"])]
                agg["hist"] = [a + h for a, h in zip(agg["hist"], hist)]
                if r["lat_cnt"]:    # min/max are not resettable counters: since load
                    agg["lat_min"] = r["lat_min"] if agg["lat_min"] is None else min(agg["lat_min"], r["lat_min"])
                    agg["lat_max"] = max(agg["lat_max"], r["lat_max"])
            rxp = fs["rx_pkts"]["total"]
            fs["tx_pps"] = {s.port: txp / secs if secs else 0.0}
            rsecs = self._rx_window()
            fs["rx_pps"] = {"total": rxp / rsecs if rsecs else 0.0}
            fs["loss"] = {"total": txp - rxp}
            flow[pg] = fs
            if s.cs.latency:
                n = agg["lat_cnt"]
                lat[pg] = {
                    "latency": {
                        "total_min": (agg["lat_min"] or 0) / 1000, "total_max": agg["lat_max"] / 1000,
                        "average": agg["lat_sum"] / n / 1000 if n else 0.0,
                        "percentile_50": _percentile(agg["hist"], 0.50) / 1000,
                        "percentile_99": _percentile(agg["hist"], 0.99) / 1000,
                        "histogram": {round(_bucket_hi(i) / 1000, 3): c for i, c in enumerate(agg["hist"]) if c},
                        "jitter": 0,
                    },
                    "err_cntrs": {"dropped": agg["dropped"], "out_of_order": agg["out_of_order"],
                                  "dup": 0, "seq_too_high": agg["seq_too_high"],
                                  "seq_too_low": agg["seq_too_low"]},
                }
        return flow, lat

    # ---- capture ----------------------------------------------------------------------------
    def start_capture(self, rx_ports=None, limit: int = 1000, tx_ports=None) -> dict:
        """Capture the first `limit` frames received on each of rx_ports; returns {"id": n}."""
        if tx_ports:
            raise EngineError("capturing transmitted frames (tx_ports) is not supported")
        targets = self._ports(rx_ports)
        if not isinstance(limit, int) or limit <= 0:
            raise EngineError(f"capture limit {limit!r} must be a positive integer")
        cid = self._next_cap
        self._next_cap += 1
        cap = {"ports": [p.spec.port_id for p in targets], "packets": [], "stop": threading.Event()}
        for p in targets:
            p.ring.poll()               # drop leftovers of an earlier capture
            p.obj.map("cap_left").update(b"\0\0\0\0", struct.pack("<q", limit))
        cap["thread"] = threading.Thread(target=self._cap_loop, args=(cap, targets), daemon=True)
        cap["thread"].start()
        self._captures[cid] = cap
        return {"id": cid, "ts": time.time()}

    def _cap_loop(self, cap: dict, targets: list[_Port]) -> None:
        self._pin_thread()
        while not cap["stop"].is_set():
            for p in targets:
                recs = p.ring.poll()
                if recs:
                    with self._cap_lock:
                        cap["packets"] += recs
            cap["stop"].wait(0.005)

    def stop_capture(self, capture_id: int, output: str | None = None) -> list[tuple[int, bytes, int]]:
        """End a capture; write its frames (time order) to the pcap `output` if given; returns
        the (wall ns, bytes, length) records."""
        cap = self._captures.pop(capture_id, None)
        if cap is None:
            raise EngineError(f"no capture with id {capture_id}")
        for pid in cap["ports"]:
            self.ports[pid].obj.map("cap_left").update(b"\0\0\0\0", struct.pack("<q", 0))
        cap["stop"].set()
        cap["thread"].join()
        for pid in cap["ports"]:
            cap["packets"] += self.ports[pid].ring.poll()
        pkts = sorted(cap["packets"], key=lambda r: r[0])
        if output:
            write_pcap(output, pkts)
        return pkts


def _bucket_hi(i: int) -> float:
    """Upper edge in ns of latency bucket i (4 buckets per power of two, see tg_rx)."""
    if i < 8:
        return 4.0
    msb, frac = divmod(i, 4)
    return (1 << msb) * (1 + (frac + 1) / 4)


def _percentile(hist: list[int], q: float) -> float:
    n = sum(hist)
    if not n:
        return 0.0
    want = q * n
    acc = 0
    for i, c in enumerate(hist):
        acc += c
        if acc >= want:
            return _bucket_hi(i)
    return _bucket_hi(len(hist) - 1)


def load_profile_streams(path: str, direction: int = 0, port_id: int = 0,
                         tunables: dict | None = None) -> list[dict]:
    """Run gtplab.traffic.engine.stream_loader in a subprocess; returns the streams' JSON."""
    if not os.path.isfile(path):
        raise EngineError(f"profile {path} does not exist")
    cmd = [sys.executable, "-m", "gtplab.traffic.engine.stream_loader", path,
           "--direction", str(direction), "--port", str(port_id)]
    for k, v in (tunables or {}).items():
        cmd += ["--tunable", f"{k}={v}"]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if r.returncode != 0:
        msg = r.stderr.strip().splitlines()
        raise EngineError(f"profile {path}: {msg[-1] if msg else 'loader failed'}")
    return json.loads(r.stdout)
