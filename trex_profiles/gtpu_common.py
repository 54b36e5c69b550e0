"""What the GTP-U profiles (gtpu_uplink.py, gtpu_downlink.py) and `gtplab bearers` share.

One parameter parser, one bearer relation, one frame-size rule, one IMIX table, so that a profile
and the bearer file the PGW-U loads for it cannot drift apart:

    bearer i:  UE = ue_base + i          local TEID = teid_base + i   (uplink, SGW -> PGW-U)
               SGW = sgw_base + i % sgws  SGW TEID  = sgw_teid_base + i (downlink, PGW-U -> SGW)
               --ip 6 / 4v6: UE /64 = fd47:7470:XXXX:YYYY::/64, XXXX:YYYY = i (ue6_prefix)
               --n3 6: SGW (gNB) IPv6 = sgw6_base + i % sgws, PGW-U/UPF N3 IPv6 = pgw_addr6

Frame sizes are sizes on the wire including the 4-byte Ethernet FCS, as TRex counts them: a
profile asked for `size=1424` builds a 1420-byte packet and the NIC (or the embedded engine's
accounting) adds the FCS.

This module never imports TRex or Scapy at module level: gtplab (Scapy 2.8) imports it to write
bearer files, while the profiles run under TRex's bundled Scapy 2.4.3. make_streams() receives the
trex.stl.api module from the profile that calls it.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import stat
import sys

# Header lengths and the GTP-U port, as gtplab/gtpu/packets.py and gtplab/gtpu/walk.py know them:
# written again here on purpose. These profiles run inside TRex (its own Python and Scapy 2.4.3, the
# profile's folder on sys.path), where the gtplab package cannot be imported.
FCS_LEN = 4
MIN_FRAME = 64           # Ethernet minimum, FCS included
MAX_FRAME = 3024         # largest frame of a sweep (the lab's links have MTU 3200, docs/lab.md)
GTPU_PORT = 2152         # TS 29.281 section 4.4.2
ETH_LEN = 14
VLAN_LEN = 4
IPV4_LEN = 20
IPV6_LEN = 40            # fixed header, no extension headers (RFC 8200 section 3)
IP_LEN = {4: 20, 6: 40}
UDP_LEN = 8
GTPU_LEN = 8             # mandatory part, no sequence number / N-PDU / extension headers
L4_LEN = {"udp": 8, "tcp": 20}
STATS_PAYLOAD = 16       # per-stream stats need the last 16 payload bytes: TRex's latency header,
                         # the embedded engine's trailer (docs/engine.md) for stats and latency

PROFILES = ("uplink", "downlink")
IP_FAMILIES = ("4", "6", "4v6")     # --ip: the user packets' address family (4v6: one stream of each)
N3_FAMILIES = ("4", "6")            # --n3: the family of the tunnel's outer header (GTP-U over IPv6: issue 32)

# IPv6 user traffic (issue 32): UE i has the /64 prefix fd47:7470:XXXX:YYYY::/64, XXXX:YYYY = i
# (i >> 16, i & 0xffff); the N6 servers are hosts of fd47:7471::/64, picked like the IPv4 PDN
# addresses (uplink: server 1 + i % sgws, downlink: 1 .. pdn_addrs). Never fd00::/64 (the host's).
UE6_PREFIX_HI = 0xFD477470          # the first 32 bits of every UE prefix: fd47:7470::/32
SERVER6_PREFIX = "fd47:7471::"      # the servers' /64
UE6_IID = 1                         # interface identifier of a UE's address in its /64 (base)

# Defaults from the lab addressing contract (BRIEF.md); every one is a tunable.
DEFAULT_UE_BASE = "10.64.0.1"
DEFAULT_TEID_BASE = 0x00010000
DEFAULT_SGW_BASE = "10.201.0.16"
DEFAULT_SGW_TEID_BASE = 0x80000000
DEFAULT_PGW_ADDR = "10.201.0.1"     # the PGW-U's GTP-U address (pgwu --local-addr)
DEFAULT_PDN_BASE = "198.18.0.1"     # RFC 2544 range 198.18.0.0/15, routed on the DUT via SGi
# N3 over IPv6 (--n3 6): the lab's N3 link fd47:7473::/64 (gtplab/lab/topology.py Addressing), the
# DUT's N3 address ::1, SGW k = ::10 + k (on-link, as 10.201.0.16 + k: the same low bits)
DEFAULT_PGW_ADDR6 = "fd47:7473::1"
DEFAULT_SGW6_BASE = "fd47:7473::10"
DEFAULT_PG_ID = {"uplink": 10, "downlink": 20}
DEFAULT_SIZE = {"uplink": 128, "downlink": 64}

# MAC addresses of the base packets: placeholders. make_streams() marks every stream "MACs from the
# port configuration" (flags 0), so TRex and the embedded engine write the ports' real addresses.
# They are set explicitly because Scapy resolves a missing Ether.dst by ARP on the host's interfaces.
SRC_MAC = "02:00:00:00:00:02"
DST_MAC = "02:00:00:00:00:01"

# IMIX ("Simple IMIX", 7:4:1). Rows are inner IPv4 packet lengths, so that both directions carry the
# same user packets: downlink frames are 64/594/1518 bytes (+4 with a VLAN tag), uplink frames are
# 36 bytes of GTP-U/UDP/IPv4 larger (100/630/1554). pps is the relative rate of the row's stream,
# isg its start offset in microseconds (as TRex's imix.py).
IMIX_TABLE = (
    {"ip_len": 46, "pps": 7, "isg": 0.0},
    {"ip_len": 576, "pps": 4, "isg": 0.1},
    {"ip_len": 1500, "pps": 1, "isg": 0.2},
)


class ProfileError(ValueError):
    """Tunables that cannot make a valid profile (one line, says what is allowed)."""


def _families(ip) -> tuple[int, ...]:
    """--ip as the families of its streams: "4" -> (4,), "6" -> (6,), "4v6" -> (4, 6)."""
    ip = str(ip)
    if ip not in IP_FAMILIES:
        raise ProfileError(f"--ip {ip!r}: one of {', '.join(IP_FAMILIES)}")
    return (4, 6) if ip == "4v6" else (int(ip),)


def _n3(n3) -> int:
    """--n3 as the outer header's family, 4 or 6."""
    if str(n3) not in N3_FAMILIES:
        raise ProfileError(f"--n3 {n3!r}: one of {', '.join(N3_FAMILIES)}")
    return int(n3)


