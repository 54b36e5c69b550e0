"""The bpf(2) commands from Python, through libbpf's own calls (bpf.h: bpf_obj_get, bpf_map_*,
bpf_prog_load, bpf_prog_test_run_opts, ...) with ctypes: pinned objects, maps, BPF_PROG_TEST_RUN,
prog info. No hand-laid bpf_attr and no syscall number: libbpf lays them out for the running
kernel. Only what gtplab needs. Every call raises OSError with the errno and a message naming what
failed. The opts structs follow libbpf 1.1's bpf.h (sz first, LIBBPF_OPTS); the info structs
include/uapi/linux/bpf.h.

Used by gtplab.dut (the PGW-U's pinned maps), gtplab.lab.topology (the generator's XDP_PASS
program), gtplab.traffic.engine (its maps), tests and bench/.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import ipaddress
import os
import struct
from pathlib import Path

from gtplab.errors import require_built

_libbpf = None


def _lib():
    """libbpf.so.1 (libbpf1, a dependency of libbpf-dev) with the bpf.h calls declared; loaded once,
    shared with gtplab.kernel.libbpf. Its calls return -errno (and set errno) on failure."""
    global _libbpf
    if _libbpf is None:
        lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
        vp, i, u32, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_char_p
        for name, args in (("bpf_obj_get", [cp]), ("bpf_obj_pin", [i, cp]), ("bpf_prog_get_fd_by_id", [u32]),
                           ("bpf_prog_load", [i, cp, cp, vp, ctypes.c_size_t, vp]),
                           ("bpf_map_lookup_elem", [i, vp, vp]), ("bpf_map_update_elem", [i, vp, vp, ctypes.c_uint64]),
                           ("bpf_map_delete_elem", [i, vp]), ("bpf_map_get_next_key", [i, vp, vp]),
                           ("bpf_map_lookup_batch", [i, vp, vp, vp, vp, vp, vp]),
                           ("bpf_obj_get_info_by_fd", [i, vp, vp]), ("bpf_link_update", [i, i, vp]),
                           ("bpf_enable_stats", [i]), ("bpf_prog_test_run_opts", [i, vp])):
            f = getattr(lib, name)
            f.argtypes, f.restype = args, ctypes.c_int
        # BPF objects (libbpf.h): also what gtplab.kernel.libbpf.BpfObject uses
        lib.bpf_object__open_file.restype = vp
        lib.bpf_object__open_file.argtypes = [cp, vp]
        lib.bpf_object__load.argtypes = [vp]
        lib.bpf_object__close.argtypes = [vp]
        lib.bpf_object__find_program_by_name.restype = vp
        lib.bpf_object__find_program_by_name.argtypes = [vp, cp]
        lib.bpf_object__find_map_by_name.restype = vp
        lib.bpf_object__find_map_by_name.argtypes = [vp, cp]
        lib.bpf_map__set_initial_value.argtypes = [vp, vp, ctypes.c_size_t]
        lib.bpf_program__fd.argtypes = [vp]
        lib.bpf_map__fd.argtypes = [vp]
        _libbpf = lib
    return _libbpf


def _check(ret: int, what: str) -> int:
    """ret of a libbpf call, or OSError(errno, "Couldn't <what>: ...")."""
    if ret < 0:
        err = -ret if ret < -1 else (ctypes.get_errno() or -ret)
        raise OSError(err, f"Couldn't {what}: {os.strerror(err)}")
    return ret


BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_PROG_LOAD = 5
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_ENABLE_STATS = 32
BPF_LINK_UPDATE = 29
BPF_F_REPLACE = 1 << 2
BPF_MAP_LOOKUP_BATCH = 24

BPF_ANY, BPF_NOEXIST, BPF_EXIST = 0, 1, 2
BPF_F_TEST_RUN_ON_CPU = 1 << 0
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1

BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PROG_TYPE_XDP = 6

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
XDP_VERDICTS = ("aborted", "drop", "pass", "tx", "redirect")

BPF_MAP_TYPE_PERCPU_HASH = 5
BPF_MAP_TYPE_PERCPU_ARRAY = 6
BPF_MAP_TYPE_LRU_PERCPU_HASH = 10
_PERCPU_TYPES = {BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_LRU_PERCPU_HASH}


class _Opts(ctypes.Structure):
    """A libbpf opts struct (LIBBPF_OPTS): sz, the struct's size, set on creation."""

    def __init__(self, **kw):
        super().__init__(sz=ctypes.sizeof(self), **kw)


