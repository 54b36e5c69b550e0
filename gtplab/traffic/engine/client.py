"""LocalClient: TRex's STLClient API over the embedded BPF traffic engine.

The same runner code drives either a TRex server (trex.stl.api.STLClient) or this engine. Ports
are network interfaces inside network namespaces (PortSpec); each port gets its own copy of the
BPF object: tg_rx attached to the interface (counts, per-stream trailer stats, capture), and
tg_tx run with BPF_PROG_RUN live frames from a transmitter thread that lives in the port's
namespace and paces the port's streams by the clock.

This is the façade, as TRex's trex_stl_client.py is: it checks what is asked and hands the work to
port.py (a port's state), streams.py (a stream into the port's BPF objects, profiles into streams),
pacing.py (the sending threads), stats.py (the counters in TRex's shape) and capture.py (the
receive ring, pcap files).

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

import os
import struct
import threading
import time

from gtplab.kernel import libbpf as kernel
from gtplab.rates import FCS_LEN, L1_OVERHEAD, RateError, parse_mult
from gtplab.traffic.engine.capture import RingReader, write_pcap
from gtplab.traffic.engine.pacing import DEFAULT_BATCH, pin_thread, tx_loop
from gtplab.traffic.engine.port import BPF_OBJ, Port, PortSpec, Stream, port_macs
from gtplab.traffic.engine.stats import Stats
from gtplab.traffic.engine.streams import load_profile_streams, load_stream
from gtplab.traffic.engine.vm import MAX_PGIDS, MAX_STREAMS, EngineError, compile_stream

_RING_SIZE = 8 << 20


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
        self.ports = {p.port_id: Port(p) for p in ports}
        self.batch_size = batch_size
        self.frame_cache = True     # prebuild periodic programs' frames (False: run them per packet)
        self.cpus = list(cpus) if cpus else None
        self.park = list(park)
        self.on_attach = on_attach
        self._next_sid = 1
        self._connected = False
        self._stats = Stats(self.ports)
        self._captures: dict[int, dict] = {}
        self._next_cap = 1
        self._cap_lock = threading.Lock()

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
                # what the port's network stack sends (its kernel's ARP and ND, packet sockets), by
                # kind: the background frames the DUT receives beside the test's (stats.py)
                out = p.obj.prog_fd("tg_bg_out")
                p.bg_out_fd = kernel.in_netns(
                    spec.netns, lambda s=spec, fd=out: kernel.tcx_egress_link(fd, kernel.ifindex(s.ifname)))
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
            if p.bg_out_fd >= 0:
                os.close(p.bg_out_fd)
                p.bg_out_fd = -1
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

    def _ports(self, ports) -> list[Port]:
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
        per_port = {p.spec.port_id: [compile_stream(port_macs(js, p.spec)) for js in streams] for p in targets}
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
            for cs in per_port[p.spec.port_id]:
                slot = next(i for i in range(MAX_STREAMS) if i not in used)
                used.add(slot)
                s = Stream(self._next_sid, p.spec.port_id, slot, cs)
                self._next_sid += 1
                load_stream(p, s, self.frame_cache)
                p.streams[s.sid] = s
                ids.append(s.sid)
        self._stats.register_pgids()
        return ids

    def remove_all_streams(self, ports=None) -> None:
        for p in self._ports(ports):
            if p.alive():
                raise EngineError(f"port {p.spec.port_id} is transmitting (stop it first)")
            p.streams.clear()
            p.cache_used = 0
        self._stats.register_pgids()

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
                load_stream(p, s, self.frame_cache)      # fresh variables and sequence, like TRex's start
            self._stats.reset_rx_sequence()
        if not self.is_traffic_active():
            self._stats.run_t0 = time.monotonic()
        for p in targets:
            p.stop_ev = threading.Event()
            p.error = None
            p.t_start = time.monotonic()
            p.t_end = 0.0
            p.threads = [threading.Thread(target=tx_loop,
                                          args=(p, duration, k, self.workers, self.batch_size, self.cpus),
                                          name=f"tx-port{p.spec.port_id}-{k}", daemon=True)
                         for k in range(self.workers)]
            for t in p.threads:
                t.start()

    def _stop_port(self, p: Port) -> None:
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
    def clear_stats(self, ports=None) -> None:
        """Zero the counters get_stats reports (a baseline is kept; the maps are not written)."""
        self._stats.clear()

    def get_stats(self, ports=None) -> dict:
        """Stats in TRex's shape: {port_id: {...}, "total": {...}, "flow_stats": {pg_id: ...},
        "latency": {pg_id: ...}, "global": {...}} (gtplab.traffic.engine.stats). Rates are averages
        over the port's last transmission (start to stop, or to now while running)."""
        return self._stats.get([p.spec.port_id for p in self._ports(ports)])

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

    def _cap_loop(self, cap: dict, targets: list[Port]) -> None:
        pin_thread(self.cpus)
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
