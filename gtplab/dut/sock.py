"""The socket-path PGW-U (`pgwu socket`, dataplane/pgwu_sock.c) as gtplab drives and reads it.

- SocketKnobs: its knobs (threads, batch, reuseport, buffers, busy polling, GRO, fanout, SCHED_FIFO),
  as lab config `dut.socket` gives them, checked (SocketKnobs.parse), and as `pgwu socket` flags
  (argv). The tuning experiment (bench/socket_tuning.py) varies them.
- SockStats(pin_dir): its counters, read from the pinned sock_stats map through mmap (no system
  call a word): packets by (reason, verdict) summed over threads, in the XDP path's names where the
  meaning is the same, and per thread (tid, CPU, calls, the kernel's drops at its socket). The
  layout is parsed from dataplane/pgwu_sock.h and checked against the header's layout word.

Used by gtplab.lab.topology (starts it, `dut.mode: socket`) and gtplab.dut.local (reads it).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import asdict, dataclass, fields
from typing import Any

from gtplab.dut.dataplane import EVENTS, PGWU_SOCK_H, REASONS, VERDICTS, parse_reasons
from gtplab.errors import UserError
from gtplab.kernel import bpf

STATS_PIN = "sock_stats"
FANOUTS = ("hash", "lb", "cpu", "qm")


def _define(name: str, text: str) -> int:
    m = re.search(r"#define\s+" + name + r"\s+(\d+)", text)
    if not m:
        raise RuntimeError(f"no #define {name} in {PGWU_SOCK_H}")
    return int(m.group(1))


_H = PGWU_SOCK_H.read_text()


def _sock_reasons() -> tuple[str, ...]:
    """enum pgwu_reason, then enum pgwu_sock_reason, which continues it (its first value is
    PGWU_REASON_MAX): every reason the socket path counts, by value."""
    m = re.search(r"enum\s+pgwu_sock_reason\s*\{(.*?)\};", _H, re.S)
    if not m:
        raise RuntimeError(f"no enum pgwu_sock_reason in {PGWU_SOCK_H}")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    own = [re.match(r"\s*PGWU_SR_(\w+)", item).group(1).lower()
           for item in body.split(",") if item.strip() and "PGWU_SOCK_REASON_MAX" not in item]
    return REASONS + tuple(own)


SOCK_REASONS = _sock_reasons()
COUNTERS = parse_reasons(PGWU_SOCK_H, "pgwu_sock_counter", "PGWU_SC_", "PGWU_SOCK_COUNTER_MAX")
HEADER = parse_reasons(PGWU_SOCK_H, "pgwu_sock_hdr", "PGWU_SH_", "PGWU_SOCK_HDR")
HDR_WORDS = int(re.search(r"PGWU_SOCK_HDR\s*=\s*(\d+)", _H).group(1))
MAX_THREADS = _define("PGWU_SOCK_MAX_THREADS", _H)
EV_OFF = len(SOCK_REASONS) * len(VERDICTS) * 2
CTR_OFF = EV_OFF + len(EVENTS)
THREAD_WORDS = (CTR_OFF + len(COUNTERS) + 7) // 8 * 8
WORDS = HDR_WORDS + 2 * MAX_THREADS * THREAD_WORDS
LAYOUT = (len(SOCK_REASONS) | len(VERDICTS) << 8 | len(COUNTERS) << 16 | len(EVENTS) << 24
          | THREAD_WORDS << 32)
GAUGES = ("tid", "cpu", "direction")


@dataclass(frozen=True)
class SocketKnobs:
    """`pgwu socket`'s knobs (docs/socket.md). None: the kernel's default (buffers), or the
    program's. The lab gives the workers its DUT CPUs (--cpus), so they are not a knob here."""
    threads: int = 1                    # worker threads per direction
    batch: int = 64                     # packets per system call: 1 = recvfrom/sendto
    reuseport: bool = True              # a socket per thread (SO_REUSEPORT / PACKET_FANOUT)
    rcvbuf: int | None = None           # SO_RCVBUF bytes
    sndbuf: int | None = None           # SO_SNDBUF bytes
    busy_poll: int = 0                  # SO_BUSY_POLL microseconds, 0: off
    prefer_busy_poll: bool = False
    busy_poll_budget: int | None = None
    gro: bool = False                   # UDP_GRO (the lab turns GRO on on the access port; its full
    #                                     buffers' drops counted per G-PDU: gtplab.dut.sockdrop)
    fanout: str = "hash"                # PACKET_FANOUT mode: hash lb cpu qm
    rt_priority: int = 0                # SCHED_FIFO workers, 0: SCHED_OTHER

    @classmethod
    def parse(cls, data: Any, where: str = "dut.socket") -> "SocketKnobs":
        """From a mapping (lab config dut.socket, a sweep's knob row); UserError naming the key."""
        if data is None:
            return cls()
        if isinstance(data, SocketKnobs):
            return data
        if not isinstance(data, dict):
            raise UserError(f"{where} must be a mapping of knobs ({', '.join(f.name for f in fields(cls))})")
        names = {f.name for f in fields(cls)}
        bad = set(data) - names
        if bad:
            raise UserError(f"{where}: unknown knob(s) {', '.join(sorted(bad))} (known: {', '.join(sorted(names))})")
        out: dict[str, Any] = {}
        limits = {"threads": (1, MAX_THREADS), "batch": (1, 1024), "rcvbuf": (1024, 1 << 30),
                  "sndbuf": (1024, 1 << 30), "busy_poll": (0, 1000000), "busy_poll_budget": (1, 65535),
                  "rt_priority": (0, 99)}
        for k, v in data.items():
            if k in ("reuseport", "prefer_busy_poll", "gro"):
                if not isinstance(v, bool):
                    raise UserError(f"{where}.{k}: {v!r} is not true or false")
            elif k == "fanout":
                if v not in FANOUTS:
                    raise UserError(f"{where}.fanout: {v!r} is not one of {', '.join(FANOUTS)}")
            elif v is None and k in ("rcvbuf", "sndbuf", "busy_poll_budget"):
                pass
            else:
                lo, hi = limits[k]
                if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                    raise UserError(f"{where}.{k}: {v!r} is not an integer in {lo}..{hi}")
            out[k] = v
        k = cls(**out)
        if (k.prefer_busy_poll or k.busy_poll_budget) and not k.busy_poll:
            raise UserError(f"{where}: prefer_busy_poll and busy_poll_budget need busy_poll (microseconds)")
        return k

    def argv(self, cpus: list[int] | None = None) -> list[str]:
        """The `pgwu socket` flags for these knobs (and the CPUs its workers are pinned to)."""
        a = ["--threads", str(self.threads), "--batch", str(self.batch),
             "--reuseport", "on" if self.reuseport else "off", "--fanout", self.fanout]
        if cpus:
            a += ["--cpus", ",".join(map(str, cpus))]
        for k in ("rcvbuf", "sndbuf", "busy_poll_budget"):
            if getattr(self, k) is not None:
                a += [f"--{k.replace('_', '-')}", str(getattr(self, k))]
        if self.busy_poll:
            a += ["--busy-poll", str(self.busy_poll)]
        if self.prefer_busy_poll:
            a.append("--prefer-busy-poll")
        if self.gro:
            a.append("--gro")
        if self.rt_priority:
            a += ["--rt-priority", str(self.rt_priority)]
        return a

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        """A short name for tables: the knobs that differ from the defaults."""
        d = SocketKnobs()
        parts = []
        for f in fields(self):
            v = getattr(self, f.name)
            if v != getattr(d, f.name):
                parts.append(f"{f.name}={'on' if v is True else 'off' if v is False else v}")
        return " ".join(parts) or "defaults"