class _ProgLoadOpts(_Opts):
    _fields_ = [("sz", ctypes.c_size_t), ("attempts", ctypes.c_int), ("expected_attach_type", ctypes.c_uint32),
                ("prog_btf_fd", ctypes.c_uint32), ("prog_flags", ctypes.c_uint32),
                ("prog_ifindex", ctypes.c_uint32), ("kern_version", ctypes.c_uint32),
                ("attach_btf_id", ctypes.c_uint32), ("attach_prog_fd", ctypes.c_uint32),
                ("attach_btf_obj_fd", ctypes.c_uint32), ("fd_array", ctypes.c_void_p),
                ("func_info", ctypes.c_void_p), ("func_info_cnt", ctypes.c_uint32),
                ("func_info_rec_size", ctypes.c_uint32), ("line_info", ctypes.c_void_p),
                ("line_info_cnt", ctypes.c_uint32), ("line_info_rec_size", ctypes.c_uint32),
                ("log_level", ctypes.c_uint32), ("log_size", ctypes.c_uint32), ("log_buf", ctypes.c_void_p)]


class _BatchOpts(_Opts):
    _fields_ = [("sz", ctypes.c_size_t), ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _LinkUpdateOpts(_Opts):
    _fields_ = [("sz", ctypes.c_size_t), ("flags", ctypes.c_uint32), ("old_prog_fd", ctypes.c_uint32)]


class _TestRunOpts(_Opts):
    """struct bpf_test_run_opts (libbpf 1.1's bpf.h)."""
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


def test_run_opts(fd: int, opts: _TestRunOpts, what: str) -> None:
    """bpf_prog_test_run_opts(fd, opts); OSError naming what on failure."""
    _check(_lib().bpf_prog_test_run_opts(fd, ctypes.byref(opts)), what)


class MapInfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("name", ctypes.c_char * 16),
                ("_rest", ctypes.c_uint8 * 64)]


class ProgInfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("tag", ctypes.c_uint8 * 8),
                ("jited_prog_len", ctypes.c_uint32), ("xlated_prog_len", ctypes.c_uint32),
                ("jited_prog_insns", ctypes.c_uint64), ("xlated_prog_insns", ctypes.c_uint64),
                ("load_time", ctypes.c_uint64), ("created_by_uid", ctypes.c_uint32),
                ("nr_map_ids", ctypes.c_uint32), ("map_ids", ctypes.c_uint64),
                ("name", ctypes.c_char * 16), ("ifindex", ctypes.c_uint32),
                ("gpl_compatible", ctypes.c_uint32), ("netns_dev", ctypes.c_uint64),
                ("netns_ino", ctypes.c_uint64), ("nr_jited_ksyms", ctypes.c_uint32),
                ("nr_jited_func_lens", ctypes.c_uint32), ("jited_ksyms", ctypes.c_uint64),
                ("jited_func_lens", ctypes.c_uint64), ("btf_id", ctypes.c_uint32),
                ("func_info_rec_size", ctypes.c_uint32), ("func_info", ctypes.c_uint64),
                ("nr_func_info", ctypes.c_uint32), ("nr_line_info", ctypes.c_uint32),
                ("line_info", ctypes.c_uint64), ("jited_line_info", ctypes.c_uint64),
                ("nr_jited_line_info", ctypes.c_uint32), ("line_info_rec_size", ctypes.c_uint32),
                ("jited_line_info_rec_size", ctypes.c_uint32), ("nr_prog_tags", ctypes.c_uint32),
                ("prog_tags", ctypes.c_uint64), ("run_time_ns", ctypes.c_uint64),
                ("run_cnt", ctypes.c_uint64), ("recursion_misses", ctypes.c_uint64),
                ("verified_insns", ctypes.c_uint32),   # instructions the verifier walked to load it
                ("_rest", ctypes.c_uint8 * 60)]


class XdpMd(ctypes.Structure):
    """struct xdp_md, the ctx_in of an XDP test run (data offsets are relative to data_in)."""
    _fields_ = [("data", ctypes.c_uint32), ("data_end", ctypes.c_uint32),
                ("data_meta", ctypes.c_uint32), ("ingress_ifindex", ctypes.c_uint32),
                ("rx_queue_index", ctypes.c_uint32), ("egress_ifindex", ctypes.c_uint32)]


def _addr(buf) -> int:
    return ctypes.addressof(buf) if buf is not None else 0


