"""The engine's struct layouts in Python match the BPF object's BTF (as test_struct_layout_matches_btf
does for the PGW-U): the struct formats and limits of gtplab/traffic/engine/vm.py (and the few other
engine modules that unpack a map value) are copies of bpf/trafficgen.h, and a drift between the two
would make the engine write or read fields at the wrong offsets, silently. Each layout is compared
leaf by leaf (byte offset, size, signedness of every integer, arrays and nested structs expanded)
with the compiled trafficgen.bpf.o's BTF, read with bpftool; the #defines and the op enum that BTF
does not carry are read from trafficgen.h itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from functools import lru_cache

import pytest

from gtplab.traffic.engine import capture, pacing, stats, streams, vm
from gtplab.traffic.engine.port import BPF_OBJ
from tests.lib.streams import UDP_PKT, fv, stream, wr

HEADER = BPF_OBJ.parent / "trafficgen.h"
_SIGNED = {"b": True, "h": True, "i": True, "q": True, "B": False, "H": False, "I": False, "Q": False}


@lru_cache(maxsize=1)
def btf() -> dict[int, dict]:
    """The object's BTF types by id (bpftool -j btf dump file)."""
    if not BPF_OBJ.exists():
        pytest.fail(f"{BPF_OBJ} not built: run make -C {BPF_OBJ.parent}")
    # bpftool is in /usr/sbin, off an unprivileged user's PATH; reading a file's BTF needs no privilege
    tool = shutil.which("bpftool", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"]))
    if tool is None:
        pytest.fail("bpftool not found (on PATH or in /usr/sbin): setup.sh installs it")
    out = subprocess.run([tool, "-j", "btf", "dump", "file", str(BPF_OBJ)],
                         capture_output=True, text=True, check=True).stdout
    return {t["id"]: t for t in json.loads(out)["types"]}


def resolve(tid: int) -> dict:
    """The type behind typedefs and qualifiers."""
    t = btf()[tid]
    while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
        t = btf()[t["type_id"]]
    return t


def struct_type(name: str) -> dict:
    found = [t for t in btf().values() if t["kind"] == "STRUCT" and t["name"] == name]
    assert len(found) == 1, f"struct {name}: {len(found)} in the BTF of {BPF_OBJ.name}"
    return found[0]


def member(name: str, field: str) -> dict:
    m = [x for x in struct_type(name)["members"] if x["name"] == field]
    assert m, f"struct {name} has no member {field} in BTF"
    return m[0]


def offset(name: str, field: str) -> int:
    return member(name, field)["bits_offset"] // 8


def nr_elems(name: str, field: str) -> int:
    t = resolve(member(name, field)["type_id"])
    assert t["kind"] == "ARRAY", f"{name}.{field} is a {t['kind']}, not an array"
    return t["nr_elems"]


def btf_leaves(t: dict, base: int = 0) -> list[tuple[int, int, bool]]:
    """(byte offset, size, signed) of every integer in type t, arrays and structs expanded."""
    if t["kind"] == "INT":
        return [(base, t["size"], t["encoding"] == "SIGNED")]
    if t["kind"] == "ARRAY":
        elem = resolve(t["type_id"])
        size = type_size(elem)
        return [x for i in range(t["nr_elems"]) for x in btf_leaves(elem, base + i * size)]
    if t["kind"] == "STRUCT":
        out = []
        for m in t["members"]:
            assert not m.get("bitfield_size"), f"{t['name']}.{m['name']}: a bitfield"
            out += btf_leaves(resolve(m["type_id"]), base + m["bits_offset"] // 8)
        return out
    raise AssertionError(f"unexpected BTF kind {t['kind']} in an engine struct")


def type_size(t: dict) -> int:
    if t["kind"] == "ARRAY":
        return t["nr_elems"] * type_size(resolve(t["type_id"]))
    return t["size"]


def fmt_leaves(fmt: str, base: int = 0) -> list[tuple[int, int, bool]]:
    """The same for a little-endian struct format ('<' and integer codes only, as the engine uses)."""
    assert fmt[0] == "<", f"{fmt}: the engine packs little-endian, unaligned formats"
    out, off = [], base
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt[1:]):
        assert code in _SIGNED, f"{fmt}: code {code}"
        size = struct.calcsize("<" + code)
        for _ in range(int(count or 1)):
            out.append((off, size, _SIGNED[code]))
            off += size
    return out


def map_def(name: str) -> dict[str, dict]:
    """The members of a map definition (struct {__uint(type, ..)...} name SEC(".maps")) by name."""
    var = [t for t in btf().values() if t["kind"] == "VAR" and t["name"] == name]
    assert len(var) == 1, f"map {name}: {len(var)} in BTF"
    return {m["name"]: m for m in resolve(var[0]["type_id"])["members"]}


def map_max_entries(name: str) -> int:
    """__uint(max_entries, N) is a pointer to an array of N ints."""
    return resolve(btf()[map_def(name)["max_entries"]["type_id"]]["type_id"])["nr_elems"]


def map_value(name: str) -> dict:
    return resolve(btf()[map_def(name)["value"]["type_id"]]["type_id"])


def assert_same(name: str, py: list, c: list) -> None:
    """A readable failure: the first leaf where Python and BTF differ."""
    for i, (a, b) in enumerate(zip(py, c)):
        assert a == b, f"struct {name}, leaf {i}: Python packs (offset, size, signed) {a}, BTF says {b}"
    assert len(py) == len(c), f"struct {name}: Python packs {len(py)} integers, BTF has {len(c)}"


# ---- the struct formats, leaf by leaf ---------------------------------------------------------------

def _layouts():
    """(struct, the Python layout's leaves, its size as Python takes it) for each engine struct."""
    var_size = struct.calcsize(vm.VAR_FMT)
    state = [x for i in range(vm.MAX_VARS) for x in fmt_leaves(vm.VAR_FMT, i * var_size)]
    state += fmt_leaves(vm.STATE_TAIL_FMT, vm.MAX_VARS * var_size)
    hdr = struct.calcsize(vm.STREAM_HDR_FMT)
    stream = fmt_leaves(vm.STREAM_HDR_FMT)
    stream += [x for i in range(vm.MAX_INSNS) for x in fmt_leaves(vm.INSN_FMT, hdr + i * vm.INSN_SIZE)]
    return {
        "tg_insn": (fmt_leaves(vm.INSN_FMT), vm.INSN_SIZE),
        "tg_var": (fmt_leaves(vm.VAR_FMT), var_size),
        "tg_state": (state, vm.STATE_SIZE),
        "tg_stream": (stream, hdr + vm.MAX_INSNS * vm.INSN_SIZE),
        "tg_pace": (fmt_leaves("<" + streams.PACE.format.lstrip("<")), streams.PACE.size),
        "tg_cap_hdr": (fmt_leaves("<" + capture._HDR.format.lstrip("<")), capture._HDR.size),
    }


@pytest.mark.parametrize("name", ["tg_insn", "tg_var", "tg_state", "tg_stream", "tg_pace", "tg_cap_hdr"])
def test_struct_layout_matches_btf(name):
    """Every integer Python packs or unpacks for the struct is at BTF's offset, with its size and sign,
    and the struct's size is BTF's."""
    leaves, size = _layouts()[name]
    t = struct_type(name)
    assert size == t["size"], f"struct {name}: BTF size {t['size']}, Python takes {size}"
    assert_same(name, leaves, btf_leaves(t))


def test_packed_values_are_btf_sized():
    """What vm.py writes into the maps is exactly as long as the maps' values."""
    cs = vm.compile_stream(stream(UDP_PKT, [fv("a", 4, "inc", 0, 9), wr("a", 30)]))
    assert len(cs.stream_value()) == struct_type("tg_stream")["size"]
    assert len(cs.state_value()) == struct_type("tg_state")["size"]
    assert map_value("streams")["name"] == "tg_stream" and map_value("state")["name"] == "tg_state"


def test_field_offsets_used_by_name_match_btf():
    """The offsets the engine names rather than packs: tg_state's tx counters, tg_pace's max_run,
    tg_flow's head (stats reads it without the histogram), tg_port_stats' counters."""
    assert vm.STATE_TX_OFF == offset("tg_state", "tx_packets")
    assert (offset("tg_state", "tx_bytes"), offset("tg_state", "errors")) == (vm.STATE_TX_OFF + 8, vm.STATE_TX_OFF + 16)
    pace = [m["name"] for m in struct_type("tg_pace")["members"]]
    assert pace[streams.PACE_MAX_RUN] == "max_run"
    flow = struct_type("tg_flow")
    head = [m for m in flow["members"] if m["name"] != "hist"]
    leaves = [x for m in head for x in btf_leaves(resolve(m["type_id"]), m["bits_offset"] // 8)]
    assert_same("tg_flow (without hist)", fmt_leaves("<" + stats._FLOW_HDR.format.lstrip("<")), leaves)
    assert offset("tg_flow", "hist") == stats._FLOW_HDR.size
    assert (offset("tg_flow", "expected"), offset("tg_flow", "started")) == (16, 20)  # reset_rx_sequence
    assert [offset("tg_port_stats", f) for f in ("packets", "bytes", "cap_lost")] == [0, 8, 24]


def test_limits_match_btf():
    """The limits vm.py (and pacing, stats) copy from trafficgen.h, as the compiled arrays and maps
    have them."""
    assert vm.MAX_INSNS == nr_elems("tg_stream", "insn")
    assert vm.MAX_VARS == nr_elems("tg_state", "var")
    assert vm.MAX_PIECES == nr_elems("tg_insn", "piece")
    assert vm.MAX_FRAME == nr_elems("tg_tmpl", "bytes")
    assert vm.CACHE_FRAME == nr_elems("tg_cframe", "bytes") == struct_type("tg_cframe")["size"]
    assert pacing.MAX_PACED == nr_elems("tg_paced", "slot")
    assert stats._LAT_BUCKETS == nr_elems("tg_flow", "hist")
    assert vm.MAX_STREAMS == map_max_entries("streams") == map_max_entries("state") == map_max_entries("tmpl")
    assert vm.CACHE_FRAMES == map_max_entries("cache")
    assert vm.MAX_PGIDS == map_max_entries("rx_flow")
    lists = map_value("lists")
    assert lists["kind"] == "ARRAY" and vm.LIST_CHUNK == lists["nr_elems"]


# ---- what BTF does not carry: #defines and the op enum, from the header ------------------------------

def _defines() -> dict[str, int]:
    text = HEADER.read_text()
    return {n: int(v.rstrip("uU"), 0) for n, v in
            re.findall(r"#define (TG_\w+)\s+(0x[0-9a-fA-F]+[uU]?|\d+[uU]?)\b", text)}


def test_constants_match_header():
    d = _defines()
    assert (vm.MAX_INSNS, vm.MAX_VARS, vm.MAX_STREAMS, vm.MAX_LIST, vm.LIST_CHUNK, vm.MAX_PGIDS, vm.MAX_FRAME,
            vm.MAX_PIECES, vm.TRAILER_LEN, vm.TRAILER_MAGIC, vm.CACHE_FRAMES, vm.CACHE_FRAME) == \
        (d["TG_MAX_INSNS"], d["TG_MAX_VARS"], d["TG_MAX_STREAMS"], d["TG_MAX_LIST"], d["TG_LIST_CHUNK"],
         d["TG_MAX_PGIDS"], d["TG_MAX_FRAME"], d["TG_MAX_PIECES"], d["TG_TRAILER_LEN"], d["TG_TRAILER_MAGIC"],
         d["TG_CACHE_FRAMES"], d["TG_CACHE_FRAME"])
    assert (pacing.MAX_PACED, pacing.ANY_PACED, stats._LAT_BUCKETS) == \
        (d["TG_MAX_PACED"], d["TG_ANY_PACED"], d["TG_LAT_BUCKETS"])
    flags = dict(re.findall(r"#define TG_F_(\w+)\s+\(1 << (\d+)\)", HEADER.read_text()))
    assert {f"F_{n}": 1 << int(b) for n, b in flags.items()} == \
        {n: getattr(vm, n) for n in ("F_BIG_ENDIAN", "F_L4_UDP", "F_L4_TCP", "F_INCR")}


def test_ops_match_header_enum():
    """vm.py's OP_* are enum tg_op's TG_OP_*, name for name, in order (TG_OP_NOP = 0, no other value set)."""
    body = re.search(r"enum tg_op \{(.*?)\};", HEADER.read_text(), re.S).group(1)
    names = re.findall(r"^\s*TG_OP_(\w+)(?:\s*=\s*0)?,", body, re.M)
    assert names[-1] == "MAX"
    c_ops = {f"OP_{n}": i for i, n in enumerate(names[:-1])}
    py_ops = {n: v for n, v in vars(vm).items() if n.startswith("OP_") and isinstance(v, int)}
    assert c_ops == py_ops
