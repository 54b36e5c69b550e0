"""libbpf through ctypes, for the BPF objects gtplab loads into this process: load an object, attach
XDP, enter namespaces. No policy: which object, which interface, which namespace is the caller's.
Used by the traffic engine (gtplab.traffic.engine: trafficgen.bpf.o) and the reference
forwarder (gtplab.dut.fwd: fwd.bpf.o).

- BpfObject loads a BPF object file (e.g. trafficgen.bpf.o) with libbpf (through ctypes, libbpf1 is a
  dependency of libbpf-dev) and hands out program and map fds. Nothing is pinned: the fds live in
  this process and the kernel frees everything when the object is closed or the process exits.
- xdp_link attaches a program with BPF_LINK_CREATE (libbpf's bpf_link_create); closing the link fd detaches it, so an
  attachment never outlives the process that made it (unless the link is pinned). tcx_ingress_link
  does the same for tc ingress.
- in_netns runs a function in a thread that has entered a named network namespace (setns(2)
  changes only the calling thread); the caller's own namespace never changes.
- LiveRunner is a prepared BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES for one stream's
  frame: each run() call is one syscall (ctypes releases the GIL during it).
"""

from __future__ import annotations

import ctypes
import os
import socket
from pathlib import Path

from gtplab.errors import require_built
from gtplab.kernel import bpf, netns

BPF_XDP = 37
BPF_TCX_INGRESS = 46
BPF_TCX_EGRESS = 47
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2

_libbpf = None


def _lib():
    global _libbpf
    if _libbpf is None:
        lib = bpf._lib()        # the one handle: bpf.h and the object calls are declared there
        lib.bpf_link_create.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.bpf_raw_tracepoint_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libbpf = lib
    return _libbpf


class BpfObject:
    """One loaded copy of a BPF object file (trafficgen.bpf.o: programs tg_tx, tg_rx and their own maps)."""

    def __init__(self, path: Path):
        require_built(path)
        lib = _lib()
        self._obj = lib.bpf_object__open_file(os.fsencode(path), None)
        if not self._obj:
            err = ctypes.get_errno()
            raise OSError(err, f"Couldn't open {path}: {os.strerror(err)}")
        ret = lib.bpf_object__load(self._obj)
        if ret < 0:
            lib.bpf_object__close(self._obj)
            self._obj = None
            raise OSError(-ret, f"Couldn't load {path.name}: {os.strerror(-ret)} (verifier log above)")
        self.maps: dict[str, bpf.Map] = {}

    def prog_fd(self, name: str) -> int:
        p = _lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not p:
            raise KeyError(name)
        return _lib().bpf_program__fd(p)

    def map(self, name: str) -> bpf.Map:
        """The map by name (the fd belongs to the object: do not close the Map)."""
        if name not in self.maps:
            m = _lib().bpf_object__find_map_by_name(self._obj, name.encode())
            if not m:
                raise KeyError(name)
            self.maps[name] = bpf.Map(_lib().bpf_map__fd(m), name)
        return self.maps[name]

    def close(self) -> None:
        if self._obj:
            _lib().bpf_object__close(self._obj)
            self._obj = None
            self.maps.clear()


def xdp_link(prog_fd: int, ifindex: int, mode: str = "native") -> int:
    """Attach an XDP program to ifindex of the calling thread's netns; returns the link fd."""
    flags = XDP_FLAGS_DRV_MODE if mode == "native" else XDP_FLAGS_SKB_MODE
    opts = _LinkCreateOpts(flags=flags)
    return bpf._check(_lib().bpf_link_create(prog_fd, ifindex, BPF_XDP, ctypes.byref(opts)),
                      f"attach XDP to ifindex {ifindex}")


def tcx_ingress_link(prog_fd: int, ifindex: int) -> int:
    """Attach a SCHED_CLS program to ifindex's tc ingress (tcx) in the calling thread's netns;
    returns the link fd (closing it, or unpinning it, detaches the program)."""
    return bpf._check(_lib().bpf_link_create(prog_fd, ifindex, BPF_TCX_INGRESS, None),
                      f"attach tcx ingress to ifindex {ifindex}")


