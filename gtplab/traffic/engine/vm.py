"""Compile a TRex stream (the JSON of STLStream.to_json()) into the engine's BPF field engine.

TRex's server runs a stream's "vm" instructions once per packet, in the order given, on a copy
of the stream's packet. This module checks every instruction and field against what the BPF
interpreter (bpf/trafficgen.bpf.c) implements, and packs the instruction list, the initial
variable state and the value lists into the layouts of bpf/trafficgen.h. Anything it does not
implement is refused with EngineError naming the instruction or field; nothing is ignored.

Semantics follow trex-core src/stx/stl/trex_stl_stream_vm.h (single core, split_to_cores has
no effect): see docs/engine.md for the details and the few deliberate differences.
"""

from __future__ import annotations

import base64
import math
import os
import struct
from dataclasses import dataclass, field

from gtplab.errors import UserError
from gtplab.gtpu import walk
from gtplab.rates import FCS_LEN, L1_OVERHEAD

# limits and layouts of bpf/trafficgen.h
MAX_INSNS = 16
MAX_VARS = 16
MAX_STREAMS = 64
MAX_LIST = 65535                  # values of a value_list (TRex's own limit)
LIST_CHUNK = 256                  # values per entry of the lists map
MAX_PGIDS = 256
MAX_FRAME = 3520
MAX_PIECES = 8
PIECE_LENS = (16, 8, 4, 2, 1)     # what span_sum() in trafficgen.bpf.c reads
TRAILER_LEN = 16
TRAILER_MAGIC = 0x4C47

(OP_NOP, OP_VAR_INC, OP_VAR_DEC, OP_VAR_RAND, OP_LIST_INC, OP_LIST_DEC, OP_LIST_RAND,
 OP_RAND_LIMIT, OP_TUPLE, OP_WRITE, OP_WRITE_MASK, OP_FIX_IPV4, OP_FIX_HW, OP_TRIM,
 OP_TRAILER, OP_WRITE_BE32) = range(16)
F_BIG_ENDIAN, F_L4_UDP, F_L4_TCP, F_INCR = 1, 2, 4, 8

INSN_FMT = "<BBBBHHiIQQQqQHHI" + "HBB" * MAX_PIECES  # struct tg_insn
INSN_SIZE = struct.calcsize(INSN_FMT)
VAR_FMT = "<QQII"                 # struct tg_var
STATE_TAIL_FMT = "<IIQQQII"       # rand_seed, seq, tx_packets, tx_bytes, errors, cache_pos, pad
STATE_SIZE = MAX_VARS * struct.calcsize(VAR_FMT) + struct.calcsize(STATE_TAIL_FMT)
STATE_TX_OFF = MAX_VARS * struct.calcsize(VAR_FMT) + 8    # tx_packets, tx_bytes, errors
STREAM_HDR_FMT = "<IIIIII"        # n_insns, pg_id, flags, cache_n, cache_base, pad
assert INSN_SIZE == 96 and STATE_SIZE == 424
# the frame cache (struct tg_cframe): prebuilt frames of a periodic program
CACHE_FRAMES = 16384              # per port object, shared by its streams
CACHE_FRAME = 128                 # bytes: only frames up to this long are cached
CACHE_MAX_PERIOD = 4096           # frames of one stream

# TRex CTRexVmInsFixHwCs l4 types
L4_TYPE_UDP, L4_TYPE_TCP, L4_TYPE_IP = 11, 13, 17

SUPPORTED = ("flow_var", "flow_var_rand_limit", "write_flow_var", "write_mask_flow_var",
             "tuple_flow_var", "fix_checksum_ipv4", "fix_checksum_hw", "trim_pkt_size")
RATE_TYPES = ("pps", "bps_L1", "bps_L2", "percentage")
MODES = ("continuous", "single_burst", "multi_burst")
# the largest burst of a paced continuous stream (mode.burst): a veth's receive ring, the lab's
# DUT side, holds 256 frames; a larger burst would be lost there, before anything measured it
MAX_PACED_BURST = 256


class EngineError(UserError):
    """A stream or profile the engine cannot run as asked: one line naming what, nothing started."""


