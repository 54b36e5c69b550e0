"""Python view of the XDP PGW-U data plane (dataplane/pgwu.h, dataplane/pgwu.bpf.c).

- pgwu_binary(), PGWU_OBJ, PGWU_H: where the PGW-U's program, BPF object and header are (the lab, the
  sweep, the PFCP agent's DUT, the tests and bench/ take them from here).
- REASONS: the drop/pass/forward reasons, parsed from `enum pgwu_reason` in dataplane/pgwu.h at
  import (PGWU_R_DROP_UNKNOWN_TEID -> "drop_unknown_teid"), so this list never drifts from the C.
- VERDICTS: XDP action names by value.
- Config / UlBearer / DlBearer: the map value structs, packed exactly as pgwu.h lays them out
  (addresses and TEIDs in network order, everything else host order).
- EVENTS: the events map's counters (replies sent or rate-limited), parsed from `enum pgwu_event`.
- Dataplane(pin_dir): the pinned maps and programs of one loaded instance (`pgwu -d PIN_DIR load`):
  test runs of both programs, config and bearers written straight into the maps, stats, events, and
  what the access program keeps of the signalling it consumes (peers, sig_rx).

Used by gtplab.lab.topology (runs pgwu), gtplab.dut.local (a lab's PGW-U during a measurement), the
data plane tests and bench/.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import struct
import time
from dataclasses import astuple, dataclass, field, replace
from pathlib import Path

from gtplab.kernel import bpf

REPO = Path(__file__).resolve().parents[2]
# Where the PGW-U's C sources and build artefacts are (dataplane/Makefile builds them there): the one
# place in gtplab, its tests and bench/ that names their folder.
PGWU_DIR = REPO / "dataplane"
PGWU_H = PGWU_DIR / "pgwu.h"              # the types and enums shared by the BPF program and pgwu
PGWU_OBJ = PGWU_DIR / "pgwu.bpf.o"        # the BPF object (its BTF: the struct layouts below)
PGWU_SOCK_H = PGWU_DIR / "pgwu_sock.h"    # the socket path's counters (gtplab.dut.sock)


def pgwu_binary() -> Path:
    """The `pgwu` program: $GTPLAB_PGWU if set (read at each call), else the one built in PGWU_DIR."""
    return Path(os.environ.get("GTPLAB_PGWU", PGWU_DIR / "pgwu"))


VERDICTS = bpf.XDP_VERDICTS  # ("aborted", "drop", "pass", "tx", "redirect")
VERDICT_MAX = len(VERDICTS)

SIDE_ACCESS = 0
SIDE_SGI = 1

CFG_CSUM = 1 << 0
CFG_FIB_CACHE = 1 << 1
CFG_NO_ERR_IND = 1 << 2             # off-switches: flags 0 means the behaviour is on
CFG_NO_INNER_CSUM_CHECK = 1 << 3
CFG_SPORT_FIXED = 1 << 4             # off-switch too: outer UDP source port 2152, not the flow hash
B_CSUM_ON = 1 << 0
B_CSUM_OFF = 1 << 1
B_QFI = 1 << 2                      # 5G N3: QFI in bits 8-13 of both halves' flags
B_QFI_SHIFT = 8
B_QOS = 1 << 3                      # both halves: the qos map (keyed by the local TEID) is enforced
B_PEER6 = 1 << 7                    # downlink half: sgw_addr is an index in n3v6_peers (N3 over IPv6)
N3V6_PEERS = 1024                   # PGWU_N3V6_PEERS
QOS_UL_CLOSED = 1 << 0              # struct pgwu_qos flags (PGWU_QOS_*)
QOS_DL_CLOSED = 1 << 1
QOS_QUOTA = 1 << 2
QOS_QUOTA_UL = 1 << 3
QOS_QUOTA_DL = 1 << 4
QOS_EXHAUSTED = 1 << 5
QOS_VOLTH = 1 << 6                  # th: a URR's volume threshold measured in the data path
QOS_VOLTH_UL = 1 << 7
QOS_VOLTH_DL = 1 << 8
QOS_VOLTH_CROSSED = 1 << 9
QOS_CTL_SET, QOS_CTL_TAKE_CROSSING, QOS_CTL_TAKE_ALL = 1, 2, 3    # qos_ctl ops (struct pgwu_qos_ctl)
QOS_KEEP_QUOTA = 1 << 0
QOS_MICRO = 1_000_000               # policer credit units per bit


def parse_reasons(header: Path = PGWU_H, enum: str = "pgwu_reason", prefix: str = "PGWU_R_",
                  end: str = "PGWU_REASON_MAX") -> tuple[str, ...]:
    """The names of enum pgwu_reason (or another enum of pgwu.h) in value order, lower case,
    without the prefix."""
    text = header.read_text()
    m = re.search(r"enum\s+" + enum + r"\s*\{(.*?)\};", text, re.S)
    if not m:
        raise RuntimeError(f"no enum {enum} in {header}")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    names: dict[int, str] = {}
    value = -1
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        mm = re.fullmatch(r"(" + prefix + r"\w+|" + end + r")\s*(?:=\s*(\w+))?", item)
        if not mm:
            raise RuntimeError(f"can't parse enum {enum} item {item!r} in {header}")
        value = int(mm.group(2), 0) if mm.group(2) else value + 1
        if mm.group(1) == end:
            break
        names[value] = mm.group(1)[len(prefix):].lower()
    if sorted(names) != list(range(len(names))):
        raise RuntimeError(f"enum {enum} in {header} is not dense from 0")
    return tuple(names[i] for i in range(len(names)))


REASONS = parse_reasons()
REASON_MAX = len(REASONS)
REASON = {name: i for i, name in enumerate(REASONS)}
# enum pgwu_event: counted in the events map, not per packet (err_ind_sent ...)
EVENTS = parse_reasons(enum="pgwu_event", prefix="PGWU_EV_", end="PGWU_EVENT_MAX")
# reasons whose packet is turned into a reply to its sender (verdict tx) while its budget lasts
REPLYING_DROPS = ("drop_unknown_teid", "drop_gtp_ext_unsupported", "drop_ttl_expired", "drop_frag_needed",
                  "drop_too_big")


def usual_verdicts(reason: str) -> tuple[str, ...]:
    """The verdicts a reason is documented with (pgwu.h): *_fwd redirect/tx, echo tx, pass_*, drop_*."""
    if reason in ("ul_fwd", "dl_fwd", "ul_cp_fwd", "dl_cp_fwd"):
        return ("redirect", "tx")
    if reason == "echo_reply":
        return ("tx",)
    if reason in REPLYING_DROPS:
        return ("drop", "tx")
    if reason.startswith("pass_"):
        return ("pass",)
    if reason.startswith("sig_"):        # signalling consumed by the program
        return ("drop",)
    if reason.startswith("drop_"):
        return ("drop",)
    raise ValueError(f"unknown reason {reason}")


def _ip(addr: str) -> bytes:
    return socket.inet_aton(addr)


def _ipstr(b: bytes) -> str:
    return socket.inet_ntoa(b)


def _mac(mac: str | bytes) -> bytes:
    if isinstance(mac, (bytes, bytearray)):
        return bytes(mac)
    return bytes(int(x, 16) for x in mac.split(":"))


def _macstr(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


FIB_CACHE_BITS = int(re.search(r"#define PGWU_FIB_CACHE_BITS (\d+)", PGWU_H.read_text()).group(1))


def fib_slot_of(dst: str, ingress_ifindex: int, src: str = "0.0.0.0") -> int:
    """pgwu_fib_slot_of() of pgwu.h: the fib_cache slot of (dst, ingress ifindex, src: the source
    when the cache is keyed by it (fib_gen[2]), else 0.0.0.0)."""
    d = struct.unpack("=I", _ip(dst))[0]  # the address as the program loads it (host order word)
    s = struct.unpack("=I", _ip(src))[0]
    m = 0xFFFFFFFF
    x = ((d ^ ((ingress_ifindex * 0x9E3779B1) & m) ^ ((s * 0x85EBCA6B) & m)) * 0x9E3779B1) & m
    return x >> (32 - FIB_CACHE_BITS)


@dataclass
class Nexthop:
    """struct pgwu_nexthop: a static next hop; ifindex 0 = use bpf_fib_lookup."""
    ifindex: int = 0
    smac: str = "00:00:00:00:00:00"
    dmac: str = "00:00:00:00:00:00"

    FMT = "=I6s6s"

    def pack(self) -> bytes:
        return struct.pack(self.FMT, self.ifindex, _mac(self.smac), _mac(self.dmac))

    @classmethod
    def unpack(cls, b: bytes) -> "Nexthop":
        ifindex, s, d = struct.unpack(cls.FMT, b)
        return cls(ifindex, _macstr(s), _macstr(d))


@dataclass
class Config:
    """struct pgwu_config. ue_pool as "A/LEN"; egress_vlan and nexthop indexed by side (access, sgi)."""
    local_addr: str = "0.0.0.0"
    csum: bool = False
    fib_cache: bool = False
    ue_pool: str = "0.0.0.0/0"
    egress_vlan: tuple[int, int] = (0, 0)
    restart_counter: int = 0
    nexthop: tuple[Nexthop, Nexthop] = field(default_factory=lambda: (Nexthop(), Nexthop()))
    err_ind: bool = True              # answer (Error Indication, Supported Ext. Headers Notification)
    inner_csum_check: bool = True     # drop uplink inner IPv4 with a bad header checksum
    sport_entropy: bool = True        # downlink outer UDP source port from the inner flow; False: 2152
    local_addr6: str = "::"           # N6 IPv6 address, the source of ICMPv6 errors; "::" none
    n3_addr6: str = "::"              # N3 (GTP-U) IPv6 address (N3 over IPv6); "::" none

    # local_addr flags ue_pool_addr ue_pool_mask egress_vlan[2] restart_counter pad[3] nexthop[2] local_addr6
    # n3_addr6
    FMT = "=4sI4s4sHHB3x16s16s16s16s"
    SIZE = struct.calcsize(FMT)

    def pack(self) -> bytes:
        net = ipaddress.IPv4Network(self.ue_pool, strict=False)
        flags = ((CFG_CSUM if self.csum else 0) | (CFG_FIB_CACHE if self.fib_cache else 0)
                 | (0 if self.err_ind else CFG_NO_ERR_IND)
                 | (0 if self.inner_csum_check else CFG_NO_INNER_CSUM_CHECK)
                 | (0 if self.sport_entropy else CFG_SPORT_FIXED))
        return struct.pack(self.FMT, _ip(self.local_addr), flags, net.network_address.packed,
                           net.netmask.packed, self.egress_vlan[0], self.egress_vlan[1], self.restart_counter,
                           self.nexthop[0].pack(), self.nexthop[1].pack(),
                           ipaddress.IPv6Address(self.local_addr6).packed,
                           ipaddress.IPv6Address(self.n3_addr6).packed)

    @classmethod
    def unpack(cls, b: bytes) -> "Config":
        la, flags, pa, pm, v0, v1, rc, n0, n1, la6, n36 = struct.unpack(cls.FMT, b[:cls.SIZE])
        plen = bin(int.from_bytes(pm, "big")).count("1")
        return cls(_ipstr(la), bool(flags & CFG_CSUM), bool(flags & CFG_FIB_CACHE), f"{_ipstr(pa)}/{plen}",
                   (v0, v1), rc, (Nexthop.unpack(n0), Nexthop.unpack(n1)), not flags & CFG_NO_ERR_IND,
                   not flags & CFG_NO_INNER_CSUM_CHECK, not flags & CFG_SPORT_FIXED,
                   str(ipaddress.IPv6Address(la6)), str(ipaddress.IPv6Address(n36)))


@dataclass
class UlBearer:
    """struct pgwu_ul_bearer (value of ul_bearers[TEID])."""
    ue_addr: str
    flags: int = 0
    packets: int = 0
    bytes: int = 0

    FMT = "=4sIQQ"
    SIZE = struct.calcsize(FMT)

    def pack(self) -> bytes:
        return struct.pack(self.FMT, _ip(self.ue_addr), self.flags, self.packets, self.bytes)

    @classmethod
    def unpack(cls, b: bytes) -> "UlBearer":
        ue, flags, p, n = struct.unpack(cls.FMT, b)
        return cls(_ipstr(ue), flags, p, n)


@dataclass
class DlBearer:
    """struct pgwu_dl_bearer (value of dl_bearers[UE]); TEIDs as integers (stored network order)."""
    sgw_addr: str
    sgw_teid: int
    local_teid: int
    flags: int = 0
    packets: int = 0
    bytes: int = 0

    FMT = "=4s4s4sIQQ"
    SIZE = struct.calcsize(FMT)

    def pack(self) -> bytes:
        return struct.pack(self.FMT, _ip(self.sgw_addr), struct.pack("!I", self.sgw_teid),
                           struct.pack("!I", self.local_teid), self.flags, self.packets, self.bytes)

    @classmethod
    def unpack(cls, b: bytes) -> "DlBearer":
        sgw, st, lt, flags, p, n = struct.unpack(cls.FMT, b)
        return cls(_ipstr(sgw), struct.unpack("!I", st)[0], struct.unpack("!I", lt)[0], flags, p, n)


@dataclass
class Police:
    """struct pgwu_police: one direction's token bucket (credit in micro-bits, pgwu.h)."""
    kbps: int = 0
    depth: int = 0          # micro-bits
    fill_ns: int = 0
    credit: int = 0
    last_ns: int = 0

    FMT = "=5Q"

    @classmethod
    def of(cls, kbps: int, depth_bytes: int, full: bool = True) -> "Police":
        """A bucket for an MBR of kbps and depth_bytes octets, as `pgwu pfcp` writes it: full
        (last_ns 0 refills it at the first packet) or empty from now (CLOCK_MONOTONIC)."""
        depth = depth_bytes * 8 * QOS_MICRO
        fill = -(-depth // kbps) if kbps else 0
        return cls(kbps, depth, fill, depth if full else 0, 0 if full else time.monotonic_ns())


@dataclass
class Volth:
    """struct pgwu_volth: a URR's volume threshold measured by the data path. limit: octets total,
    UL, DL (vol_flags bits 1, 2, 4 say which apply); now / at: UL packets, UL octets, DL packets,
    DL octets since the measurement started / at the crossing."""
    limit: tuple = (0, 0, 0)
    now: tuple = (0, 0, 0, 0)
    at: tuple = (0, 0, 0, 0)
    urr_id: int = 0
    vol_flags: int = 0

    FMT = "=3Q4Q4QII"

    def values(self) -> tuple:
        return (*self.limit, *self.now, *self.at, self.urr_id, self.vol_flags)

    @classmethod
    def of(cls, v) -> "Volth":
        return cls(tuple(v[0:3]), tuple(v[3:7]), tuple(v[7:11]), v[11], v[12])


@dataclass
class Qos:
    """struct pgwu_qos (value of qos[local TEID]): gate, policers [uplink, downlink], quota, the
    volume threshold (th)."""
    flags: int = 0
    quota_left: int = 0
    ul: Police = field(default_factory=Police)
    dl: Police = field(default_factory=Police)
    th: Volth = field(default_factory=Volth)

    FMT = "=4xIQ" + "5Q" * 2 + Volth.FMT[1:]
    SIZE = struct.calcsize(FMT)

    def pack(self) -> bytes:
        return struct.pack(self.FMT, self.flags, self.quota_left, *astuple(self.ul), *astuple(self.dl),
                           *self.th.values())

    @classmethod
    def unpack(cls, b: bytes) -> "Qos":
        v = struct.unpack(cls.FMT, b)
        return cls(v[0], v[1], Police(*v[2:7]), Police(*v[7:12]), Volth.of(v[12:25]))


COUNTER_FMT = "=QQ"
COUNTER_SIZE = 16
# struct name -> size, for the BTF check
STRUCT_SIZES = {"pgwu_config": Config.SIZE, "pgwu_ul_bearer": UlBearer.SIZE, "pgwu_dl_bearer": DlBearer.SIZE,
                "pgwu_nexthop": struct.calcsize(Nexthop.FMT), "pgwu_counter": COUNTER_SIZE,
                "pgwu_ul_slot": 64, "pgwu_dl_slot": 64, "pgwu_dl6_slot": 64,
                "pgwu_peer": struct.calcsize("=QQQIHHBB6x"), "pgwu_sig_key": struct.calcsize("=4s4sB3x"),
                "pgwu_sig_val": struct.calcsize("=QQ4s4x"), "pgwu_qos": Qos.SIZE,
                "pgwu_police": struct.calcsize(Police.FMT), "pgwu_volth": struct.calcsize(Volth.FMT)}
# struct pgwu_qos_ctl (qos_ctl's frame, not in BTF: only a local pointer has its type): 4 x __u32, then
# struct pgwu_qos, whose size the BTF check covers


@dataclass
class RunResult:
    retval: int
    data: bytes

    @property
    def verdict(self) -> str:
        return VERDICTS[self.retval] if self.retval < VERDICT_MAX else f"retval {self.retval}"


MAPS = ("ul_bearers", "dl_bearers", "stats", "config", "fib_cache", "fib6_cache", "fib_gen", "ip_id", "ul_slots", "dl_slots",
        "events", "reply_budget", "peers", "sig_rx", "qos", "ul6_prefix", "dl6_bearers", "dl6_slots",
        "n3v6_peers")
PEER_FMT = "=QQQIHHBB6x"    # struct pgwu_peer
SIG_KEY_FMT = "=4s4sB3x"     # struct pgwu_sig_key
SIG_VAL_FMT = "=QQ4s4x"      # struct pgwu_sig_val
SLOT_VALID = 1
UL_SLOT_FMT = "=4sI"      # struct pgwu_ul_slot: key (network order), state, then struct pgwu_ul_bearer
DL_SLOT_FMT = "=4sI"      # struct pgwu_dl_slot: key, state, struct pgwu_dl_bearer, 24 bytes of padding
PROGS = ("xdp_access", "xdp_sgi", "qos_ctl")


def peer6_sgw(idx: int) -> str:
    """The sgw_addr field of a downlink half with B_PEER6: its n3v6_peers index, host order, as a
    dotted quad (DlBearer's type for the field)."""
    return _ipstr(struct.pack("=I", idx))


class Dataplane:
    """The pinned objects of one loaded data plane (`pgwu -d pin_dir load`)."""

    def __init__(self, pin_dir: str | os.PathLike):
        self.pin_dir = str(pin_dir)
        self.maps: dict[str, bpf.Map] = {}
        self.progs: dict[str, bpf.Prog] = {}
        try:
            for m in MAPS:
                self.maps[m] = bpf.Map.pinned(os.path.join(self.pin_dir, m))
            for p in PROGS:
                self.progs[p] = bpf.Prog.pinned(os.path.join(self.pin_dir, p))
        except OSError:
            self.close()
            raise
        self.ncpus = self.maps["stats"].ncpus

    def close(self) -> None:
        for o in list(self.maps.values()) + list(self.progs.values()):
            o.close()
        self.maps.clear()
        self.progs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- test runs -------------------------------------------------------------------------------
    def run(self, prog: str, frame, ingress_ifindex: int = 0) -> RunResult:
        r = self.progs[prog].test_run(bytes(frame), ingress_ifindex=ingress_ifindex)
        return RunResult(r.retval, r.data)

    def run_access(self, frame, ingress_ifindex: int = 0) -> RunResult:
        """xdp_access on one frame (bytes or a Scapy packet). ingress_ifindex 0: the test run's lo."""
        return self.run("xdp_access", frame, ingress_ifindex)

    def run_sgi(self, frame, ingress_ifindex: int = 0) -> RunResult:
        return self.run("xdp_sgi", frame, ingress_ifindex)

    # --- config ----------------------------------------------------------------------------------
    def get_config(self) -> Config:
        return Config.unpack(self.maps["config"].lookup(struct.pack("=I", 0)))

    def set_config(self, cfg: Config | None = None, **changes) -> Config:
        """Write cfg (or the current config with `changes` applied); returns what was written."""
        cfg = replace(cfg if cfg is not None else self.get_config(), **changes)
        self.maps["config"].update(struct.pack("=I", 0), cfg.pack())
        return cfg

    # --- bearers ---------------------------------------------------------------------------------
    # As pgwu does it (dataplane/pgwu.h, struct pgwu_ul_slot): every bearer is in the hash maps; a
    # bearer whose slot is free is also indexed there, filled after the hash entry and emptied
    # before it is deleted; its usage is the sum of both.
    def _slot(self, side: str, key: bytes) -> tuple[bytes, bytes | None]:
        """(slot index, the slot's value if it holds key, else None)"""
        m = self.maps[f"{side}_slots"]
        idx = struct.pack("=I", struct.unpack("!I", key)[0] & (m.max_entries - 1))
        v = m.lookup(idx)
        k, state = struct.unpack_from("=4sI", v)
        return idx, (v if state == SLOT_VALID and k == key else None)

    def _slot_set(self, side: str, key: bytes, value: bytes) -> None:
        m = self.maps[f"{side}_slots"]
        idx = struct.pack("=I", struct.unpack("!I", key)[0] & (m.max_entries - 1))
        old = m.lookup(idx)
        if struct.unpack_from("=4sI", old)[1] == SLOT_VALID:
            return                          # taken by another key: the hash map only
        # the rest of the line as it was (ul_slots: the TEID's IPv6 entry, pgwu's to write)
        new = struct.pack("=4sI", key, SLOT_VALID) + value
        m.update(idx, new + old[len(new):])

    def _slot_clear(self, side: str, key: bytes) -> None:
        idx, v = self._slot(side, key)
        if v is not None:
            self.maps[f"{side}_slots"].update(idx, v[:4] + struct.pack("=I", 0) + v[8:])

    def add_bearer(self, teid: int, ue: str, sgw: str, sgw_teid: int, csum: bool | None = None,
                   qfi: int | None = None, qos: bool = False) -> None:
        """Both halves of a bearer. csum: True/False per-bearer outer checksum, None: global default.
        qfi: the bearer's QoS flow (5G N3, 0-63): downlink adds a PDU Session Container with it,
        uplink requires one. qos: both halves get B_QOS (the qos map entry of the TEID is enforced;
        write it first with set_qos)."""
        flags = 0 if csum is None else (B_CSUM_ON if csum else B_CSUM_OFF)
        qf = (0 if qfi is None else B_QFI | (qfi & 0x3F) << B_QFI_SHIFT) | (B_QOS if qos else 0)
        ul, dl = UlBearer(ue, qf).pack(), DlBearer(sgw, sgw_teid, teid, flags | qf).pack()
        self.maps["ul_bearers"].update(struct.pack("!I", teid), ul)
        self.maps["dl_bearers"].update(_ip(ue), dl)
        self._slot_set("ul", struct.pack("!I", teid), ul)
        self._slot_set("dl", _ip(ue), dl)

    def set_peer6(self, idx: int, addr: str) -> str:
        """n3v6_peers[idx] = addr ("::" empties it); returns the sgw_addr a DlBearer with B_PEER6
        carries to name it (the index in host order, as pgwu writes it)."""
        self.maps["n3v6_peers"].update(struct.pack("=I", idx), ipaddress.IPv6Address(addr).packed)
        return peer6_sgw(idx)

    def add_bearer_peer6(self, teid: int, ue: str, peer_idx: int, sgw_teid: int, qfi: int | None = None,
                         flags: int = 0) -> None:
        """Both halves of a bearer whose downlink peer is IPv6, n3v6_peers[peer_idx] (set_peer6 first)."""
        qf = 0 if qfi is None else B_QFI | (qfi & 0x3F) << B_QFI_SHIFT
        ul = UlBearer(ue, qf).pack()
        dl = DlBearer(peer6_sgw(peer_idx), sgw_teid, teid, flags | qf | B_PEER6).pack()
        self.maps["ul_bearers"].update(struct.pack("!I", teid), ul)
        self.maps["dl_bearers"].update(_ip(ue), dl)
        self._slot_set("ul", struct.pack("!I", teid), ul)
        self._slot_set("dl", _ip(ue), dl)

    def del_bearer(self, teid: int, ue: str) -> None:
        self._slot_clear("ul", struct.pack("!I", teid))
        self._slot_clear("dl", _ip(ue))
        self.maps["ul_bearers"].delete(struct.pack("!I", teid))
        self.maps["dl_bearers"].delete(_ip(ue))

    def flush_bearers(self) -> None:
        """Every bearer, its /64s (ul6_prefix, dl6_bearers) included, slots emptied first."""
        for side in ("ul", "dl"):
            m = self.maps[f"{side}_bearers"]
            for k in list(m.keys()):
                self._slot_clear(side, k)    # every slotted bearer is in the hash map too
                m.delete(k)
        for k in list(self.maps["ul6_prefix"].keys()):
            self._slot6_clear("ul", k)
            self.maps["ul6_prefix"].delete(k)
        for k in list(self.maps["dl6_bearers"].keys()):
            self._slot6_clear("dl", k)
            self.maps["dl6_bearers"].delete(k)

    # IPv6 (dataplane/pgwu.h): the TEID's /64 and IPv6 uplink usage (ul6_prefix, and the second entry
    # of its ul_slots line: teid6, state6, struct pgwu_ul6 at offset 32), the /64's downlink half
    # (dl6_bearers, and dl6_slots[pgwu_slot6_of(/64)]: prefix, state, pad, struct pgwu_dl_bearer).
    def _slot6(self, side: str, key: bytes) -> tuple[bytes, bytes | None]:
        """(slot index, the slot's line if its IPv6 entry holds key, else None)"""
        m = self.maps["ul_slots" if side == "ul" else "dl6_slots"]
        n = struct.unpack("!I", key[:4] if side == "ul" else key[4:8])[0]
        idx = struct.pack("=I", n & (m.max_entries - 1))
        v = m.lookup(idx)
        if side == "ul":
            k, state = struct.unpack_from("=4sI", v, 32)
        else:
            k, state = struct.unpack_from("=8sI", v)
        return idx, (v if state == SLOT_VALID and k == key else None)

    def _slot6_clear(self, side: str, key: bytes) -> None:
        idx, v = self._slot6(side, key)
        if v is not None:
            at = 36 if side == "ul" else 8
            self.maps["ul_slots" if side == "ul" else "dl6_slots"].update(idx, v[:at] + bytes(4) + v[at + 4:])

    def add_bearer6(self, teid: int, prefix: str, dl: "DlBearer | None" = None) -> None:
        """The /64 of the bearer whose uplink half is teid (ul6_prefix) and, with dl, its IPv6 downlink
        half, each indexed in its slot when that is free, as pgwu's bearer_add_v6."""
        pfx, t = socket.inet_pton(socket.AF_INET6, prefix)[:8], struct.pack("!I", teid)
        self.maps["ul6_prefix"].update(t, pfx + bytes(16))
        if dl is not None:
            self.maps["dl6_bearers"].update(pfx, dl.pack())
            m = self.maps["dl6_slots"]
            idx = struct.pack("=I", struct.unpack("!I", pfx[4:])[0] & (m.max_entries - 1))
            old = m.lookup(idx)
            if struct.unpack_from("=I", old, 8)[0] != SLOT_VALID:
                m.update(idx, pfx + struct.pack("=II", SLOT_VALID, 0) + replace(dl, packets=0, bytes=0).pack()
                         + old[48:])
        m = self.maps["ul_slots"]
        idx = struct.pack("=I", teid & (m.max_entries - 1))
        old = m.lookup(idx)
        if struct.unpack_from("=I", old, 36)[0] != SLOT_VALID:
            m.update(idx, old[:32] + t + struct.pack("=I", SLOT_VALID) + pfx + bytes(16))

    def set_dl6(self, prefix: str, dl: "DlBearer") -> None:
        """Rewrite the /64's downlink half (as pgwu's bearer_set_dl6_owned): its slot emptied, the
        usage kept (dl's counters are ignored), indexed again."""
        pfx = socket.inet_pton(socket.AF_INET6, prefix)[:8]
        old = self.dl6_bearer(prefix)
        self._slot6_clear("dl", pfx)
        self.maps["dl6_bearers"].update(pfx, replace(dl, packets=old.packets, bytes=old.bytes).pack())
        m = self.maps["dl6_slots"]
        idx = struct.pack("=I", struct.unpack("!I", pfx[4:])[0] & (m.max_entries - 1))
        line = m.lookup(idx)
        if struct.unpack_from("=I", line, 8)[0] != SLOT_VALID:
            m.update(idx, pfx + struct.pack("=II", SLOT_VALID, 0) + replace(dl, packets=0, bytes=0).pack()
                     + line[48:])

    def ul6_usage(self, teid: int) -> tuple[int, int] | None:
        """(packets, bytes) of the TEID's IPv6 uplink: its ul6_prefix entry's and its slot's."""
        t = struct.pack("!I", teid)
        v = self.maps["ul6_prefix"].lookup(t)
        if v is None:
            return None
        _, p, n = struct.unpack("=8sQQ", v)
        _, sv = self._slot6("ul", t)
        if sv is not None:
            _, sp, sn = struct.unpack_from("=8sQQ", sv, 40)
            p, n = p + sp, n + sn
        return p, n

    def dl6_bearer(self, prefix: str) -> "DlBearer | None":
        """The /64's downlink half, its usage the hash entry's and its slot's."""
        pfx = socket.inet_pton(socket.AF_INET6, prefix)[:8]
        v = self.maps["dl6_bearers"].lookup(pfx)
        if v is None:
            return None
        b = DlBearer.unpack(v)
        _, sv = self._slot6("dl", pfx)
        if sv is not None:
            sb = DlBearer.unpack(sv[16:16 + DlBearer.SIZE])
            b.packets += sb.packets
            b.bytes += sb.bytes
        return b

    def ul_bearer(self, teid: int) -> UlBearer | None:
        v = self.maps["ul_bearers"].lookup(struct.pack("!I", teid))
        if v is None:
            return None
        b = UlBearer.unpack(v)
        _, sv = self._slot("ul", struct.pack("!I", teid))
        if sv is not None:
            sb = UlBearer.unpack(sv[8:8 + UlBearer.SIZE])
            b.packets += sb.packets
            b.bytes += sb.bytes
        return b

    def dl_bearer(self, ue: str) -> DlBearer | None:
        v = self.maps["dl_bearers"].lookup(_ip(ue))
        if v is None:
            return None
        b = DlBearer.unpack(v)
        _, sv = self._slot("dl", _ip(ue))
        if sv is not None:
            sb = DlBearer.unpack(sv[8:8 + DlBearer.SIZE])
            b.packets += sb.packets
            b.bytes += sb.bytes
        return b

    def set_qos(self, teid: int, q: Qos) -> None:
        """qos[teid] = q (as `pgwu pfcp` writes it; BPF_F_LOCK: never half-written under a packet)."""
        self.maps["qos"].update(struct.pack("!I", teid), q.pack(), 4)   # BPF_F_LOCK

    def qos(self, teid: int) -> Qos | None:
        v = self.maps["qos"].lookup(struct.pack("!I", teid))
        return None if v is None else Qos.unpack(v)

    def qos_ctl(self, teid: int, op: int, q: Qos | None = None, keep: int = 0) -> tuple[Qos, int] | None:
        """Run qos_ctl (struct pgwu_qos_ctl in pgwu.h) as `pgwu pfcp` does: SET q into qos[teid] under
        its lock, keeping what the data path counts; TAKE_*: the crossing (and with TAKE_ALL the
        count) taken. Returns (the entry's flags and th as they were, its flags after), None when
        the TEID has no entry."""
        # struct pgwu_qos_ctl: teid, op, keep, after, urr_id, pad, then q (urr_id: sdf_urr's
        # entries, PGWU_QOS_CTL_URR, not used here)
        frame = struct.pack("!I", teid) + struct.pack("=IIIII", op, keep, 0, 0, 0) + (q or Qos()).pack()
        r = self.progs["qos_ctl"].test_run(frame)
        if r.retval == 1:       # XDP_DROP: no entry
            return None
        if r.retval != 2:       # XDP_PASS
            raise OSError(f"qos_ctl: retval {r.retval}")
        return Qos.unpack(r.data[24:24 + Qos.SIZE]), struct.unpack_from("=I", r.data, 12)[0]

    def flush_fib_cache(self) -> None:
        """Invalidate every cached next hop, as the kernel's changes do: a new generation."""
        m = self.maps["fib_gen"]
        (gen,) = struct.unpack("=Q", m.lookup(struct.pack("=I", 0)))
        m.update(struct.pack("=I", 0), struct.pack("=Q", gen + 1))

    def fib_cache_slot(self, dst: str, ingress_ifindex: int, src: str = "0.0.0.0"
                       ) -> tuple[int, int, bytes, bytes] | None:
        """(gen, egress ifindex, smac, dmac) cached for (dst, ingress[, src]) on any CPU, or None."""
        v = self.maps["fib_cache"].lookup(struct.pack("=I", fib_slot_of(dst, ingress_ifindex, src)))
        for cpu in v or []:
            kdst, kif, ksrc, gen, eg, smac, dmac = struct.unpack_from("=4sI4s4xQI6s6s", cpu)
            if kdst == _ip(dst) and kif == ingress_ifindex and ksrc == _ip(src) and eg:
                return gen, eg, smac, dmac
        return None

    def fib_by_src(self) -> bool:
        """fib_gen[2]: the route cache is keyed by source too (IPv4 policy rules exist)."""
        return bool(struct.unpack("=Q", self.maps["fib_gen"].lookup(struct.pack("=I", 2)))[0])

    # --- stats -----------------------------------------------------------------------------------
    def stats_array(self) -> list[tuple[int, int]]:
        """(packets, bytes) summed over CPUs for every stats index (reason * 5 + verdict)."""
        m = self.maps["stats"]
        keys, vals, count = m.lookup_all_raw()
        out = [(0, 0)] * m.max_entries
        stride = m._stride
        per_key = stride * m.ncpus
        for i in range(count):
            (k,) = struct.unpack_from("=I", keys, i * 4)
            p = n = 0
            for c in range(m.ncpus):
                cp, cn = struct.unpack_from(COUNTER_FMT, vals, i * per_key + c * stride)
                p += cp
                n += cn
            out[k] = (p, n)
        return out

    def stats(self) -> dict[tuple[str, str], tuple[int, int]]:
        """{(reason, verdict): (packets, bytes)} for every non-zero counter."""
        res = {}
        for idx, (p, n) in enumerate(self.stats_array()):
            if p or n:
                res[(REASONS[idx // VERDICT_MAX] if idx // VERDICT_MAX < REASON_MAX else f"reason {idx // 5}",
                     VERDICTS[idx % VERDICT_MAX])] = (p, n)
        return res

    def events(self) -> dict[str, int]:
        """{event name: count summed over CPUs} for every event (enum pgwu_event), zeros too."""
        m = self.maps["events"]
        out = {}
        for i, name in enumerate(EVENTS):
            v = m.lookup(struct.pack("=I", i))
            out[name] = sum(struct.unpack("=Q", c)[0] for c in v)
        return out

    def clear_map(self, name: str) -> None:
        """Delete every entry of a hash map (reply_budget, peers, sig_rx)."""
        m = self.maps[name]
        for k in list(m.keys()):
            m.delete(k)

    def peers(self) -> dict[str, dict]:
        """peers map: {address: fields of struct pgwu_peer}."""
        out = {}
        for k in self.maps["peers"].keys():
            v = self.maps["peers"].lookup(k)
            f = struct.unpack(PEER_FMT, v)
            out[_ipstr(k)] = dict(zip(("rsp_ns", "req_ns", "responses", "restarts", "req_seq", "rsp_seq",
                                       "restart_counter", "has_recovery"), f))
        return out

    def sig_rx(self) -> dict[tuple[int, int, str], dict]:
        """sig_rx map: {(type, TEID, addr): {"packets", "last_ns", "from"}}."""
        out = {}
        for k in self.maps["sig_rx"].keys():
            teid, addr, typ = struct.unpack(SIG_KEY_FMT, k)
            p, last, frm = struct.unpack(SIG_VAL_FMT, self.maps["sig_rx"].lookup(k))
            out[(typ, struct.unpack("!I", teid)[0], _ipstr(addr))] = {"packets": p, "last_ns": last,
                                                                       "from": _ipstr(frm)}
        return out

    def reset_stats(self) -> None:
        m = self.maps["stats"]
        zero = bytes(COUNTER_SIZE)
        for i in range(m.max_entries):
            m.update(struct.pack("=I", i), zero)
        e = self.maps["events"]
        for i in range(e.max_entries):
            e.update(struct.pack("=I", i), bytes(8))