def outer_len(n3=4) -> int:
    """Bytes of the tunnel's headers before the T-PDU: IPv4 or IPv6, UDP, GTP-U (36 or 56)."""
    return IP_LEN[_n3(n3)] + UDP_LEN + GTPU_LEN


def header_len(profile: str, l4: str = "udp", vlans: int = 0, ip=4, n3=4) -> int:
    """Bytes of headers in a frame of `profile`, FCS excluded (the payload follows them); ip is
    the user packet's family (4 or 6; "4v6": the larger, IPv6's), n3 the uplink's outer one."""
    inner = IP_LEN[max(_families(ip))]
    if profile == "uplink":
        return ETH_LEN + outer_len(n3) + inner + L4_LEN[l4]
    return ETH_LEN + (VLAN_LEN if vlans else 0) + inner + L4_LEN[l4]


def min_frame_size(profile: str, l4: str = "udp", vlans: int = 0, ip=4, n3=4) -> int:
    """Smallest frame size (FCS included) the profile can build: 82 for uplink with inner UDP,
    94 with inner TCP; 64 for downlink. Inner IPv6 (ip 6 or 4v6): uplink 14 + 20 + 8 + 8 outer,
    + 40 IPv6 + 8 UDP = 98 bytes, 102 with the FCS (TCP 114); downlink 14 + 40 + 8 + FCS = 66 (TCP 78).
    GTP-U over IPv6 (n3 6, uplink): 20 more, 102 with inner IPv4/UDP (114 TCP), 122 with inner
    IPv6/UDP (134 TCP); the downlink frames the generator sends are not tunnelled."""
    return max(MIN_FRAME, header_len(profile, l4, vlans, ip, n3) + FCS_LEN)


def frame_size_for_ip_len(profile: str, ip_len: int, vlans: int = 0, n3=4) -> int:
    """Frame size (FCS included) that carries a user IPv4 packet of ip_len bytes."""
    if profile == "uplink":
        return ETH_LEN + outer_len(n3) + ip_len + FCS_LEN
    return max(MIN_FRAME, ETH_LEN + (VLAN_LEN if vlans else 0) + ip_len + FCS_LEN)


