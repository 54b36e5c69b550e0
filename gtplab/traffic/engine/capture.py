"""Receive-side capture: drain the rx program's BPF ring buffer and write pcap files.

tg_rx copies each captured frame as struct tg_cap_hdr {u64 ts_ns; u32 len; u32 caplen} plus
caplen bytes into the ring buffer cap_ring. RingReader consumes it through the two mmaps the
kernel offers (consumer page read-write, producer page + data read-only, data mapped twice so
a record never wraps). write_pcap writes nanosecond pcap, linktype Ethernet (Scapy reads it).

Used by gtplab.traffic.engine.client (start_capture / stop_capture).
"""

from __future__ import annotations

import mmap
import struct
import time

_BUSY = 1 << 31
_DISCARD = 1 << 30
_HDR = struct.Struct("<QII")

# CLOCK_MONOTONIC (bpf_ktime_get_ns) to wall clock, fixed once per process
_MONO_TO_WALL = time.time_ns() - time.monotonic_ns()


def capture_clock_ns() -> int:
    """Now, on the clock of the capture's timestamps (monotonic, shifted to wall time once per
    process: unlike time.time_ns(), not moved by a clock adjustment), to time events against them."""
    return time.monotonic_ns() + _MONO_TO_WALL


class RingReader:
    def __init__(self, fd: int, size: int):
        page = mmap.PAGESIZE
        self.size = size
        self.mask = size - 1
        self.page = page
        self.cons = mmap.mmap(fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self.prod = mmap.mmap(fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)

    def poll(self) -> list[tuple[int, bytes, int]]:
        """All complete records now in the ring as (wall time ns, frame bytes, original length)."""
        out = []
        cons = struct.unpack_from("<Q", self.cons, 0)[0]
        prod = struct.unpack_from("<Q", self.prod, 0)[0]
        while cons < prod:
            off = self.page + (cons & self.mask)
            word = struct.unpack_from("<I", self.prod, off)[0]
            if word & _BUSY:
                break
            length = word & ~(_BUSY | _DISCARD)
            if not word & _DISCARD and length >= _HDR.size:
                ts, flen, caplen = _HDR.unpack_from(self.prod, off + 8)
                data = self.prod[off + 8 + _HDR.size:off + 8 + _HDR.size + caplen]
                out.append((ts + _MONO_TO_WALL, bytes(data), flen))
            cons += (length + 8 + 7) & ~7
            struct.pack_into("<Q", self.cons, 0, cons)
        return out

    def close(self) -> None:
        self.cons.close()
        self.prod.close()


def write_pcap(path: str, packets: list[tuple[int, bytes, int]]) -> None:
    """Write (wall ns, bytes, original length) records as a nanosecond pcap, linktype 1."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        for ts, data, flen in packets:
            f.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(data), flen))
            f.write(data)