def possible_cpus() -> int:
    """Number of possible CPUs: the stride of per-CPU map values."""
    with open("/sys/devices/system/cpu/possible") as f:
        n = 0
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            n = max(n, int(hi or lo) + 1)
        return n


def obj_get(path: str) -> int:
    """Open a pinned map, program or link; returns a new fd."""
    return _check(_lib().bpf_obj_get(os.fsencode(path)), f"open pinned object {path}")


def prog_get_fd_by_id(prog_id: int) -> int:
    """Open a loaded program by its id (e.g. the XDP program `ip link` shows on an interface, which
    another process loaded); returns a new fd."""
    return _check(_lib().bpf_prog_get_fd_by_id(prog_id), f"open program id {prog_id}")


def obj_pin(fd: int, path: str) -> None:
    """Pin a map, program or link at path (on bpffs; the directory must exist)."""
    _check(_lib().bpf_obj_pin(fd, os.fsencode(path)), f"pin object at {path}")


def prog_load(prog_type: int, insns: bytes, name: str, license: str = "GPL") -> int:
    """Load a program from raw eBPF instructions (8 bytes each); returns its fd.

    For the few programs too small to deserve a C file (e.g. `return XDP_PASS`); everything else is
    built with clang and loaded with libbpf."""
    ib = ctypes.create_string_buffer(bytes(insns), len(insns))
    log = ctypes.create_string_buffer(4096)
    opts = _ProgLoadOpts(log_level=1, log_size=len(log), log_buf=ctypes.addressof(log))
    try:
        return _check(_lib().bpf_prog_load(prog_type, name.encode()[:15], license.encode(), ib, len(insns) // 8,
                                           ctypes.byref(opts)), f"load program {name}")
    except OSError as e:
        msg = log.value.decode(errors="replace").strip()
        raise OSError(e.errno, f"{e.strerror}{': ' + msg if msg else ''}") from None


def xdp_verdict_prog(verdict: int, name: str | None = None) -> "Prog":
    """An XDP program that only returns verdict (`r0 = verdict; exit`): a pass or drop sink, or an
    XDP_TX program that makes BPF_PROG_RUN live frames leave through ingress_ifindex."""
    insns = struct.pack("<BBhi", 0xb7, 0, 0, verdict) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    name = name or f"xdp_{XDP_VERDICTS[verdict]}"
    return Prog(prog_load(BPF_PROG_TYPE_XDP, insns, name), name)


# built by gtplab/dut/Makefile (setup.sh builds it)
TC_DROP_DST_OBJ = Path(__file__).resolve().parents[1] / "dut" / "tc_drop_dst.bpf.o"


def object_prog(path: Path, prog: str, rodata: bytes | None = None) -> int:
    """Load the BPF object file at path with libbpf (its .rodata set to rodata first, whole) and
    return a new fd of its program prog; the object itself is closed (the program keeps what it
    uses). For one-program objects loaded where gtplab.kernel.libbpf is not at hand."""
    require_built(path)
    lib = _lib()
    obj = lib.bpf_object__open_file(os.fsencode(path), None)
    if not obj:
        err = ctypes.get_errno()
        raise OSError(err, f"Couldn't open {path}: {os.strerror(err)}")
    try:
        if rodata is not None:
            m = lib.bpf_object__find_map_by_name(obj, b".rodata")
            if not m:
                raise OSError(errno.ENOENT, f"Couldn't find .rodata in {path.name}")
            buf = ctypes.create_string_buffer(rodata, len(rodata))
            _check(lib.bpf_map__set_initial_value(m, buf, len(rodata)), f"set .rodata of {path.name}")
        _check(lib.bpf_object__load(obj), f"load {path.name} (verifier log above)")
        p = lib.bpf_object__find_program_by_name(obj, prog.encode())
        if not p:
            raise OSError(errno.ENOENT, f"Couldn't find program {prog} in {path.name}")
        return os.dup(_check(lib.bpf_program__fd(p), f"get the fd of {prog}"))
    finally:
        lib.bpf_object__close(obj)