def s32(value: int) -> int:
    """value mod 2**32 as a signed 32-bit number: TRex's write add_value is an int32, and adding it
    to a 32-bit flow variable wraps modulo 2**32, so bases >= 2**31 are passed as negatives."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= (1 << 31) else value


# ---------------------------------------------------------------------------------------------
# Tunables


def _int(text: str) -> int:
    try:
        return int(str(text), 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _u32(text: str) -> int:
    v = _int(text)
    if not 0 <= v <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"not a 32-bit unsigned value: {text!r}")
    return v


def _positive(text: str) -> int:
    v = _int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return v


def _count(text: str) -> int:
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return v


def _size(text: str) -> int:
    v = _int(text)
    if not MIN_FRAME <= v <= MAX_FRAME:
        raise argparse.ArgumentTypeError(
            f"frame size {v} out of range {MIN_FRAME}..{MAX_FRAME} (bytes on the wire, FCS included)")
    return v


def _addr(text: str) -> int:
    """IPv4 address as dotted quad or integer (TRex turns `-t ue_base=0x0a400001` into an int)."""
    try:
        if str(text).isdigit() or str(text).lower().startswith("0x"):
            return int(ipaddress.IPv4Address(int(str(text), 0)))
        return int(ipaddress.IPv4Address(str(text)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None


def _addr6(text: str) -> str:
    """An IPv6 address (compressed form)."""
    try:
        return str(ipaddress.IPv6Address(str(text)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv6 address: {text!r}") from None


def _bool(text: str) -> bool:
    t = str(text).lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean (yes/no/true/false/on/off/1/0): {text!r}")


class _Parser(argparse.ArgumentParser):
    """Raises ProfileError instead of exiting: TRex shows the message, gtplab makes it a UserError.
    --help still prints and exits (TRex's loader expects that)."""

    def error(self, message):
        raise ProfileError(f"{self.prog}: {message}")


def build_parser(profile: str) -> argparse.ArgumentParser:
    """The tunables of gtpu_<profile>.py. Every option has a default and a help text."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}")
    up = profile == "uplink"
    p = _Parser(
        prog=f"gtpu_{profile}.py",
        description=("GTP-U G-PDUs from the SGW side (port 0, access)" if up
                     else "plain IPv4 to the UEs from the SGi side (port 1)"),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False)
    g = p.add_argument_group("frames")
    g.add_argument("--size", type=_size, default=None,
                   help=f"frame size on the wire in bytes, 4-byte FCS included (packet = size - 4), "
                        f"{MIN_FRAME}..{MAX_FRAME}; default {DEFAULT_SIZE[profile]}"
                        + ("; uplink needs >= 82 (inner UDP) or 94 (inner TCP)" if up else ""))
    g.add_argument("--imix", type=_bool, nargs="?", const=True, default=False,
                   help="one stream per IMIX_TABLE row (7:4:1 of 46/576/1500-byte user packets) "
                        "instead of one --size stream")
    g.add_argument("--ip", choices=IP_FAMILIES, default="4",
                   help="address family of the user packets: 4 (IPv4), 6 (IPv6: UE i in "
                        "fd47:7470:XXXX:YYYY::/64 with XXXX:YYYY = i, servers in fd47:7471::/64) or "
                        "4v6 (two streams per size at equal rates, one IPv4 and one IPv6, each "
                        "through every bearer)")
    g.add_argument("--n3", choices=N3_FAMILIES, default="4",
                   help="family of the tunnel's outer header (GTP-U over IPv4 or IPv6): "
                        + ("the uplink G-PDUs' outer IPv6 from sgw6_base + i %% sgws to pgw_addr6, "
                           "the outer UDP checksum computed (RFC 8200 8.1)" if up else
                           "the DUT's downlink G-PDUs go to the SGWs' IPv6 addresses (bearer file "
                           "sgw6=); the frames sent here are the same"))
    g.add_argument("--l4", choices=("udp", "tcp"), default="udp",
                   help="transport of the user packet" + (" (inside the tunnel)" if up else ""))
    g.add_argument("--sport", type=_int, default=1025, help="user packet's L4 source port")
    g.add_argument("--dport", type=_int, default=5001, help="user packet's L4 destination port")
    if up:
        g.add_argument("--outer-udp-csum", choices=("zero", "valid"), default="zero",
                       help="outer UDP checksum: zero (allowed for GTP-U over IPv4, TS 29.281 "
                            "5.1) or valid (kept valid by construction, see docs/profiles.md)")
        g.add_argument("--checksum", choices=("sw", "hw"), default="sw",
                       help="inner IPv4 and UDP/TCP checksums: sw (default: kept valid by the field "
                            "engine itself, right on any port; docs/profiles.md) or hw "
                            "(STLVmFixChecksumHw, for NICs that offload inner checksums)")
        g.add_argument("--clamp", type=_bool, nargs="?", const=True, default=False,
                       help="raise a --size below the uplink minimum to the minimum (with a note on "
                            "stderr) instead of failing")

    g = p.add_argument_group("flows and bearers")
    g.add_argument("--flow-mode", choices=("single", "multi"), default="multi",
                   help="single: every packet is bearer 0 (no field engine); multi: the field "
                        "engine cycles through --flows bearers")
    g.add_argument("--flows", type=_positive, default=None,
                   help="bearers the traffic cycles through, bearer 0..flows-1 (multi: default "
                        "1024; single: 1)")
    g.add_argument("--bearers", type=_positive, default=None,
                   help="bearers in the bearer file (gtplab bearers), >= --flows; default --flows")
    g.add_argument("--order", choices=("seq", "random"), default="seq",
                   help="order of the bearers in multi mode: seq (0, 1, 2, ...) or random (a "
                        "uniformly random bearer per packet, TRex's op=random with the fixed "
                        "--seed, as real subscribers hit a PGW-U's tables); random needs --sgws a "
                        "power of two and --sgw-base a multiple of it, and puts pdn_base in every "
                        "uplink destination")
    g.add_argument("--seed", type=_u32, default=0x6774706C,
                   help="random_seed of the streams (--order random): the same seed, the same "
                        "bearers in the same order")
    g.add_argument("--ue-base", type=_addr, default=DEFAULT_UE_BASE, help="UE address of bearer 0")
    g.add_argument("--teid-base", type=_u32, default=DEFAULT_TEID_BASE,
                   help="local (uplink) TEID of bearer 0")
    if up:
        g.add_argument("--teid-file", default="", metavar="FILE",
                       help="local TEIDs of bearers 0..flows-1 from FILE instead of teid_base + i (default: none) "
                            "(the first column of each non-comment line: a bearer file written by a "
                            "PFCP run records the TEIDs the UPF chose); sent with a value-list flow "
                            "variable")
    g.add_argument("--sgw-base", type=_addr, default=DEFAULT_SGW_BASE, help="address of SGW 0")
    g.add_argument("--sgws", type=_positive, default=4,
                   help="number of SGWs; bearer i uses SGW i %% sgws (multi: must divide --flows "
                        "when smaller than it)")
    g.add_argument("--sgw-teid-base", type=_u32, default=DEFAULT_SGW_TEID_BASE,
                   help="SGW (downlink) TEID of bearer 0")
    g.add_argument("--pdn-base", type=_addr, default=DEFAULT_PDN_BASE,
                   help=("first PDN address: the user packet's destination is pdn_base + i %% sgws"
                         if up else "first PDN address: sources are pdn_base .. + pdn_addrs - 1"))
    g.add_argument("--sgw6-base", type=_addr6, default=DEFAULT_SGW6_BASE,
                   help="IPv6 address of SGW 0 with --n3 6 (SGW k: + k in the low 32 bits)")
    if up:
        g.add_argument("--pgw-addr", type=_addr, default=DEFAULT_PGW_ADDR,
                       help="the PGW-U's GTP-U address (outer destination)")
        g.add_argument("--pgw-addr6", type=_addr6, default=DEFAULT_PGW_ADDR6,
                       help="the PGW-U's (UPF's) GTP-U IPv6 address, the outer destination with --n3 6")
    else:
        g.add_argument("--pdn-addrs", type=_positive, default=256,
                       help="number of PDN source addresses (multi mode)")
        g.add_argument("--vlans", type=_int, default=0,
                       help="0: untagged; N: 802.1Q tag with VLAN id vlan_base .. vlan_base+N-1 "
                            "(multi mode varies it)")
        g.add_argument("--vlan-base", type=_int, default=100, help="first VLAN id")

    g = p.add_argument_group("statistics")
    g.add_argument("--stats", choices=("none", "stats", "latency"), default="none",
                   help="per-stream counters: stats = STLFlowStats, latency = STLFlowLatencyStats "
                        "(counters plus latency)")
    g.add_argument("--pg-id", type=_count, default=DEFAULT_PG_ID[profile],
                   help="packet group id of the first stream (IMIX streams take the next ones)")
    return p


def normalize_tunables(tunables=(), kwargs=None) -> list[str]:
    """The tunables as an argparse list, whatever form they came in:
    - a list of strings (TRex >= 2.89: `-t --size 1424`, or `-t size=1424` converted by the console
      into ['--size', '1424']); option names with '_' are accepted for '-' (`-t teid_base=...`)
    - a string 'size=1424,flows=8' (old TRex syntax) or '--size 1424 --flows 8'
    - a dict {'size': 1424} (old TRex versions passed tunables as keyword arguments)
    If tunables is empty, keyword arguments the caller got (minus TRex's own) are used."""
    if tunables is None:
        tunables = ()
    if isinstance(tunables, dict):
        out = []
        for k, v in tunables.items():
            out += [f"--{k}", str(v)]
    elif isinstance(tunables, str):
        if tunables.strip().startswith("-"):
            out = shlex.split(tunables)
        else:
            out = []
            for tok in filter(None, (t.strip() for t in tunables.split(","))):
                if "=" not in tok:
                    raise ProfileError(f"bad tunable {tok!r}: expected NAME=VALUE")
                k, v = tok.split("=", 1)
                out += [f"--{k.strip()}", v.strip().strip("'\"")]
    else:
        out = [str(t) for t in tunables]
    if not out and kwargs:
        extra = {k: v for k, v in kwargs.items() if k not in ("port_id", "direction", "tunables")}
        return normalize_tunables(extra)
    norm = []
    for tok in out:
        if tok.startswith("--"):
            name, eq, val = tok[2:].partition("=")
            tok = "--" + name.replace("_", "-") + eq + val
        norm.append(tok)
    return norm


def parse(profile: str, tunables=(), kwargs=None) -> argparse.Namespace:
    """Parse and check the tunables of a profile; returns the namespace with every derived value
    resolved (size, flows, bearers, sgw_period, streams). Raises ProfileError."""
    args = build_parser(profile).parse_args(normalize_tunables(tunables, kwargs))
    args.profile = profile
    if not hasattr(args, "vlans"):
        args.vlans = 0
    up = profile == "uplink"

    # flows and bearers
    if args.flow_mode == "single":
        if args.flows not in (None, 1):
            raise ProfileError(f"--flow-mode single sends one flow (bearer 0); --flows {args.flows} "
                               "needs --flow-mode multi")
        args.flows = 1
    elif args.flows is None:
        args.flows = 1024
    if args.bearers is None:
        args.bearers = args.flows
    if args.bearers < args.flows:
        raise ProfileError(f"--bearers {args.bearers} < --flows {args.flows}: every flow needs a bearer")
    # The outer source is driven by a second flow variable (k = 0..period-1) that runs in step with
    # the bearer variable (i = 0..flows-1); k == i % sgws for every packet only if period divides
    # flows. With flows <= sgws, i % sgws == i, so period = flows.
    args.sgw_period = min(args.sgws, args.flows)
    if up and args.flows % args.sgw_period:
        raise ProfileError(f"--flows {args.flows} must be a multiple of --sgws {args.sgws} (bearer i "
                           f"uses SGW i % sgws; the field engine keeps them in step only then)")
    if args.order == "random" and args.flows > 1 and up:
        # the SGW index i % sgws is the low bits of i, written by a masked write of the bearer
        # variable (TRex has no modulo): exact only for a power of two and an aligned base
        if args.sgw_period & (args.sgw_period - 1) or args.sgw_base % args.sgw_period:
            raise ProfileError(f"--order random needs --sgws a power of two and --sgw-base a "
                               f"multiple of it (got --sgws {args.sgws}, --sgw-base "
                               f"{ip(args.sgw_base)}): bearer i's SGW is written as the low bits "
                               "of i")
    for name, base, n in (("--ue-base", args.ue_base, args.bearers),
                          ("--teid-base", args.teid_base, args.bearers),
                          ("--sgw-teid-base", args.sgw_teid_base, args.bearers),
                          ("--sgw-base", args.sgw_base, min(args.sgws, args.bearers))):
        if base + n - 1 > 0xFFFFFFFF:
            raise ProfileError(f"{name} {base:#x} + {n} bearers overflows 32 bits")
    args.teids = read_teids(args.teid_file, args.bearers) if getattr(args, "teid_file", None) else None
    if args.teids is not None and args.order == "random" and args.flows > 1:
        raise ProfileError("--teid-file needs --order seq: the list of TEIDs is kept in step with the "
                           "bearer only when both advance by one per packet")
    if args.teid_base == 0:
        raise ProfileError("--teid-base 0: TEID 0 is reserved (TS 29.281 5.1: signalling only)")
    if args.sgw_teid_base == 0:
        raise ProfileError("--sgw-teid-base 0: TEID 0 is reserved (TS 29.281 5.1: signalling only)")
    if not up:
        if args.pdn_base + args.pdn_addrs - 1 > 0xFFFFFFFF:
            raise ProfileError("--pdn-base + --pdn-addrs overflows 32 bits")
        if args.vlans < 0 or args.vlans > 4094:
            raise ProfileError(f"--vlans {args.vlans} out of range 0..4094")
        if args.vlans and not (1 <= args.vlan_base and args.vlan_base + args.vlans - 1 <= 4094):
            raise ProfileError(f"VLAN ids {args.vlan_base}..{args.vlan_base + args.vlans - 1} "
                               "out of range 1..4094")
    elif args.pdn_base + args.sgw_period - 1 > 0xFFFFFFFF:
        raise ProfileError("--pdn-base + --sgws overflows 32 bits")
    for name in ("sport", "dport"):
        if not 0 <= getattr(args, name) <= 0xFFFF:
            raise ProfileError(f"--{name} {getattr(args, name)} out of range 0..65535")

    args.families = _families(args.ip)
    args.n3 = _n3(args.n3)
    sgw6_lo = int(ipaddress.IPv6Address(args.sgw6_base)) & 0xFFFFFFFF
    args.sgw6_lo = sgw6_lo
    if args.n3 == 6:
        if sgw6_lo + min(args.sgws, args.bearers) - 1 > 0xFFFFFFFF:
            raise ProfileError(f"--sgw6-base {args.sgw6_base} + {args.sgws} SGWs overflows its low 32 bits")
        if up and getattr(args, "outer_udp_csum", "zero") != "valid":
            # RFC 8200 8.1: a zero UDP checksum over IPv6 is discarded; RFC 6935/6936's exception is
            # for a tunnel whose ends both opt in per port, which GTP-U (TS 29.281) does not do
            raise ProfileError("--outer-udp-csum zero with --n3 6: a UDP checksum is mandatory over IPv6 "
                               "(RFC 8200 8.1; the RFC 6935/6936 zero-checksum opt-out is not GTP-U's): "
                               "use --outer-udp-csum valid")
        if up and args.order == "random" and args.flows > 1:
            # the SGW's masked write (+k in the pseudo header) has nothing to answer it: the inner
            # destination stays pdn_base in random order (docs/profiles.md)
            raise ProfileError("--order random with --n3 6: the outer UDP checksum (mandatory over IPv6) "
                               "is kept valid only in sequential order; use --order seq")
    if 6 in args.families:
        if args.imix:
            raise ProfileError(f"--imix with --ip {args.ip}: the IMIX rows are IPv4 packet lengths "
                               "(46 bytes is below an IPv6/UDP packet); use --ip 4 or --size")
        if up and getattr(args, "outer_udp_csum", "zero") == "valid" and args.flows > 1 and (
                args.order == "random" or args.flows > 65535):
            raise ProfileError(f"--outer-udp-csum valid with --ip {args.ip} needs --order seq and "
                               "--flows <= 65535 (the outer checksums of the IPv6 stream are a value "
                               "list in step with the bearer, --teid-file's TEIDs included)")
    # frame sizes: one stream per row
    lo = min_frame_size(profile, args.l4, args.vlans, args.ip, args.n3 if up else 4)
    if args.imix:
        if args.size is not None:
            raise ProfileError("--imix and --size exclude each other (IMIX sizes come from IMIX_TABLE)")
        args.streams = [dict(size=frame_size_for_ip_len(profile, r["ip_len"], args.vlans, args.n3),
                             pps=r["pps"], isg=r["isg"]) for r in IMIX_TABLE]
    else:
        # the default: at least the minimum (a downlink IPv6 frame needs 66 bytes)
        size = max(DEFAULT_SIZE[profile], lo) if args.size is None else args.size
        if size < lo:
            if up and args.clamp:
                print(f"gtpu_uplink.py: size {size} is below the uplink minimum {lo} "
                      f"(GTP-U + inner IPv{max(args.families)}/{args.l4.upper()} headers + FCS); "
                      f"sending {lo}-byte frames",
                      file=sys.stderr)
                size = lo
            else:
                raise ProfileError(
                    f"size {size} is too small: the smallest {profile} frame with inner "
                    f"IPv{max(args.families)}/{args.l4.upper()} is {lo} bytes (FCS included"
                    + (f"; IPv{max(args.families)} G-PDU" + (" over IPv6" if args.n3 == 6 else "")
                       + f": 14 Ethernet + {IP_LEN[args.n3]} IPv{args.n3} + 8 UDP + 8 GTP-U + "
                       f"{IP_LEN[max(args.families)]} IPv{max(args.families)} + "
                       f"{L4_LEN[args.l4]} {args.l4.upper()}" if up and (6 in args.families or args.n3 == 6)
                       else "")
                    + f"); use --size >= {lo}" + (" or --clamp" if up else ""))
        args.size = size
        # 4v6: one stream per family, same size and rate (rows 4 then 6)
        args.streams = [dict(size=size, pps=1, isg=0.0, ip=f) for f in args.families]
    for s in args.streams:
        s.setdefault("ip", 4)
        s["payload"] = s["size"] - FCS_LEN - header_len(profile, args.l4, args.vlans, s["ip"],
                                                        args.n3 if up else 4)
        if args.stats != "none" and s["payload"] < STATS_PAYLOAD:
            raise ProfileError(f"--stats {args.stats} needs {STATS_PAYLOAD} bytes of payload; a "
                               f"{s['size']}-byte {profile} frame has {s['payload']}: use --size >= "
                               f"{s['size'] + STATS_PAYLOAD - s['payload']}")
    return args


# ---------------------------------------------------------------------------------------------
# Bearers


TEID_LINE_MAX = 4096      # bytes of one line of a TEID file: a bearer file's take < 120


def read_teids(path: str, bearers: int) -> list[int]:
    """The first bearers TEIDs of a TEID file: the first column of every line that is not blank or
    a comment (so a bearer file is one), each a nonzero 32-bit number. Read a line at a time, up to
    the last TEID needed: a file that is not a regular one (/dev/zero, a FIFO), a line over
    TEID_LINE_MAX bytes or a NUL byte is refused in one line, whatever follows."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ProfileError(f"--teid-file {path}: not a regular file")
        f = open(path, "rb")
    except OSError as e:
        raise ProfileError(f"--teid-file {path}: {e.strerror}") from None
    teids: list[int] = []
    n = 0
    with f:
        while len(teids) < bearers:
            raw = f.readline(TEID_LINE_MAX + 1)
            if not raw:
                break
            n += 1
            if len(raw) > TEID_LINE_MAX or b"\0" in raw:
                raise ProfileError(f"--teid-file {path}:{n}: "
                                   + ("binary data (a NUL byte)" if b"\0" in raw else
                                      f"a line over {TEID_LINE_MAX} bytes") + ": not a TEID file")
            line = raw.decode("utf-8", "replace").split("#", 1)[0].strip()
            if not line:
                continue
            try:
                t = int(line.split()[0], 0)
            except ValueError:
                raise ProfileError(f"--teid-file {path}:{n}: not a TEID: {line.split()[0]!r}") from None
            if not 0 < t <= 0xFFFFFFFF:
                raise ProfileError(f"--teid-file {path}:{n}: TEID {t:#x} is 0 or above 32 bits")
            teids.append(t)
    if len(teids) < bearers:
        raise ProfileError(f"--teid-file {path}: {len(teids)} TEIDs for {bearers} bearers")
    return teids


def sgw6_addr(args: argparse.Namespace, i: int) -> str:
    """Bearer i's SGW (gNB) IPv6 address with --n3 6: sgw6_base + i % sgws, in its low 32 bits."""
    hi = int(ipaddress.IPv6Address(args.sgw6_base)) >> 32 << 32
    return str(ipaddress.IPv6Address(hi | (args.sgw6_lo + i % args.sgws)))


def bearer(args: argparse.Namespace, i: int) -> tuple[int, int, int, int]:
    """(local TEID, UE address, SGW address, SGW TEID) of bearer i, addresses as integers; the
    local TEID from --teid-file when given."""
    teids = getattr(args, "teids", None)
    return (teids[i] if teids else args.teid_base + i, args.ue_base + i, args.sgw_base + i % args.sgws,
            args.sgw_teid_base + i)


def ip(n: int) -> str:
    """Dotted quad of an integer address (fast: a million bearers are a million lines)."""
    return f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def ue6_prefix(i: int) -> str:
    """The /64 of bearer i's UE: fd47:7470:XXXX:YYYY::/64 with XXXX:YYYY = i (hex, no leading 0s)."""
    return f"fd47:7470:{i >> 16:x}:{i & 0xFFFF:x}::/64"


def ue6_addr(i: int, iid: int = UE6_IID) -> str:
    """Bearer i's UE IPv6 address: its /64 and the 64-bit interface identifier iid."""
    return (f"fd47:7470:{i >> 16:x}:{i & 0xFFFF:x}:{iid >> 48 & 0xFFFF:x}:{iid >> 32 & 0xFFFF:x}:"
            f"{iid >> 16 & 0xFFFF:x}:{iid & 0xFFFF:x}")


def server6_addr(n: int) -> str:
    """Host n of the servers' fd47:7471::/64 (n >= 1; the low 32 bits)."""
    return f"fd47:7471::{n >> 16 & 0xFFFF:x}:{n & 0xFFFF:x}"


def bearer_lines(args: argparse.Namespace, csum: str = "default"):
    """Lines of the pgwu bulk bearer file (`pgwu session load FILE`) for bearers 0..bearers-1:
    `TEID UE_ADDR SGW_ADDR SGW_TEID [csum=on|off] [ue6=PREFIX/64] [sgw6=ADDR]`; ue6= (the UE's IPv6
    /64, ue6_prefix) only with --ip 6 or 4v6, sgw6= (the SGW's IPv6 address, sgw6_addr: the
    downlink's outer destination over PFCP) only with --n3 6. Every bearer keeps its IPv4 UE and SGW."""
    tail = "" if csum == "default" else f" csum={csum}"
    v6 = str(getattr(args, "ip", "4")) != "4"
    n3v6 = getattr(args, "n3", 4) == 6
    sgw6 = [f" sgw6={sgw6_addr(args, k)}" for k in range(min(args.sgws, args.bearers))] if n3v6 else None
    for i in range(args.bearers):
        teid, ue, sgw, sgw_teid = bearer(args, i)
        six = f" ue6=fd47:7470:{i >> 16:x}:{i & 0xFFFF:x}::/64" if v6 else ""   # ue6_prefix(i), inlined
        yield f"{teid:#010x} {ip(ue)} {ip(sgw)} {sgw_teid:#010x}{tail}{six}{sgw6[i % args.sgws] if sgw6 else ''}\n"


# ---------------------------------------------------------------------------------------------
# Streams


COMP_LEN = 4   # the software checksum's compensation word: the first 4 payload bytes


def sw_checksum(args: argparse.Namespace, payload_len: int) -> bool:
    """Whether an uplink stream keeps its inner checksums valid by construction (--checksum sw):
    multi-flow, room for the compensation word (and, with --stats stats, for the 16 trailer
    bytes after it), and no TRex latency header (its timestamp changes every packet)."""
    room = COMP_LEN + (STATS_PAYLOAD if args.stats != "none" else 0)
    return (getattr(args, "checksum", "hw") == "sw" and args.flows > 1
            and args.stats != "latency" and payload_len >= room and args.order == "seq")


def payload(n: int) -> bytes:
    """n bytes of a fixed, recognisable pattern (never all zero)."""
    pattern = bytes(range(0x20, 0x7F))
    return (pattern * (n // len(pattern) + 1))[:n]


def make_streams(stl, args: argparse.Namespace, build) -> list:
    """One STLStream per args.streams row. build(size, payload_len, ip) returns (scapy packet,
    list of field-engine instructions) for a user packet of family ip (4 or 6); stl is the
    trex.stl.api module of the calling profile."""
    streams = []
    for n, row in enumerate(args.streams):
        pkt, instructions = build(row["size"], row["payload"], row["ip"])
        if len(pkt) != row["size"] - FCS_LEN:
            raise ProfileError(f"internal: built {len(pkt)} bytes for a {row['size']}-byte frame")
        vm = stl.STLScVmRaw(instructions) if instructions else None
        flow_stats = None
        if args.stats == "stats":
            flow_stats = stl.STLFlowStats(pg_id=args.pg_id + n)
        elif args.stats == "latency":
            flow_stats = stl.STLFlowLatencyStats(pg_id=args.pg_id + n)
        streams.append(stl.STLStream(
            name=f"{args.profile}_{row['size']}" + (f"_imix{n}" if args.imix else "")
            + ("_ip6" if row["ip"] == 6 else ""),
            packet=stl.STLPktBuilder(pkt=pkt, vm=vm),
            mode=stl.STLTXCont(pps=row["pps"]),
            isg=row["isg"],
            random_seed=args.seed if args.order == "random" else 0,
            flow_stats=flow_stats,
            mac_src_override_by_pkt=False,   # source MAC: the port's
            mac_dst_override_mode=0))        # destination MAC: the port's configured next hop
    return streams
