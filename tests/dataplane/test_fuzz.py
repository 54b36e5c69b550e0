"""Fuzzing both PGW-U programs in place: random and mutated frames through BPF_PROG_TEST_RUN.

Templates are built once with gtplab.gtpu.packets; mutations work on raw bytes (flip bytes, truncate,
extend, random GTP flags/lengths/extension chains, lengths fixed up so parsing goes deeper, pure
junk). For every packet: exactly one stats counter moved, by 1 packet and the frame's length, under a
(reason, verdict) pair the header documents and that this program can produce; passed packets are
untouched; forwarded packets are well formed (lengths, IPv4 header checksum, GTP length, outer UDP
checksum valid -- or 0 when off -- when the inner checksums were valid). At the end the stats map's
total equals the number of packets run, per program. Seeds are printed; rerun one with
GTPLAB_FUZZ_SEEDS=seed[,seed...] and GTPLAB_FUZZ_N=count.
"""

from __future__ import annotations

import os
import random
import struct
import time

import pytest

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import REASONS, VERDICTS, Config, Nexthop, usual_verdicts
from tests.lib import oracle as O

pytestmark = pytest.mark.bpf     # BPF_PROG_TEST_RUN on a loaded PGW-U

SEEDS = [int(s, 0) for s in os.environ.get("GTPLAB_FUZZ_SEEDS", "1,2,3,4").split(",")]
N_PER_SEED = int(os.environ.get("GTPLAB_FUZZ_N", "13000"))  # x 2 programs x 4 seeds = 104,000 packets

NH_ACCESS = Nexthop(1001, P.PGW_ACCESS_MAC, "02:00:00:00:01:99")
NH_SGI = Nexthop(1002, P.PGW_SGI_MAC, "02:00:00:00:02:02")
UE2 = "10.45.0.3"
BEARERS = [(P.TEID_UL, P.UE_ADDR, P.SGW_ADDR, P.TEID_DL, None), (0x300, UE2, "192.0.2.3", 0x77, True)]
UE_QFI, TEID_QFI = "10.45.0.9", 0x900      # a 5G N3 bearer with QFI 5
QFI_OF = {O.ip4(UE_QFI): 5}

ACCESS_REASONS = {"ul_fwd", "echo_reply", "pass_not_ipv4", "pass_not_gtpu", "sig_echo_response", "sig_error_ind",
                  "sig_end_marker", "sig_supp_ext_notif", "drop_gtp_ext_unsupported", "drop_echo_bad_src",
                  "drop_inner_csum", "drop_qfi_mismatch", "drop_trunc_eth",
                  "drop_trunc_ip", "drop_bad_ip", "drop_outer_frag", "drop_trunc_udp", "drop_bad_udp_len",
                  "drop_trunc_gtp", "drop_gtp_version", "drop_gtp_bad_len", "drop_gtp_bad_ext",
                  "drop_gtp_unknown_msg", "drop_unknown_teid", "drop_inner_not_ipv4", "drop_inner_bad",
                  "drop_spoofed", "drop_ttl_expired"}
SGI_REASONS = {"dl_fwd", "pass_not_ipv4", "pass_not_ue", "drop_trunc_eth", "drop_bad_ip_dl", "drop_unknown_ue",
               "drop_ttl_expired"}


def access_templates() -> list[bytes]:
    t = []
    for size in (128, 300, 1518):
        t.append(P.gpdu(size=size))
        t.append(P.gpdu(size=size, l4="tcp", seq=size))
    t += [P.gpdu(size=256, ext=[P.pdu_session_container(9)]),
          P.gpdu(size=256, seq=1, npdu=2, ext=[P.pdu_session_container(9), P.ext_header(0x40, b"\x08\x68"),
                                               P.ext_header(0x82, bytes(6))]),
          P.gpdu(size=200, vlan=12, l4="icmp"), P.gpdu(teid=0x300, ue=UE2, size=160, df=True),
          P.gpdu(size=3024), P.gpdu(inner=P.ip_packet(P.UE_ADDR, P.PDN_ADDR, options=b"\x94\x04\x00\x00")),
          P.echo_request(5), P.echo_request(None, vlan=3), P.end_marker(), P.error_indication(),
          P.gpdu(teid=0xDEAD, size=200), P.gpdu(size=200, ext=[P.ext_header(0xA0, b"\x01\x02")]),
          P.echo_response(2, src=P.SGW_ADDR, dst=P.PGW_ADDR, src_mac=P.SGW_MAC, dst_mac=P.PGW_ACCESS_MAC),
          P.supported_ext_headers_notification(), P.gpdu(size=200, ttl=1), P.gpdu(size=300, ttl=1, vlan=5),
          P.gpdu(teid=TEID_QFI, ue=UE_QFI, size=256, ext=[P.pdu_session_container(5)]),
          P.gpdu(teid=TEID_QFI, ue=UE_QFI, size=200, ttl=1, ext=[P.pdu_session_container(5)]),
          P.arp_request(), P.ipv6_packet(), P.downlink_ip(size=128)]
    return [bytes(x) for x in t]