class SockStats:
    """The pinned sock_stats of a PIN_DIR, mapped read-only (absent until a `pgwu socket` ran)."""

    def __init__(self, pin_dir: str):
        self.path = os.path.join(pin_dir, STATS_PIN)
        self._mm: mmap.mmap | None = None

    def _map(self) -> mmap.mmap | None:
        if self._mm is None:
            if not os.path.exists(self.path):
                return None
            fd = bpf.obj_get(self.path)
            try:
                if bpf.map_info(fd).max_entries != WORDS:
                    raise UserError(f"{self.path}: {bpf.map_info(fd).max_entries} words, this gtplab reads "
                                    f"{WORDS}: dataplane/pgwu_sock.h and the running pgwu differ (rebuild)")
                self._mm = mmap.mmap(fd, WORDS * 8, mmap.MAP_SHARED, mmap.PROT_READ)
            finally:
                os.close(fd)
        return self._mm

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def words(self) -> tuple[int, ...] | None:
        mm = self._map()
        if mm is None:
            return None
        w = struct.unpack_from(f"={WORDS}Q", mm, 0)
        if w[0] != LAYOUT:
            raise UserError(f"{self.path}: written by a pgwu of another layout ({w[0]:#x}, want {LAYOUT:#x})")
        return w

    def header(self, w=None) -> dict[str, int]:
        w = w or self.words()
        return {} if w is None else {name: w[i] for i, name in enumerate(HEADER)}

    @staticmethod
    def _block(w, direction: int, i: int) -> tuple[int, ...]:
        off = HDR_WORDS + (direction * MAX_THREADS + i) * THREAD_WORDS
        return w[off:off + THREAD_WORDS]

    def counters(self, w=None) -> dict[tuple[str, str], int]:
        """{(reason, verdict): packets} summed over every thread (zeros left out)."""
        w = w or self.words()
        out: dict[tuple[str, str], int] = {}
        if w is None:
            return out
        for d in (0, 1):
            for i in range(min(w[HEADER.index("threads")], MAX_THREADS)):
                b = self._block(w, d, i)
                for r, reason in enumerate(SOCK_REASONS):
                    for v, verdict in enumerate(VERDICTS):
                        n = b[(r * len(VERDICTS) + v) * 2]
                        if n:
                            out[(reason, verdict)] = out.get((reason, verdict), 0) + n
        return out

    def threads(self, w=None) -> list[dict[str, Any]]:
        """Per worker: direction, thread index, tid, CPU it ran on last, and its counters."""
        w = w or self.words()
        out = []
        if w is None:
            return out
        for d, name in ((0, "uplink"), (1, "downlink")):
            for i in range(min(w[HEADER.index("threads")], MAX_THREADS)):
                b = self._block(w, d, i)
                row = {"direction": name, "thread": i}
                row.update({c: b[CTR_OFF + k] for k, c in enumerate(COUNTERS) if c != "direction"})
                out.append(row)
        return out

    def totals(self, w=None) -> dict[str, int]:
        """The per-thread counters (not the gauges) summed over threads."""
        tot: dict[str, int] = {}
        for t in self.threads(w):
            for c in COUNTERS:
                if c not in GAUGES:
                    tot[c] = tot.get(c, 0) + t[c]
        return tot