def tc_drop_dst_prog(prefix: str, name: str = "tc_drop_dst", prefix6: str | None = None) -> "Prog":
    """A tc program (SCHED_CLS, for tcx ingress: skb->data at the Ethernet header, any VLAN tag
    already taken off) that drops IPv4 packets to the prefix ("10.64.0.0/12": TC_ACT_SHOT), and with
    prefix6 (at most a /64: "fd47:7470::/32") IPv6 packets to that one, and lets everything else go
    on (TC_ACT_OK). The socket-path lab puts it on SGi: `pgwu socket`'s packet socket, a tap, has
    its copy by then, and the kernel's own stack never sees those packets.
    The program is gtplab/dut/tc_drop_dst.bpf.c, the prefixes in its rodata (network byte order);
    name is what this returns as Prog.name (the kernel's name is the C function's)."""
    net = ipaddress.ip_network(prefix, strict=True)
    rodata = net.network_address.packed + net.netmask.packed
    if prefix6 is None:
        rodata += bytes(24)
    else:
        net6 = ipaddress.IPv6Network(prefix6, strict=True)
        if net6.prefixlen > 64:
            raise ValueError(f"{prefix6}: the IPv6 prefix the tc program drops is at most a /64")
        rodata += net6.network_address.packed[:8] + net6.netmask.packed[:8] + struct.pack("=II", 1, 0)
    return Prog(object_prog(TC_DROP_DST_OBJ, "tc_drop_dst", rodata), name)


def enable_stats() -> int:
    """BPF_ENABLE_STATS(BPF_STATS_RUN_TIME): run time is counted while the returned fd is open."""
    return _check(_lib().bpf_enable_stats(0), "enable BPF run-time stats")


def link_update(link_fd: int, new_prog_fd: int, old_prog_fd: int | None = None) -> None:
    """Swap the program of a link (BPF_LINK_UPDATE) in one step; with old_prog_fd only if that is the
    program it has (BPF_F_REPLACE). An XDP link keeps its device's receive setup (veth: its NAPI
    thread is not made anew), unlike a detach and attach."""
    opts = _LinkUpdateOpts(flags=BPF_F_REPLACE if old_prog_fd is not None else 0, old_prog_fd=old_prog_fd or 0)
    _check(_lib().bpf_link_update(link_fd, new_prog_fd, ctypes.byref(opts)), "update a link's program")


def map_info(fd: int) -> MapInfo:
    info = MapInfo()
    n = ctypes.c_uint32(ctypes.sizeof(info))
    _check(_lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(n)), "read map info")
    return info


def prog_info(fd: int) -> ProgInfo:
    info = ProgInfo()
    n = ctypes.c_uint32(ctypes.sizeof(info))
    _check(_lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(n)), "read program info")
    return info


class _BpfObject:
    """A BPF object held by its fd (a map or a program): opened from its pin, closed once."""

    fd: int

    @classmethod
    def pinned(cls, path: str):
        return cls(obj_get(path), os.path.basename(path))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Map(_BpfObject):
    """A BPF map by fd. Keys and values are bytes; per-CPU maps return a list of bytes, one per CPU."""

    def __init__(self, fd: int, name: str = "map"):
        self.fd = fd
        self.name = name
        info = map_info(fd)
        self.key_size = info.key_size
        self.value_size = info.value_size
        self.max_entries = info.max_entries
        self.map_flags = info.map_flags
        self.type = info.type
        self.percpu = info.type in _PERCPU_TYPES
        self.ncpus = possible_cpus() if self.percpu else 1
        self._stride = (self.value_size + 7) & ~7

    def _vbuf(self):
        return ctypes.create_string_buffer(self._stride * self.ncpus if self.percpu else self.value_size)

    def lookup(self, key: bytes):
        """The value, or None when the key is absent."""
        k = ctypes.create_string_buffer(bytes(key), self.key_size)
        v = self._vbuf()
        try:
            _check(_lib().bpf_map_lookup_elem(self.fd, k, v), f"look up in {self.name}")
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        raw = v.raw
        if self.percpu:
            return [raw[i * self._stride:i * self._stride + self.value_size] for i in range(self.ncpus)]
        return raw[:self.value_size]

    def update(self, key: bytes, value, flags: int = BPF_ANY) -> None:
        """Set key to value (bytes; for per-CPU maps bytes for every CPU, or a list of them)."""
        k = ctypes.create_string_buffer(bytes(key), self.key_size)
        if self.percpu:
            vals = value if isinstance(value, list) else [value] * self.ncpus
            raw = b"".join(bytes(x).ljust(self._stride, b"\0") for x in vals)
            v = ctypes.create_string_buffer(raw, len(raw))
        else:
            v = ctypes.create_string_buffer(bytes(value), self.value_size)
        _check(_lib().bpf_map_update_elem(self.fd, k, v, flags), f"update {self.name}")

    def delete(self, key: bytes) -> bool:
        k = ctypes.create_string_buffer(bytes(key), self.key_size)
        try:
            _check(_lib().bpf_map_delete_elem(self.fd, k), f"delete from {self.name}")
        except OSError as e:
            if e.errno == errno.ENOENT:
                return False
            raise
        return True

    def lookup_all_raw(self) -> tuple[bytes, bytes, int]:
        """Every entry in one BPF_MAP_LOOKUP_BATCH call: (keys, values, count) as raw buffers.

        Values are laid out as lookup() reads them (per-CPU maps: ncpus values of 8-aligned stride
        per key). Meant for small maps read often (the stats array)."""
        n = self.max_entries
        keys = ctypes.create_string_buffer(self.key_size * n)
        vsize = self._stride * self.ncpus if self.percpu else self.value_size
        vals = ctypes.create_string_buffer(vsize * n)
        out_batch = ctypes.create_string_buffer(max(self.key_size, 8))
        count = ctypes.c_uint32(n)
        try:
            _check(_lib().bpf_map_lookup_batch(self.fd, None, out_batch, keys, vals, ctypes.byref(count),
                                               ctypes.byref(_BatchOpts())), f"batch-read {self.name}")
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        return keys.raw[:count.value * self.key_size], vals.raw[:count.value * vsize], count.value

    def keys(self):
        k = None
        nxt = ctypes.create_string_buffer(self.key_size)
        while True:
            kb = ctypes.create_string_buffer(k, self.key_size) if k is not None else None
            try:
                _check(_lib().bpf_map_get_next_key(self.fd, kb, nxt), f"iterate {self.name}")
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return
                raise
            k = nxt.raw[:self.key_size]
            yield k

    def items(self):
        for k in self.keys():
            v = self.lookup(k)
            if v is not None:
                yield k, v