def sgi_templates() -> list[bytes]:
    t = []
    for size in (64, 128, 512, 1518, 3024):
        for l4, kw in (("udp", {}), ("tcp", {}), ("icmp", {}), ("udp", {"udp_csum": False})):
            t.append(P.downlink_ip(size=size, l4=l4, **kw))
    t += [P.downlink_ip(UE2, size=300, l4="tcp", df=True), P.downlink_ip(size=600, mf=True),
          P.downlink_ip(size=600, frag=50, l4="tcp"), P.downlink_ip(size=128, vlan=5),
          P.downlink_ip(payload=b"xy", options=b"\x94\x04\x00\x00"), P.downlink_ip("203.0.113.1", size=128),
          P.downlink_ip("10.45.3.3", size=128), P.gpdu(size=200), P.arp_request(),
          P.downlink_ip(size=200, ttl=1), P.downlink_ip(size=300, ttl=1, vlan=9, l4="tcp"),
          P.downlink_ip(UE_QFI, size=300, l4="tcp"), P.downlink_ip(UE_QFI, size=128, l4="udp", udp_csum=False)]
    return [bytes(x) for x in t]


def fix_lengths(b: bytearray) -> None:
    """Make outer IP tot_len/checksum, UDP len and GTP length agree with the frame (best effort)."""
    l2 = 18 if b[12:14] == b"\x81\x00" else 14
    if len(b) < l2 + 20 or b[l2] >> 4 != 4:
        return
    ihl = (b[l2] & 0xF) * 4
    if ihl < 20 or len(b) < l2 + ihl:
        return
    tot = len(b) - l2
    b[l2 + 2:l2 + 4] = struct.pack("!H", tot)
    b[l2 + 10:l2 + 12] = b"\0\0"
    b[l2 + 10:l2 + 12] = struct.pack("!H", O.csum16(bytes(b[l2:l2 + ihl])))
    u = l2 + ihl
    if b[l2 + 9] == 17 and len(b) >= u + 8:
        b[u + 4:u + 6] = struct.pack("!H", tot - ihl)
        if len(b) >= u + 16:
            b[u + 10:u + 12] = struct.pack("!H", max(tot - ihl - 16, 0))


def mutate(rng: random.Random, tmpl: bytes) -> bytes:
    b = bytearray(tmpl)
    l2 = 18 if b[12:14] == b"\x81\x00" else 14
    gtp = l2 + 28
    op = rng.randrange(9)
    if op == 0:      # flip 1-4 bytes, mostly in the headers
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(min(len(b), 90)) if rng.random() < 0.85 else rng.randrange(len(b))
            b[i] = rng.randrange(256)
    elif op == 1:    # truncate
        b = b[:rng.randrange(14, len(b))]
    elif op == 2:    # extend (Ethernet padding or junk after the packet)
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif op == 3 and len(b) > gtp + 12:    # random GTP flags
        b[gtp] = rng.randrange(256)
        if rng.random() < 0.5:
            fix_lengths(b)
    elif op == 4 and len(b) > gtp + 12:    # random GTP length / message type
        if rng.random() < 0.5:
            b[gtp + 2:gtp + 4] = struct.pack("!H", rng.randrange(0, 70) if rng.random() < 0.5 else rng.randrange(65536))
        else:
            b[gtp + 1] = rng.choice([1, 2, 26, 31, 254, 255, rng.randrange(256)])
    elif op == 5 and len(b) > gtp + 24:    # random extension chain: E set, random types and lengths
        b[gtp] = 0x34 | rng.randrange(4)
        b[gtp + 11] = rng.choice([0x85, 0x40, 0x82, rng.randrange(256)])
        pos = gtp + 12
        for _ in range(rng.randint(1, 10)):
            if pos + 4 > len(b):
                break
            ln = rng.choice([0, 1, 1, 2, 3, rng.randrange(256)])
            b[pos] = ln
            end = pos + max(ln, 1) * 4
            if end - 1 < len(b):
                b[end - 1] = rng.choice([0, 0x85, 0x40, rng.randrange(256)])
            pos = end
        if rng.random() < 0.7:
            fix_lengths(b)
    elif op == 6:    # flip bytes, then make the lengths agree so parsing goes deeper
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(min(len(b), 120))] = rng.randrange(256)
        if rng.random() < 0.3:
            b = b[:rng.randrange(14, len(b))]
        fix_lengths(b)
    elif op == 7:    # junk with an IPv4 (or tagged) Ethernet header
        n = rng.randint(14, 200)
        b = bytearray(rng.randbytes(n))
        b[12:14] = rng.choice([b"\x08\x00", b"\x81\x00", b"\x88\xa8", b[12:14]])
        if rng.random() < 0.5 and n > 40:
            b[14] = 0x45
            fix_lengths(b)
    else:            # template unchanged: a valid packet between the mutants
        pass
    return bytes(b)


