"""A port's streams in its BPF objects, and a TRex profile's streams.

load_stream writes a stream into its slot of each of the port's objects (program, variables, pace,
template, value lists); a periodic program's frames are prebuilt once into the port's frame cache
(prebuild_frames, install_cache: struct tg_cframe in bpf/trafficgen.h). load_profile_streams runs a
TRex STL profile with TRex's own client library in a subprocess (stream_loader) and returns the
streams' JSON, as TRex's trex_stl_streams.py loads profiles.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

from gtplab.kernel import bpf
from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine.port import Port, Stream
from gtplab.traffic.engine.vm import CACHE_FRAME, CACHE_FRAMES, CompiledStream, EngineError

PACE = struct.Struct("<QQQQQQQIIII")    # struct tg_pace (a slot of the pace map: set by pacing.tx_loop)
PACE_MAX_RUN = 10                         # its field max_run: the largest burst that left


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


def load_stream(p: Port, s: Stream, frame_cache: bool = True) -> None:
    """Write stream s into its slot of each of port p's objects, from the start (fresh variables
    and sequence, pace zeroed), its frames prebuilt when frame_cache allows (prebuild)."""
    key = struct.pack("<I", s.slot)
    for o in p.objs:
        o.map("streams").update(key, s.cs.stream_value())
        o.map("state").update(key, s.cs.state_value())
        o.map("pace").update(key, bytes(PACE.size))
        tm = o.map("tmpl")
        tm.update(key, struct.pack("<II", len(s.cs.frame), 0) + s.cs.frame
                  + bytes(tm.value_size - 8 - len(s.cs.frame)))
        for var in s.cs.lists:
            for k, v in s.cs.list_entries(s.slot, var):
                o.map("lists").update(k, v)
    prebuild(p, s, frame_cache)


def prebuild(p: Port, s: Stream, frame_cache: bool = True) -> None:
    """The frame cache (struct tg_cframe in bpf/trafficgen.h), see prebuild_frames. Streams
    that do not qualify, or that find the port's cache full, run their program per packet."""
    n = s.cs.period()
    if not frame_cache or not n or p.cache_used + n > CACHE_FRAMES:
        return
    frames = prebuild_frames(p.objs[0], s.cs, s.slot)
    if frames is None:
        return
    base = p.cache_used
    p.cache_used += n
    for o in p.objs:
        install_cache(o, s.cs, s.slot, frames, base)
    s.cached = n


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