def tcx_egress_link(prog_fd: int, ifindex: int) -> int:
    """Attach a SCHED_CLS program to ifindex's tc egress (tcx) in the calling thread's netns;
    returns the link fd (closing it detaches the program)."""
    return bpf._check(_lib().bpf_link_create(prog_fd, ifindex, BPF_TCX_EGRESS, None),
                      f"attach tcx egress to ifindex {ifindex}")


class _LinkCreateOpts(bpf._Opts):
    """struct bpf_link_create_opts (libbpf 1.1) up to flags: libbpf reads no further than sz."""
    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32)]


def tp_btf_link(prog_fd: int, what: str = "a BTF tracepoint") -> int:
    """Attach a tp_btf program (its tracepoint is in the program: name 0) with
    BPF_RAW_TRACEPOINT_OPEN; returns the fd (closing it detaches the program)."""
    return bpf._check(_lib().bpf_raw_tracepoint_open(None, prog_fd), f"attach to {what}")


# the engine's threads run inside the generator's namespace (see gtplab/kernel/netns.py)
enter_netns = netns.enter
in_netns = netns.run_in


def ifindex(name: str) -> int:
    """Index of interface `name` in the calling thread's netns."""
    try:
        return socket.if_nametoindex(name)
    except OSError as e:
        raise OSError(e.errno, f"Couldn't find interface {name}: {e.strerror}") from None


class LiveRunner:
    """BPF_PROG_TEST_RUN of tg_tx on one frame in live-frames mode, prepared once.

    The frame is prefixed with TG_META_LEN bytes of data_meta holding the stream slot; ctx
    says where data starts and which device the frames come in on (and go out of on XDP_TX).
    Must be called from a thread inside the device's netns."""

    def __init__(self, prog_fd: int, frame: bytes, slot: int, ifindex: int, batch_size: int = 64,
                 cur_slot: bpf.Map | None = None):
        meta = slot.to_bytes(4, "little")
        # A DUT's encapsulation writes over data_meta of recycled frames: tg_tx takes the slot
        # from cur_slot (slot + 1), set before each run (one thread per port object).
        self._cur = cur_slot
        self._cur_val = (slot + 1).to_bytes(4, "little")
        buf = meta + frame
        self._din = ctypes.create_string_buffer(buf, len(buf))
        self._ctx = bpf.XdpMd(data=len(meta), data_end=len(buf), ingress_ifindex=ifindex)
        self._fd = prog_fd
        self._attr = bpf._TestRunOpts(data_size_in=len(buf),
                                  data_in=ctypes.addressof(self._din), repeat=1,
                                  ctx_in=ctypes.addressof(self._ctx),
                                  ctx_size_in=ctypes.sizeof(self._ctx),
                                  flags=bpf.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch_size)
        self._ref = ctypes.byref(self._attr)
        self._run = _lib().bpf_prog_test_run_opts

    def run(self, n: int) -> None:
        """Run the program n times (n frames, minus any it drops)."""
        self._attr.repeat = n
        if self._cur is not None:
            self._cur.update(b"\0\0\0\0", self._cur_val)
        ret = self._run(self._fd, self._ref)
        if ret < 0:
            bpf._check(ret, "run the transmit program")


def run_once(prog_fd: int, frame: bytes, slot: int) -> tuple[int, bytes]:
    """One BPF_PROG_TEST_RUN of tg_tx on frame (not live): (verdict, frame as the program left
    it). For tests and debugging of the field engine without any interface."""
    meta = slot.to_bytes(4, "little")
    buf = meta + frame
    din = ctypes.create_string_buffer(buf, len(buf))
    dout = ctypes.create_string_buffer(len(buf) + 256)
    ctx = bpf.XdpMd(data=len(meta), data_end=len(buf))
    attr = bpf._TestRunOpts(data_size_in=len(buf), data_in=ctypes.addressof(din),
                        data_out=ctypes.addressof(dout), data_size_out=len(dout), repeat=1,
                        ctx_in=ctypes.addressof(ctx), ctx_size_in=ctypes.sizeof(ctx))
    bpf.test_run_opts(prog_fd, attr, "test-run tg_tx")
    out = dout.raw[:attr.data_size_out]
    return attr.retval, out[len(meta):]   # data_out starts at data_meta