def check_forwarded(prog: str, reason: str, frame: bytes, out: bytes, cfg: Config, csum_of: dict) -> str | None:
    """None if out is a well-formed output for frame, else what is wrong."""
    if reason == "ul_fwd":
        exp_l2 = O.l2_header(P.mac_bytes(cfg.nexthop[1].dmac), P.mac_bytes(cfg.nexthop[1].smac), None)
        if out[:14] != exp_l2:
            return "ethernet header"
        ip = out[14:]
        ihl = (ip[0] & 0xF) * 4
        if ip[0] >> 4 != 4 or ihl < 20 or struct.unpack("!H", ip[2:4])[0] != len(ip):
            return "IPv4 length"
        try:
            inner = O.gpdu_inner(frame)
        except (IndexError, struct.error):
            return "forwarded a frame whose G-PDU cannot be parsed"
        if len(inner) != len(ip):
            return "inner length"
        if O.ip_hdr_ok(inner[:ihl]):
            if ip != O.ttl_dec(inner):
                return "decapsulated packet != input inner with TTL-1"
        elif cfg.inner_csum_check:
            return "forwarded an inner IPv4 header whose checksum is wrong (RFC 1812 5.2.2)"
        else:
            if ip[:8] + ip[12:] != O.ttl_dec(inner)[:8] + inner[12:] or ip[8] != inner[8] - 1:
                return "decapsulated packet (inner header checksum was bad)"
        return None
    if reason == "drop_unknown_teid":
        return None if out == O.error_indication_expected(frame, cfg.local_addr) else "Error Indication"
    if reason == "drop_ttl_expired":
        if prog == "sgi":
            exp = O.time_exceeded_dl_expected(frame, cfg.local_addr)
        else:
            ue = O.gpdu_inner(frame)[12:16]
            if ue == O.ip4(UE_QFI):
                sgw, sgw_teid = "192.0.2.9", 0x99
            else:
                _, _, sgw, sgw_teid, _ = next(b for b in BEARERS if O.ip4(b[1]) == ue)
            exp = O.time_exceeded_ul_expected(frame, cfg.local_addr, sgw, sgw_teid, QFI_OF.get(ue))
        return None if out == exp else "ICMP Time Exceeded\n" + O.hexdiff(exp, out)
    if reason == "drop_gtp_ext_unsupported":
        exp = O.supp_ext_notification_expected(frame, cfg.local_addr)
        return None if out == exp else "Supported Extension Headers Notification\n" + O.hexdiff(exp, out)
    if reason == "echo_reply":
        l2, _ = O.l2_split(out)
        ip = out[l2:]
        if len(ip) != 42 or not O.ip_hdr_ok(ip[:20]) or struct.unpack("!H", ip[2:4])[0] != 42:
            return "echo IPv4"
        if struct.unpack("!HH", ip[20:22] + ip[24:26])[1] != 22 or not O.udp_csum_ok(ip[12:16], ip[16:20], ip[20:42]):
            return "echo UDP"
        if ip[28:32] != b"\x32\x02\x00\x06" or ip[40:42] != bytes([14, cfg.restart_counter]):
            return "echo GTP"
        return None
    if reason == "dl_fwd":
        exp_l2 = O.l2_header(P.mac_bytes(cfg.nexthop[0].dmac), P.mac_bytes(cfg.nexthop[0].smac), None)
        if out[:14] != exp_l2:
            return "ethernet header"
        ip = out[14:]
        if len(ip) < 36 or ip[0] != 0x45 or not O.ip_hdr_ok(ip[:20]) or struct.unpack("!H", ip[2:4])[0] != len(ip):
            return "outer IPv4"
        ulen = struct.unpack("!H", ip[24:26])[0]
        sport = O.sport_of_flow(O.ip_payload(frame)) if cfg.sport_entropy else 2152
        if ulen != len(ip) - 20 or ip[20:24] != struct.pack("!HH", sport, 2152):
            return "outer UDP"
        inner_in = O.ip_payload(frame)
        qfi = QFI_OF.get(inner_in[16:20])
        hdr = O.gtp_header_for(inner_in, struct.unpack("!I", ip[32:36])[0], qfi)
        if ip[28:28 + len(hdr)] != bytes(hdr) or struct.unpack("!H", ip[30:32])[0] != ulen - 16:
            return "GTP header (and PDU Session Container)"
        inner_out = ip[28 + len(hdr):]
        if len(inner_out) != len(inner_in) or inner_out[:8] + inner_out[9:10] + inner_out[12:] != \
                inner_in[:8] + inner_in[9:10] + inner_in[12:] or inner_out[8] != inner_in[8] - 1:
            return "inner packet"
        ue = inner_in[16:20]
        csum_on = csum_of.get(ue, cfg.csum)
        ck = ip[26:28]
        if not csum_on:
            return None if ck == b"\0\0" else "outer UDP checksum not 0 with checksum off"
        ihl = (inner_in[0] & 0xF) * 4
        if O.ip_hdr_ok(inner_in[:ihl]) and O.l4_csum_state(inner_in) != "bad":
            if not O.udp_csum_ok(ip[12:16], ip[16:20], ip[20:]):
                return "outer UDP checksum wrong though the inner checksums were right"
        return None
    return f"unexpected forward reason {reason}"