@dataclass
class Insn:
    op: int
    var: int = 0
    size: int = 0
    flags: int = 0
    offset: int = 0
    arg: int = 0
    shift: int = 0
    mask: int = 0
    min: int = 0
    max: int = 0
    step: int = 0
    add: int = 0
    init: int = 0
    base: tuple[int, int] = (0, 0)          # incremental checksums, see _plan_checksums
    pieces: tuple[tuple[int, int, int], ...] = ()   # (offset, length, sums: 1 IPv4, 2 L4)

    def pack(self) -> bytes:
        pieces = [x for pc in self.pieces for x in pc]
        pieces += [0] * (3 * MAX_PIECES - len(pieces))
        return struct.pack(INSN_FMT, self.op, self.var, self.size, self.flags, self.offset,
                           self.arg, self.shift, self.mask & 0xFFFFFFFF, self.min, self.max,
                           self.step, self.add, self.init, *self.base, len(self.pieces), *pieces)


@dataclass
class Var:
    index: int
    size: int
    val: int = 0
    cnt: int = 0
    seed: int = 0
    idx: int = 0
    maxval: int = 0     # largest value it can take (trim checks)
    minval: int = 0


@dataclass
class CompiledStream:
    """One stream ready for the maps: template frame, program, initial state, rate and mode."""
    name: str | None
    frame: bytes
    insns: list[Insn]
    vars: list[Var]
    lists: dict[int, list[int]]
    rand_seed: int
    pg_id: int | None = None
    latency: bool = False
    mode: str = "continuous"
    rate_type: str = "pps"
    rate_value: float = 1.0
    total_pkts: int = 0          # single_burst
    pkts_per_burst: int = 0      # multi_burst
    ibg_us: float = 0.0
    count: int = 0
    burst: int = 1               # continuous: frames back to back per burst (the engine's own key)
    isg_us: float = 0.0
    json: dict = field(default_factory=dict, repr=False)

    def stream_value(self, pg_id: int | None = None, cache: tuple[int, int] = (0, 0)) -> bytes:
        """struct tg_stream; cache = (prebuilt frames, first of them in the cache map)."""
        pg = self.pg_id if pg_id is None else pg_id
        body = b"".join(i.pack() for i in self.insns)
        body = body.ljust(MAX_INSNS * INSN_SIZE, b"\0")
        flags = 1 if self.pg_id is not None else 0
        return struct.pack(STREAM_HDR_FMT, len(self.insns), pg or 0, flags, cache[0], cache[1], 0) + body

    def state_value(self) -> bytes:
        by_index = {v.index: v for v in self.vars}
        out = b""
        for i in range(MAX_VARS):
            v = by_index.get(i)
            out += struct.pack(VAR_FMT, v.val, v.cnt, v.seed, v.idx) if v else bytes(24)
        return out + struct.pack(STATE_TAIL_FMT, self.rand_seed, 0, 0, 0, 0, 0, 0)

    def period(self) -> int | None:
        """Frames after which this program repeats itself exactly, when it can be prebuilt (the
        frame cache, struct tg_cframe): every variable a plain inc/dec (modular over its range,
        as tg_tx runs it) or a value list walked inc/dec, no random, tuple, trailer or trim, frame <= CACHE_FRAME
        bytes, period <= CACHE_MAX_PERIOD. None otherwise: the program runs per packet."""
        if len(self.frame) > CACHE_FRAME:
            return None
        period = 1
        for i in self.insns:
            if i.op in (OP_VAR_INC, OP_VAR_DEC, OP_LIST_INC, OP_LIST_DEC):
                span = i.arg if i.op in (OP_LIST_INC, OP_LIST_DEC) else i.max - i.min + 1
                step = i.step % span
                period = math.lcm(period, span // math.gcd(step, span) if step else 1)
                if period > CACHE_MAX_PERIOD:
                    return None
            elif i.op not in (OP_WRITE, OP_WRITE_BE32, OP_WRITE_MASK, OP_FIX_IPV4, OP_FIX_HW, OP_NOP):
                return None
        return period

    def list_entries(self, slot: int, var_index: int) -> list[tuple[bytes, bytes]]:
        """(key, value) entries of the lists map for one variable's value list in slot: chunks of
        LIST_CHUNK values, key (slot * MAX_VARS + var) << 8 | chunk (struct lists in the BPF)."""
        vals = self.lists[var_index]
        out = []
        for c in range(0, len(vals), LIST_CHUNK):
            part = vals[c:c + LIST_CHUNK]
            key = ((slot * MAX_VARS + var_index) << 8) | (c // LIST_CHUNK)
            out.append((struct.pack("<I", key),
                        struct.pack(f"<{len(part)}Q", *part).ljust(LIST_CHUNK * 8, b"\0")))
        return out

    def l2_len(self) -> int:
        """Frame length without FCS (the template's; trim_pkt_size may shorten packets)."""
        return len(self.frame)

    def pps(self, speed_bps: float) -> float:
        """The stream's own rate in packets per second (TRex rate types, FCS counted in L2)."""
        size = len(self.frame)
        if self.rate_type == "pps":
            return self.rate_value
        if self.rate_type == "bps_L2":
            return self.rate_value / ((size + FCS_LEN) * 8)
        if self.rate_type == "bps_L1":
            return self.rate_value / ((size + FCS_LEN + L1_OVERHEAD) * 8)
        return self.rate_value / 100.0 * speed_bps / ((size + FCS_LEN + L1_OVERHEAD) * 8)


def _err(stream: str, what: str) -> EngineError:
    return EngineError(f"{stream}: {what}")


def _need(ins: dict, key: str, where: str):
    if key not in ins:
        raise EngineError(f"{where}: field '{key}' is missing")
    return ins[key]


def _u(x, where: str, key: str, bits: int = 64) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x >= 1 << bits:
        raise EngineError(f"{where}: field '{key}'={x!r} is not an unsigned {bits}-bit integer")
    return x


# TRex's inc_mod/dec_mod (trex_stl_stream_vm.h)
def inc_mod(a: int, b: int, c: int, step: int, mask: int = (1 << 64) - 1) -> int:
    left = (b - c) & mask
    return (c + step) & mask if step <= left else (a + (step - left - 1)) & mask


def dec_mod(a: int, b: int, c: int, step: int, mask: int = (1 << 64) - 1) -> int:
    left = (c - a) & mask
    return (c - step) & mask if step <= left else (b - (step - left - 1)) & mask


def _inner_l4_checksums(frame: bytes) -> list[walk.L4Checksum]:
    """(checksum offset, L4 start, is_udp) of every UDP/TCP header in an Ethernet/VLAN/IPv4
    (/UDP 2152/GTP-U/IPv4)* frame, outermost first (gtplab.gtpu.walk). Used to keep L4 checksums
    right when the trailer is written; an unparsable frame simply yields what was found so far."""
    return walk.l4_checksums(frame, ipv6=True)


def _payload_start(frame: bytes) -> int:
    """Where the innermost L4 payload starts (for the trailer room check)."""
    cks = _inner_l4_checksums(frame)
    if not cks:
        return 14
    _, l4, udp = cks[-1]
    if udp:
        return l4 + 8
    return l4 + (frame[l4 + 12] >> 4) * 4


def compile_stream(js: dict, name: str | None = None) -> CompiledStream:
    """Check and compile one TRex stream JSON; raises EngineError naming what is unsupported."""
    where = f"stream {name or js.get('name') or '?'}"
    if not isinstance(js, dict):
        raise EngineError(f"{where}: not a stream object")
    if js.get("self_start", True) is not True:
        raise _err(where, "self_start=false (stream chaining) is not supported")
    if js.get("next_stream_id", -1) not in (-1, None):
        raise _err(where, "next_stream_id (stream chaining) is not supported")
    if js.get("start_paused"):
        raise _err(where, "start_paused is not supported")
    if js.get("action_count", 0):
        raise _err(where, "action_count is not supported")

    pkt = _need(js, "packet", where)
    try:
        frame = base64.b64decode(_need(pkt, "binary", where), validate=True)
    except (ValueError, TypeError):
        raise _err(where, "packet.binary is not base64") from None
    if not 14 <= len(frame) <= MAX_FRAME:
        raise _err(where, f"packet of {len(frame)} bytes (supported: 14..{MAX_FRAME})")

    cs = CompiledStream(name=js.get("name") or name, frame=frame, insns=[], vars=[], lists={},
                        rand_seed=int(js.get("random_seed") or 0) or
                        int.from_bytes(os.urandom(4), "little") or 1, json=js)
    _compile_mode(cs, js, where)
    _compile_flow_stats(cs, js, where)
    _compile_vm(cs, js.get("vm") or {}, where)
    return cs


def _compile_mode(cs: CompiledStream, js: dict, where: str) -> None:
    mode = _need(js, "mode", where)
    mtype = mode.get("type")
    if mtype not in MODES:
        raise _err(where, f"mode type '{mtype}' is not supported (supported: {', '.join(MODES)})")
    rate = mode.get("rate") or {}
    rtype = rate.get("type", "pps")
    if rtype not in RATE_TYPES:
        raise _err(where, f"rate type '{rtype}' is not supported (supported: {', '.join(RATE_TYPES)})")
    value = rate.get("value")
    if not isinstance(value, (int, float)) or value <= 0:
        raise _err(where, f"rate value {value!r} must be a positive number")
    cs.mode, cs.rate_type, cs.rate_value = mtype, rtype, float(value)
    if mtype == "single_burst":
        cs.total_pkts = _u(mode.get("total_pkts"), where, "total_pkts")
    elif mtype == "multi_burst":
        cs.pkts_per_burst = _u(mode.get("pkts_per_burst"), where, "pkts_per_burst")
        cs.count = _u(mode.get("count"), where, "count")
        ibg = mode.get("ibg", 0.0)
        if not isinstance(ibg, (int, float)) or ibg < 0:
            raise _err(where, f"ibg {ibg!r} must be >= 0 (usec)")
        cs.ibg_us = float(ibg)
    if "burst" in mode:
        # not TRex's: a continuous stream sent as bursts of `burst` frames back to back at the same
        # average rate (paced in the kernel: struct tg_pace burst); TRex sends such bursts as a
        # multi-burst at line rate
        b = mode["burst"]
        if mtype != "continuous" or not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= MAX_PACED_BURST:
            raise _err(where, f"burst {b!r}: an integer 1..{MAX_PACED_BURST}, of a continuous stream only")
        cs.burst = b
    isg = js.get("isg", 0.0)
    if not isinstance(isg, (int, float)) or isg < 0:
        raise _err(where, f"isg {isg!r} must be >= 0 (usec)")
    cs.isg_us = float(isg)


def _compile_flow_stats(cs: CompiledStream, js: dict, where: str) -> None:
    fs = js.get("flow_stats") or {}
    if not fs.get("enabled"):
        return
    for k in ("vxlan", "ieee_1588"):
        if fs.get(k):
            raise _err(where, f"flow_stats {k}=true is not supported")
    rule = fs.get("rule_type", "stats")
    if rule not in ("stats", "latency"):
        raise _err(where, f"flow_stats rule_type '{rule}' is not supported (stats, latency)")
    pg = _u(fs.get("stream_id"), where, "flow_stats.stream_id", 16)
    cs.pg_id = pg
    cs.latency = rule == "latency"


def _compile_vm(cs: CompiledStream, vm: dict, where: str) -> None:
    if vm.get("cache"):
        raise _err(where, "vm cache is not supported")
    unknown = set(vm) - {"instructions", "split_by_var", "cache"}
    if unknown:
        raise _err(where, f"vm field(s) {', '.join(sorted(unknown))} not supported")
    if vm.get("split_by_var"):
        raise _err(where, "vm split_by_var is not supported")
    instrs = vm.get("instructions") or []
    names: dict[str, Var] = {}
    frame = cs.frame
    out: list[Insn] = []
    last_trim = -1

    def new_var(vname: str, size: int, w: str) -> Var:
        if vname in names:
            raise EngineError(f"{w}: flow variable '{vname}' already exists")
        if len(cs.vars) >= MAX_VARS:
            raise EngineError(f"{w}: more than {MAX_VARS} flow variables")
        v = Var(index=len(cs.vars), size=size)
        cs.vars.append(v)
        names[vname] = v
        return v

    def var_of(ins: dict, w: str) -> Var:
        vname = _need(ins, "name", w)
        if vname not in names:
            raise EngineError(f"{w}: flow variable '{vname}' is not defined before use")
        return names[vname]

    def check_range(off: int, size: int, w: str) -> None:
        if off + size > len(frame):
            raise EngineError(f"{w}: writes {size} bytes at offset {off}, past the "
                              f"{len(frame)}-byte packet")

    for n, ins in enumerate(instrs):
        t = ins.get("type")
        w = f"{where}: instruction {n} ({t})"
        if t not in SUPPORTED:
            raise EngineError(f"{where}: unsupported field-engine instruction '{t}' "
                              f"(supported: {', '.join(SUPPORTED)})")
        if t == "flow_var":
            size = _need(ins, "size", w)
            if size not in (1, 2, 4, 8):
                raise EngineError(f"{w}: size {size} (supported: 1, 2, 4, 8)")
            if ins.get("next_var"):
                raise EngineError(f"{w}: next_var is not supported")
            op = _need(ins, "op", w)
            if op not in ("inc", "dec", "random"):
                raise EngineError(f"{w}: op '{op}' is not supported (inc, dec, random)")
            bits = size * 8
            step = _u(ins.get("step", 1), w, "step", bits)
            v = new_var(ins["name"], size, w)
            vlist = ins.get("value_list")
            if vlist is not None:
                if not 0 < len(vlist) <= MAX_LIST:
                    raise EngineError(f"{w}: value_list of {len(vlist)} values (supported: 1..{MAX_LIST})")
                vals = [_u(x, w, "value_list", bits) for x in vlist]
                cs.lists[v.index] = vals
                v.idx = 0 if op != "dec" else len(vals) - 1
                v.minval, v.maxval = min(vals), max(vals)
                opc = {"inc": OP_LIST_INC, "dec": OP_LIST_DEC, "random": OP_LIST_RAND}[op]
                out.append(Insn(opc, var=v.index, size=size, arg=len(vals), step=step % len(vals)))
                continue
            lo = _u(_need(ins, "min_value", w), w, "min_value", bits)
            hi = _u(_need(ins, "max_value", w), w, "max_value", bits)
            init = _u(ins.get("init_value", lo), w, "init_value", bits)
            if not lo <= init <= hi:
                raise EngineError(f"{w}: init_value {init} not within [{lo}, {hi}]")
            span = hi - lo + 1                      # 2**64 for a full 8-byte range
            dstep = step % span
            v.minval, v.maxval = lo, hi
            # the state holds the value before init, so that the first packet carries init
            # (TRex set_bss_init_value/peek_prev)
            if op == "inc":
                v.val = dec_mod(lo, hi, init, dstep)
            elif op == "dec":
                v.val = inc_mod(lo, hi, init, dstep)
            else:
                v.val = init
            opc = {"inc": OP_VAR_INC, "dec": OP_VAR_DEC, "random": OP_VAR_RAND}[op]
            out.append(Insn(opc, var=v.index, size=size, min=lo, max=hi, step=dstep))
        elif t == "flow_var_rand_limit":
            size = _need(ins, "size", w)
            if size not in (1, 2, 4, 8):
                raise EngineError(f"{w}: size {size} (supported: 1, 2, 4, 8)")
            if ins.get("next_var"):
                raise EngineError(f"{w}: next_var is not supported")
            bits = size * 8
            limit = _u(_need(ins, "limit", w), w, "limit", bits)
            if limit == 0:
                raise EngineError(f"{w}: limit must be > 0")
            seed = _u(_need(ins, "seed", w), w, "seed", 32)
            lo = _u(_need(ins, "min_value", w), w, "min_value", bits)
            hi = _u(_need(ins, "max_value", w), w, "max_value", bits)
            if lo > hi:
                raise EngineError(f"{w}: min_value {lo} > max_value {hi}")
            v = new_var(ins["name"], size, w)
            v.seed, v.cnt, v.minval, v.maxval = seed, 0, lo, hi
            out.append(Insn(OP_RAND_LIMIT, var=v.index, size=size, min=lo, max=hi,
                            add=limit, init=seed))
        elif t == "tuple_flow_var":
            if ins.get("flags", 0):
                raise EngineError(f"{w}: flags={ins['flags']} is not supported (only 0)")
            ip_lo = _u(_need(ins, "ip_min", w), w, "ip_min", 32)
            ip_hi = _u(_need(ins, "ip_max", w), w, "ip_max", 32)
            p_lo = _u(_need(ins, "port_min", w), w, "port_min", 16)
            p_hi = _u(_need(ins, "port_max", w), w, "port_max", 16)
            limit = _u(ins.get("limit_flows", 0), w, "limit_flows", 32)
            if ip_lo > ip_hi or p_lo > p_hi:
                raise EngineError(f"{w}: min above max")
            base = _need(ins, "name", w)
            vip = new_var(base + ".ip", 4, w)
            vport = new_var(base + ".port", 2, w)
            # state before the first packet: ip at max, port at max, so the first step wraps
            # both to (ip_min, port_min) as TRex's first packet shows
            vip.val, vport.val = ip_hi, p_hi
            vip.minval, vip.maxval, vport.minval, vport.maxval = ip_lo, ip_hi, p_lo, p_hi
            out.append(Insn(OP_TUPLE, var=vip.index, size=4, min=ip_lo, max=ip_hi,
                            step=p_lo | p_hi << 16, add=limit))
            if vport.index != vip.index + 1:
                raise EngineError(f"{w}: internal: tuple variables not adjacent")
        elif t == "write_flow_var":
            v = var_of(ins, w)
            off = _u(_need(ins, "pkt_offset", w), w, "pkt_offset", 16)
            add = ins.get("add_value", 0)
            if not isinstance(add, int) or abs(add) >= 1 << 63:
                raise EngineError(f"{w}: add_value {add!r} is not an integer")
            check_range(off, v.size, w)
            big = ins.get("is_big_endian", True)
            # the common 4-byte big-endian write has its own opcode: fewer branches per packet
            opc = OP_WRITE_BE32 if big and v.size == 4 else OP_WRITE
            out.append(Insn(opc, var=v.index, size=v.size, offset=off,
                            flags=F_BIG_ENDIAN if big else 0, add=add))
        elif t == "write_mask_flow_var":
            v = var_of(ins, w)
            if v.size not in (1, 2, 4):
                raise EngineError(f"{w}: variable of size {v.size} (supported: 1, 2, 4)")
            off = _u(_need(ins, "pkt_offset", w), w, "pkt_offset", 16)
            cast = _need(ins, "pkt_cast_size", w)
            if cast not in (1, 2, 4):
                raise EngineError(f"{w}: pkt_cast_size {cast} (supported: 1, 2, 4)")
            check_range(off, cast, w)
            mask = _u(_need(ins, "mask", w), w, "mask", 32)
            shift = ins.get("shift", 0)
            add = ins.get("add_value", 0)
            if not isinstance(shift, int) or not -31 <= shift <= 31:
                raise EngineError(f"{w}: shift {shift!r} (supported: -31..31)")
            if not isinstance(add, int) or abs(add) >= 1 << 31:
                raise EngineError(f"{w}: add_value {add!r} is not a 32-bit integer")
            big = ins.get("is_big_endian", True)
            out.append(Insn(OP_WRITE_MASK, var=v.index, size=cast, arg=v.size, offset=off,
                            mask=mask, shift=shift, add=add, flags=F_BIG_ENDIAN if big else 0))
        elif t == "fix_checksum_ipv4":
            off = _u(_need(ins, "pkt_offset", w), w, "pkt_offset", 16)
            if off + 20 > len(frame) or frame[off] >> 4 != 4:
                raise EngineError(f"{w}: no IPv4 header at offset {off}")
            out.append(Insn(OP_FIX_IPV4, offset=off))
        elif t == "fix_checksum_hw":
            l2 = _u(_need(ins, "l2_len", w), w, "l2_len", 16)
            l3 = _u(_need(ins, "l3_len", w), w, "l3_len", 16)
            l4t = _need(ins, "l4_type", w)
            # an IPv6 header (issue 32): no header checksum, the L4 one over the IPv6 pseudo
            # header (RFC 8200 8.1); size 6 tells tg_tx (struct tg_insn)
            v6 = l2 + 40 <= len(frame) and frame[l2] >> 4 == 6
            if not v6 and (l2 + 20 > len(frame) or frame[l2] >> 4 != 4):
                raise EngineError(f"{w}: no IPv4 or IPv6 header at l2_len {l2}")
            if v6 and l3 != 40:
                raise EngineError(f"{w}: l3_len {l3}: an IPv6 header without extension headers (40)")
            if not v6 and (l3 < 20 or l3 > 60):
                raise EngineError(f"{w}: l3_len {l3} is not an IPv4 header length")
            if l4t == L4_TYPE_UDP:
                flags, need = F_L4_UDP, 8
            elif l4t == L4_TYPE_TCP:
                flags, need = F_L4_TCP, 20
            elif l4t == L4_TYPE_IP:
                flags, need = 0, 0
            else:
                raise EngineError(f"{w}: l4_type {l4t} (supported: 11 UDP, 13 TCP, 17 IP)")
            if l2 + l3 + need > len(frame):
                raise EngineError(f"{w}: L4 header past the end of the packet")
            out.append(Insn(OP_FIX_HW, offset=l2, arg=l3, flags=flags, size=6 if v6 else 0))
        elif t == "trim_pkt_size":
            v = var_of(ins, w)
            if v.size != 2:
                raise EngineError(f"{w}: the size variable must have size 2 (has {v.size})")
            if v.maxval > len(frame):
                raise EngineError(f"{w}: size variable reaches {v.maxval}, above the "
                                  f"{len(frame)}-byte packet")
            if v.minval < 14:
                raise EngineError(f"{w}: size variable goes down to {v.minval} (< 14)")
            out.append(Insn(OP_TRIM, var=v.index))
            last_trim = len(out) - 1
    if cs.pg_id is not None:
        minsize = min((v.minval for v in cs.vars if any(
            i.op == OP_TRIM and i.var == v.index for i in out)), default=len(frame))
        start = _payload_start(frame)
        if minsize - TRAILER_LEN < start:
            raise EngineError(f"{where}: flow_stats needs {TRAILER_LEN} bytes of payload at the "
                              f"end of every packet (payload starts at {start}, smallest packet "
                              f"{minsize} bytes)")
        cks = [(c, l4, u) for c, l4, u in _inner_l4_checksums(frame)
               if int.from_bytes(frame[c:c + 2], "big") != 0][-2:]
        enc = [c | l4 << 16 | int(u) << 32 for c, l4, u in cks] + [0, 0]
        out.insert(last_trim + 1, Insn(OP_TRAILER, min=enc[0], max=enc[1]))
    if len(out) > MAX_INSNS:
        raise EngineError(f"{where}: {len(out)} instructions after compilation (max {MAX_INSNS})")
    _plan_checksums(out, frame)
    cs.insns = out


# ---- incremental checksums (trafficgen.h, "Incremental checksums") ---------------------------

def _byte_sum(frame: bytes, offsets) -> int:
    """Sum (not folded) of the frame's bytes at offsets as big-endian 16-bit words aligned on
    even frame offsets (a byte at an even offset is a high byte), like span_sum()."""
    return sum(frame[o] << (0 if o & 1 else 8) for o in offsets)


def _fold(x: int) -> int:
    while x >> 16:
        x = (x & 0xFFFF) + (x >> 16)
    return x


def _changed_bytes(ins: Insn, length: int | None) -> set[int] | None:
    """Frame offsets instruction ins may change; None: not known before the packet is made (the
    trailer after a trim)."""
    def rng(a, n):
        return set(range(a, a + n))
    if ins.op in (OP_WRITE, OP_WRITE_BE32, OP_WRITE_MASK):
        return rng(ins.offset, ins.size)
    if ins.op == OP_FIX_IPV4:
        return rng(ins.offset + 10, 2)
    if ins.op == OP_FIX_HW:
        out = set() if ins.size == 6 else rng(ins.offset + 10, 2)
        if ins.flags & (F_L4_UDP | F_L4_TCP):
            out |= rng(ins.offset + ins.arg + (6 if ins.flags & F_L4_UDP else 16), 2)
        return out
    if ins.op == OP_TRAILER:
        if length is None:
            return None
        out = rng(length - TRAILER_LEN, TRAILER_LEN)
        for enc in (ins.min, ins.max):          # the L4 checksums the trailer keeps right
            if enc & 0xFFFF:
                out |= rng(enc & 0xFFFF, 2)
        return out
    return set()


def _pieces(offsets: set[int], sums: int) -> list[tuple[int, int, int]]:
    """The offsets as runs, cut into the lengths span_sum() reads; (offset, length, sums)."""
    out = []
    todo = sorted(offsets)
    while todo:
        start = todo[0]
        n = 1
        while n < len(todo) and todo[n] == start + n:
            n += 1
        todo = todo[n:]
        while n:
            piece = next(x for x in PIECE_LENS if x <= n)
            out.append((start, piece, sums))
            start += piece
            n -= piece
    return out


def _plan_checksums(prog: list[Insn], frame: bytes) -> None:
    """Mark the fix instructions whose checksums tg_tx can take from the template's sum over the
    bytes the packet has not changed (base) plus the changed bytes as the frame holds them at the
    fix (pieces): F_INCR. Exact because each packet starts as a full copy of the template and
    every byte changed before the fix is at a known offset.

    Planned only when the ranges are fixed by the template: no trim before the fix (the length is
    the template's), the IPv4 IHL and total length not changed before it, ranges starting at even
    offsets, inside the template, and at most MAX_PIECES pieces; otherwise the fix sums the
    packet (same result, slower)."""
    length: int | None = len(frame)
    changed: set[int] | None = set()
    for ins in prog:
        if ins.op in (OP_FIX_IPV4, OP_FIX_HW) and changed is not None:
            sums = _checksum_ranges(ins, frame)
            l3 = ins.offset
            guard = {l3 + 4, l3 + 5} if ins.size == 6 else {l3, l3 + 2, l3 + 3}   # the lengths
            if sums is not None and not changed & guard:
                bases, pieces = [], {}
                for k, (cover, own, const) in enumerate(sums):
                    mine = (changed & cover) - {own, own + 1}
                    bases.append(_fold(const + _byte_sum(frame, cover - mine - {own, own + 1})))
                    for off, n, bit in _pieces(mine, 1 << k):
                        pieces[off, n] = pieces.get((off, n), 0) | bit   # read once for both
                pieces = [(off, n, bits) for (off, n), bits in pieces.items()]
                if len(pieces) <= MAX_PIECES:
                    ins.flags |= F_INCR
                    ins.base = (bases + [0])[0], (bases + [0, 0])[1]
                    ins.pieces = tuple(pieces)
        if ins.op == OP_TRIM:
            length = None
        more = _changed_bytes(ins, length)
        changed = None if more is None or changed is None else changed | more


def _checksum_ranges(ins: Insn, frame: bytes):
    """[(covered offsets, own checksum offset, constant)] of the sums of fix ins (IPv4 header,
    then L4 with the pseudo header), from the template; None if they are not fixed by the
    template or do not start at even offsets."""
    l3 = ins.offset
    if ins.size == 6:
        return _checksum_ranges6(ins, frame)
    if l3 & 1 or l3 + 20 > len(frame) or frame[l3] >> 4 != 4:
        return None
    ihl = (frame[l3] & 0xF) * 4
    if ihl < 20 or l3 + ihl > len(frame):
        return None
    out = [(set(range(l3, l3 + ihl)), l3 + 10, 0)]
    if ins.op == OP_FIX_HW and ins.flags & (F_L4_UDP | F_L4_TCP):
        tot = int.from_bytes(frame[l3 + 2:l3 + 4], "big")
        l4 = l3 + ins.arg
        own = l4 + (6 if ins.flags & F_L4_UDP else 16)
        if ins.arg & 1 or tot < ins.arg or l3 + tot > len(frame) or own + 2 > l3 + tot:
            return None
        proto = 17 if ins.flags & F_L4_UDP else 6
        cover = set(range(l3 + 12, l3 + 20)) | set(range(l4, l3 + tot))
        out.append((cover, own, proto + (tot - ins.arg)))
    return out


def _checksum_ranges6(ins: Insn, frame: bytes):
    """_checksum_ranges of a fix_checksum_hw at an IPv6 header: no header sum (an empty first
    range, base[0] 0, which tg_tx does not store), the L4 sum over the IPv6 pseudo header (source,
    destination, upper-layer length, next header: RFC 8200 8.1) and the L4 bytes."""
    l3 = ins.offset
    if l3 & 1 or l3 + 40 > len(frame) or ins.arg != 40:
        return None
    out = [(set(), -2, 0)]
    if ins.flags & (F_L4_UDP | F_L4_TCP):
        end = l3 + 40 + int.from_bytes(frame[l3 + 4:l3 + 6], "big")
        l4 = l3 + ins.arg
        own = l4 + (6 if ins.flags & F_L4_UDP else 16)
        if end > len(frame) or own + 2 > end:
            return None
        proto = 17 if ins.flags & F_L4_UDP else 6
        out.append((set(range(l3 + 8, l3 + 40)) | set(range(l4, end)), own, proto + (end - l4)))
    return out