class TestRunResult:
    __slots__ = ("retval", "data", "duration", "ctx")

    def __init__(self, retval, data, duration, ctx):
        self.retval = retval
        self.data = data
        self.duration = duration
        self.ctx = ctx


class Prog(_BpfObject):
    """A BPF program by fd, run with BPF_PROG_TEST_RUN."""

    def __init__(self, fd: int, name: str = "prog"):
        self.fd = fd
        self.name = name

    def info(self) -> ProgInfo:
        return prog_info(self.fd)

    @classmethod
    def by_id(cls, prog_id: int, name: str = "prog") -> "Prog":
        """A program someone else loaded, by its id (its run time and count: info())."""
        return cls(prog_get_fd_by_id(prog_id), name)

    def test_run(self, data: bytes, *, repeat: int = 1, ingress_ifindex: int = 0,
                 rx_queue_index: int = 0, flags: int = 0, batch_size: int = 0,
                 out_size: int = 8192) -> TestRunResult:
        """Run the program on data; returns verdict, output frame, mean ns per run, ctx out.

        ingress_ifindex sets xdp_md.ingress_ifindex (the device must exist in this netns).
        With flags=BPF_F_TEST_XDP_LIVE_FRAMES the frames are really sent (XDP_TX/REDIRECT) and no
        output frame comes back."""
        live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
        din = ctypes.create_string_buffer(bytes(data), len(data))
        dout = None if live else ctypes.create_string_buffer(out_size)
        ctx = None
        ctx_out = None
        if ingress_ifindex or rx_queue_index or live:
            ctx = XdpMd(data=0, data_end=len(data), ingress_ifindex=ingress_ifindex,
                        rx_queue_index=rx_queue_index)
            ctx_out = XdpMd()
        attr = _TestRunOpts(data_size_in=len(data), data_in=ctypes.addressof(din),
                        data_out=_addr(dout), data_size_out=0 if live else out_size,
                        repeat=repeat, flags=flags, batch_size=batch_size,
                        ctx_in=_addr(ctx), ctx_size_in=ctypes.sizeof(XdpMd) if ctx else 0,
                        ctx_out=_addr(ctx_out), ctx_size_out=ctypes.sizeof(XdpMd) if ctx_out else 0)
        test_run_opts(self.fd, attr, f"test-run {self.name}")
        out = b"" if live else dout.raw[:attr.data_size_out]
        return TestRunResult(attr.retval, out, attr.duration, ctx_out)


def u32(b: bytes, off: int = 0) -> int:
    return struct.unpack_from("=I", b, off)[0]


def u64(b: bytes, off: int = 0) -> int:
    return struct.unpack_from("=Q", b, off)[0]