def fuzz_one_program(dp, prog: str, seed: int, n: int, cfg: Config) -> dict:
    rng = random.Random(seed)
    tmpls = access_templates() if prog == "access" else sgi_templates()
    allowed = ACCESS_REASONS if prog == "access" else SGI_REASONS
    run = dp.run_access if prog == "access" else dp.run_sgi
    csum_of = {O.ip4(ue): c for _, ue, _, _, c in BEARERS if c is not None}
    dp.reset_stats()
    m = dp.maps["stats"]
    per_key = m._stride * m.ncpus
    _, prev, _ = m.lookup_all_raw()
    seen: dict = {}
    total_bytes = 0
    for k in range(n):
        frame = mutate(rng, rng.choice(tmpls))
        res = run(frame)
        _, vals, _ = m.lookup_all_raw()
        moved = [i for i in range(0, len(vals), per_key) if vals[i:i + per_key] != prev[i:i + per_key]]
        ctx = f"seed {seed} packet {k} ({prog}): {frame.hex()}"
        assert len(moved) == 1, f"{ctx}: {len(moved)} counters moved"
        idx = moved[0] // per_key
        delta = [0, 0]
        for c in range(m.ncpus):
            o = moved[0] + c * m._stride
            a = struct.unpack_from("=QQ", vals, o)
            b = struct.unpack_from("=QQ", prev, o)
            delta[0] += a[0] - b[0]
            delta[1] += a[1] - b[1]
        prev = vals
        reason, verdict = REASONS[idx // 5], VERDICTS[idx % 5]
        assert delta == [1, len(frame)], f"{ctx}: counter {reason}/{verdict} moved by {delta}"
        assert verdict == res.verdict, f"{ctx}: returned {res.verdict} but counted {reason}/{verdict}"
        assert reason in allowed and verdict in usual_verdicts(reason), f"{ctx}: undocumented {reason}/{verdict}"
        if verdict == "pass":
            assert res.data == frame, f"{ctx}: {reason} changed the frame\n" + O.hexdiff(frame, res.data)
        elif verdict in ("tx", "redirect"):
            err = check_forwarded(prog, reason, frame, res.data, cfg, csum_of)
            assert err is None, f"{ctx}: {reason}: {err}\n" + O.describe("output", res.data)
        seen[(reason, verdict)] = seen.get((reason, verdict), 0) + 1
        total_bytes += len(frame)
    stats = dp.stats()
    assert sum(p for p, _ in stats.values()) == n and sum(b for _, b in stats.values()) == total_bytes
    assert {k: v[0] for k, v in stats.items()} == seen
    return seen


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz(dataplane, seed):
    dp = dataplane
    cfg = Config(local_addr=P.PGW_ADDR, csum=bool(seed % 2), ue_pool=P.UE_POOL, restart_counter=seed & 0xFF,
                 nexthop=(NH_ACCESS, NH_SGI), err_ind=seed % 4 != 2, inner_csum_check=seed % 4 != 0,
                 sport_entropy=seed % 4 != 3)   # 2152 (--sport-entropy off) with seed 3
    dp.set_config(cfg)
    dp.flush_bearers()
    dp.clear_map("reply_budget")
    for teid, ue, sgw, st, c in BEARERS:
        dp.add_bearer(teid, ue, sgw, st, csum=c)
    dp.add_bearer(TEID_QFI, UE_QFI, "192.0.2.9", 0x99, qfi=5)
    t0 = time.monotonic()
    for prog in ("access", "sgi"):
        seen = fuzz_one_program(dp, prog, seed * 2 + (prog == "sgi"), N_PER_SEED, cfg)
        print(f"fuzz seed {seed} {prog}: {N_PER_SEED} packets, "
              + ", ".join(f"{r}/{v}={c}" for (r, v), c in sorted(seen.items())))
    print(f"fuzz seed {seed}: {time.monotonic() - t0:.1f} s")
