"""The embedded engine's sending threads: one per port and generator CPU (tx_loop), each in its port's
network namespace, pinned to its CPU (pin_thread), running tg_tx with BPF_PROG_RUN live frames and
pacing the port's streams by the clock.

Continuous streams at a rate and single bursts are paced in the kernel (struct tg_pace, PACE); the
thread only keeps calling, one call for all its continuous paced streams (AnyPacedRunner). A continuous stream with a burst B (the engine's `mode.burst`, not TRex's)
leaves as B frames back to back every B / rate seconds: the same average rate. Multi-bursts are paced here (_due). At 100 % of line rate a port sends as
fast as the engine goes. A continuous stream's rate is shared out among the port's threads (share).
"""

from __future__ import annotations

import math
import os
import struct
import time

from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine.port import Port, Stream
from gtplab.traffic.engine.streams import PACE

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


MAX_PACED = 16        # TG_MAX_PACED: continuous paced streams one call serves (struct tg_paced)
ANY_PACED = 0xFFFFFFFF  # TG_ANY_PACED


class AnyPacedRunner(kernel.LiveRunner):
    """Live runs of tg_tx for whichever of the thread's paced streams is due first (cur_slot
    TG_ANY_PACED, the streams in map paced): frame is the longest of theirs (tg_tx trims it to
    each stream's own and back)."""

    def __init__(self, prog_fd: int, frame: bytes, ifindex: int, batch_size: int, cur_slot):
        super().__init__(prog_fd, frame, 0, ifindex, batch_size, cur_slot)
        self._cur_val = ANY_PACED.to_bytes(4, "little")


def late_q8(gap_q8: int, burst: int = 1) -> int:
    """How late (ns << 8) a paced stream's next frame (burst > 1: its next burst, gap_q8 apart) may
    be before it is skipped: MAX_BURST frame times, so what a held-up transmitter catches up with
    back to back stays within MAX_BURST frames; with bursts, MAX_BURST - burst frame times (its own
    burst on top), at least half a burst's period (a burst is never skipped for being a little
    late, and never sent twice back to back when burst >= MAX_BURST)."""
    if burst <= 1:
        return MAX_BURST * gap_q8
    return max((MAX_BURST - burst) * gap_q8 // burst, gap_q8 // 2)


def share(s: Stream, k: int, workers: int) -> float:
    """Worker k's rate of stream s (0: not this worker's), of workers sending threads: a continuous
    stream's rate is shared out; streams with per-stream statistics (one sequence) and bursts
    (exact counts) are sent by the first thread alone."""
    if workers == 1 or s.cs.pg_id is not None or s.cs.mode != "continuous":
        return s.pps if k == 0 else 0.0
    return s.pps / workers


def _due(s: Stream, elapsed: float) -> int:
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


def _total(s: Stream) -> float:
    cs = s.cs
    if cs.mode == "single_burst":
        return cs.total_pkts
    if cs.mode == "multi_burst":
        return cs.count * cs.pkts_per_burst
    return math.inf


def tx_loop(p: Port, duration: float, k: int, workers: int, batch_size: int,
            cpus: list[int] | None) -> None:
    """Worker k of port p (of workers): sends the port's streams for duration seconds (<= 0: until
    p.stop_ev or the bursts end) in batches of batch_size frames (PACED_BATCH when paced), pinned
    to cpus (pin_thread). What it sent is in the maps; its times and the CPU it used in p; an
    error in p.error."""
    paced = []
    c0, w0 = time.thread_time(), time.monotonic()
    try:
        pin_thread(cpus, k)
        kernel.enter_netns(p.spec.netns)
        ifx = kernel.ifindex(p.spec.ifname)
        obj = p.objs[k]
        prog = obj.prog_fd("tg_tx")
        pps = {s.sid: share(s, k, workers) for s in p.streams.values()}
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
                                            PACED_BATCH if s in paced else batch_size, cur)
                   for s in streams}
        t0 = p.t_start
        t0_ns = int(t0 * 1e9)
        parked = len(p.park_fds) > k        # p.park_fds[k]: worker k's transmit program, parked
        bursts = [s for s in paced if s.cs.mode == "single_burst"]
        for s in paced:
            b = s.cs.burst if s.cs.mode == "continuous" else 1
            gap = round(256e9 * b / pps[s.sid])
            late = late_q8(gap, b)
            if not parked:      # every call sleeps in two synchronize_rcu (ms): catch up after them
                late = max(late, UNPARKED_LATE_NS << 8)
            left = 0
            if s in bursts:     # exact count: never skip, catch up instead
                late, left = (1 << 63), s.cs.total_pkts + 1
            obj.map("pace").update(struct.pack("<I", s.slot), PACE.pack(
                (t0_ns + int(s.cs.isg_us * 1e3)) << 8, gap,
                t0_ns + int(duration * 1e9) if duration > 0 and s not in bursts else 0, late, 0, 0, left,
                b, 0, 0, 0))
        # the continuous paced streams share calls (TG_ANY_PACED: each run sends the frame due
        # first, so none waits for another's call and then catches up in a burst); single bursts
        # and the rest take turns, in short calls when there are several, so each waits little
        cont = [s for s in paced if s.cs.mode == "continuous"]
        group = cont if 1 < len(cont) <= MAX_PACED else []
        together = None
        if group:
            obj.map("paced").update(b"\0\0\0\0", struct.pack(f"<I{MAX_PACED}I", len(group),
                                                             *[s.slot for s in group],
                                                             *[0] * (MAX_PACED - len(group))))
            together = AnyPacedRunner(prog, max((s.cs.frame for s in group), key=len), ifx, PACED_BATCH, cur)
        turns = len(paced) - len(group) + (1 if group else 0)
        chunk = PACED_CALL if turns <= 1 else PACED_CALL_SHARED
        while not p.stop_ev.is_set():
            now = time.monotonic()
            el = now - t0
            if duration > 0 and el >= duration:
                el = duration
            busy = False
            if together is not None:
                together.run(chunk)
                p.calls += 1
                busy = True
            for s in streams:
                if s.sid in done or s in group:
                    continue
                if s in paced or s in flat:
                    runners[s.sid].run(chunk if s in paced else MAX_CALL_FRAMES)
                    p.calls += 1
                    busy = True
                    if s in bursts and PACE.unpack(obj.map("pace").lookup(struct.pack("<I", s.slot)))[6] == 1:
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
                        if s not in group:
                            runners[s.sid].run(MAX_BURST * 4)
                    if together is not None:
                        together.run(MAX_BURST * 4 * len(group))
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


def pin_thread(cpus: list[int] | None, k: int = 0) -> None:
    """Pin the calling thread to cpus[k] (one thread per CPU), or to cpus when there is one; None:
    leave it where it is."""
    if cpus:
        os.sched_setaffinity(0, [cpus[k]] if len(cpus) > 1 else cpus)
