"""tg_tx run with BPF_PROG_TEST_RUN on a compiled stream, for tests/engine/test_engine_vm.py and
tests/engine/test_engine_ipv6.py: the stream loaded
into a slot with its template, each output frame fed back in as a recycled live frame."""

from __future__ import annotations

import dataclasses
import random
import struct

from gtplab.kernel import libbpf as kernel
from gtplab.traffic.engine import compile_stream
from gtplab.traffic.engine import vm

N = 40


def load(obj, cs, slot=0, template=True):
    """Put a compiled stream into slot, template included (as LocalClient does) unless
    template=False (then tg_tx runs on the frame as given, with full checksum sums)."""
    key = struct.pack("<I", slot)
    obj.map("streams").update(key, cs.stream_value())
    obj.map("state").update(key, cs.state_value())
    tm = obj.map("tmpl")
    frame = cs.frame if template else b""
    tm.update(key, struct.pack("<II", len(frame), 0) + frame + bytes(tm.value_size - 8 - len(frame)))
    for var in cs.lists:
        for k, v in cs.list_entries(slot, var):
            obj.map("lists").update(k, v)


def run(obj, js, n=N, slot=0, template=True, scribble=False, cs=None):
    """Compile js into slot, run tg_tx n times; returns the frames. Each run's input is the
    previous run's output as a recycled live frame would be: as left (template=True: tg_tx
    restores the length too) or padded with the template's tail (template=False), or with
    scribble=True random bytes of a random length, as a DUT rewriting frames could leave."""
    cs = cs or compile_stream(js)
    load(obj, cs, slot, template)
    fd = obj.prog_fd("tg_tx")
    rnd = random.Random(n)
    frames, cur = [], cs.frame
    for _ in range(n):
        verdict, out = kernel.run_once(fd, cur, slot)
        assert verdict == 3, "tg_tx did not return XDP_TX"
        frames.append(out)
        if scribble:
            cur = rnd.randbytes(rnd.randint(14, len(cs.frame)))
        elif template:
            cur = out
        else:
            cur = out + cs.frame[len(out):]
    return frames


def full_sums(cs):
    """The same compiled stream with every checksum summed over the packet (no plan)."""
    insns = [dataclasses.replace(i, flags=i.flags & ~vm.F_INCR, base=(0, 0), pieces=())
             for i in cs.insns]
    return dataclasses.replace(cs, insns=insns)
