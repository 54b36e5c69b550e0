"""The judge of `gtplab conformance` on fake captures (no lab): a capture that is the oracle's output
passes, one whose forwarded packet differs by one octet fails with that packet (Scapy repr and hex,
expected and got), a missing or an extra one fails, a UPF's known departure is "departs" with its
cause, and a case's output normalisation (a free outer IPv4 id) does not hide a wrong checksum."""

from __future__ import annotations

from types import SimpleNamespace

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from gtplab.conformance import cases as C
from gtplab.conformance import departs
from gtplab.conformance import oracle as O
from gtplab.conformance.judge import Got, judge
from gtplab.lab.topology import Addressing


def ctx(n3: str = "4") -> C.Ctx:
    ports = [SimpleNamespace(mac="02:00:00:00:00:00", dut_mac="02:00:00:00:01:00"),
             SimpleNamespace(mac="02:00:00:00:00:01", dut_mac="02:00:00:00:01:01")]
    return C.Ctx(addressing=Addressing(), ports=ports, csum_on=frozenset((0, 1, 4)), qfi=C.QFI,
                 first_qer_qfi=C.QFI, mtu_access=3200, mtu_sgi=3200, n3=n3)


def run_case(name: str, got_fwd=None, got_back=None, upf: str = "pgwu", n3: str = "4") -> dict:
    """Judge case `name` on a fake capture: by default exactly the oracle's output for the spec."""
    c, x = C.BY_NAME[name], ctx(n3)
    frames = [bytes(f) for f in c.frames(x)]
    spec = c.expect(x, frames, {})
    facts = departs.facts(upf)
    keys = [k for k in c.uses if k in facts]
    dep = c.expect(x, frames, {k: facts[k] for k in keys}) if keys else None

    def flat(items):
        return [e for e, n in items for _ in range(n) if isinstance(e, bytes)]
    got = Got(fwd=flat(spec.fwd) if got_fwd is None else got_fwd,
              back=flat(spec.back) if got_back is None else got_back)
    return judge(spec, got, departing=dep, causes=departs.causes(upf, keys),
                 norm=O.id_free if c.id_free else None, norm_back=O.id_free)


def test_the_oracles_output_passes():
    for name in ("uplink-gpdu", "downlink-gpdu", "error-indication", "echo", "qfi-downlink-psc"):
        assert run_case(name) == {"result": "pass"}, name


def test_one_octet_off_fails_with_the_packet():
    c, x = C.BY_NAME["uplink-gpdu"], ctx()
    frames = [bytes(f) for f in c.frames(x)]
    good = [e for e, n in c.expect(x, frames, {}).fwd for _ in range(n)]
    bad = bytearray(good[4])
    bad[14 + 8] += 1                                  # the inner TTL not decremented: one octet
    v = run_case("uplink-gpdu", got_fwd=good[:4] + [bytes(bad)] + good[5:])
    assert v["result"] == "fail"
    d = v["diff"]
    assert (d["port"], d["why"]) == ("forwarded", "unexpected")
    assert d["got"]["hex"] == bytes(bad).hex() and d["got"]["scapy"] == Ether(bytes(bad)).command()
    assert d["expected"]["hex"] == good[4].hex()      # the nearest expected frame: the one it should be


def test_the_last_octet_counts():
    """A difference at the end of a 3024 B frame (the inner payload's last octet) is a failure."""
    c, x = C.BY_NAME["uplink-gpdu"], ctx()
    good = [e for e, n in c.expect(x, [bytes(f) for f in c.frames(x)], {}).fwd for _ in range(n)]
    i = max(range(len(good)), key=lambda k: len(good[k]))
    bad = bytearray(good[i])
    bad[-1] ^= 0xFF
    v = run_case("uplink-gpdu", got_fwd=good[:i] + [bytes(bad)] + good[i + 1:])
    assert v["result"] == "fail" and v["diff"]["got"]["hex"] == bytes(bad).hex(), v


def test_missing_and_extra_frames_fail():
    c, x = C.BY_NAME["uplink-gpdu"], ctx()
    good = [e for e, n in c.expect(x, [bytes(f) for f in c.frames(x)], {}).fwd for _ in range(n)]
    v = run_case("uplink-gpdu", got_fwd=good[:-1])
    assert v["result"] == "fail" and v["diff"]["why"] == "missing" and v["diff"]["got"] is None
    v = run_case("uplink-gpdu", got_fwd=good + good[:1])
    assert v["result"] == "fail" and v["diff"]["why"] == "unexpected"
    v = run_case("end-marker", got_back=[good[0]])    # nothing may come back
    assert v["result"] == "fail" and v["diff"]["port"] == "back"


def test_a_known_departure_is_departs_not_pass():
    c, x = C.BY_NAME["uplink-gpdu"], ctx()
    frames = [bytes(f) for f in c.frames(x)]
    kept = [e for e, n in c.expect(x, frames, {"inner_ttl": "kept"}).fwd for _ in range(n)]
    v = run_case("uplink-gpdu", got_fwd=kept, upf="eupf")
    assert v["result"] == "departs" and v["cause"].startswith("inner_ttl: ")
    # the same output from a UPF with no such departure is a failure
    assert run_case("uplink-gpdu", got_fwd=kept)["result"] == "fail"
    # a UPF that stopped departing passes (the spec's output): the table's row is then stale
    assert run_case("uplink-gpdu", upf="eupf")["result"] == "pass"


def test_a_free_outer_id_does_not_hide_a_bad_header_checksum():
    c, x = C.BY_NAME["downlink-gpdu"], ctx()
    good = [e for e, n in c.expect(x, [bytes(f) for f in c.frames(x)], {}).fwd for _ in range(n)]
    f = bytearray(good[0])
    assert not f[14 + 6] & 0x40                       # DF clear: the id is the UPF's to pick
    f[14 + 4:14 + 6] = b"\x12\x34"                    # another id, the checksum not redone
    assert run_case("downlink-gpdu", got_fwd=[bytes(f)] + good[1:])["result"] == "fail"
    f[14 + 10:14 + 12] = b"\0\0"
    f[14 + 10:14 + 12] = O.csum16(bytes(f[14:34])).to_bytes(2, "big")
    assert run_case("downlink-gpdu", got_fwd=[bytes(f)] + good[1:])["result"] == "pass"


def test_cases_are_data():
    names = [c.name for c in C.CASES]
    assert len(names) == len(set(names))
    for c in C.CASES:
        assert c.clause and c.what and c.tx in (0, 1)
        assert set(c.uses) <= set().union(*(d.keys() for d in departs.DEPARTS.values())), c.name
    assert [c.name for c in C.select("uplink-*,echo")][:2] == ["uplink-gpdu", "uplink-outer-udp-checksum"]
    assert "echo" in [c.name for c in C.select("uplink-*,echo")]


# ---- N3 over IPv6 (--n3 6) ------------------------------------------------------------------------

def _expected(name: str, n3: str, port: str = "fwd") -> list[bytes]:
    c, x = C.BY_NAME[name], ctx(n3)
    return [e for e, n in getattr(c.expect(x, [bytes(f) for f in c.frames(x)], {}), port) for _ in range(n)]


def test_over_n3_ipv6_the_oracles_output_is_ipv6_and_passes():
    """Every case built for N3 IPv6 passes on its own output; its G-PDUs are sent to the UPF's N3 IPv6
    address from the peers' IPv6 addresses, and what it expects on N3 is over IPv6 too, with a UDP
    checksum that is right (never 0)."""
    a = Addressing()
    for name in C.N3V6_CASES:
        assert "6" in C.BY_NAME[name].n3
        assert run_case(name, n3="6") == {"result": "pass"}, name
    for f in C.BY_NAME["uplink-gpdu"].frames(ctx("6")):
        assert f[IPv6].dst == a.dut_access6 and f[IPv6].src.startswith("fd47:7473::")
    dl = _expected("downlink-gpdu", "6")
    assert len(dl) == 5 * C.N_EACH
    for f in dl:
        e = Ether(f)
        assert e[IPv6].dst in {a.sgw6(i) for i in range(4)} and e[IPv6].src == a.dut_access6
        assert e[IPv6].fl == 0 and e[UDP].chksum != 0
        redo = Ether(f)
        redo[UDP].chksum = None
        assert Ether(bytes(redo))[UDP].chksum == e[UDP].chksum
    # the same inner packets as over IPv4: the uplink's T-PDUs are the same octets
    assert _expected("uplink-gpdu", "6") == _expected("uplink-gpdu", "4")


def test_over_n3_ipv6_a_wrong_checksum_flow_label_or_ipv4_outer_fails():
    good = _expected("downlink-gpdu", "6")
    for mutate in (lambda b: b.__setitem__(slice(14 + 46, 14 + 48), b"\0\0"),        # UDP checksum 0
                   lambda b: b.__setitem__(14 + 47, b[14 + 47] ^ 1),                     # one bit off
                   lambda b: b.__setitem__(14 + 3, 0x11)):                               # a flow label
        bad = bytearray(good[0])
        mutate(bad)
        v = run_case("downlink-gpdu", got_fwd=[bytes(bad)] + good[1:], n3="6")
        assert v["result"] == "fail" and v["diff"]["got"]["hex"] == bytes(bad).hex(), v
    # the G-PDUs over IPv4, as a UPF that ignored the IPv6 peer would send them
    assert run_case("downlink-gpdu", got_fwd=_expected("downlink-gpdu", "4"), n3="6")["result"] == "fail"
    # an Echo Response over IPv4 to an Echo Request over IPv6
    assert run_case("echo", got_back=_expected("echo", "4", "back"), n3="6")["result"] == "fail"
    # an Error Indication whose GTP-U Peer Address is the IPv4 address (4 octets)
    ei = Ether(_expected("error-indication", "6", "back")[0])
    assert bytes(ei[UDP].payload)[-19:-16] == bytes([133, 0, 16])      # the IE: type 133, 16 octets


def test_a_kernels_flow_label_is_a_known_departure_only():
    """A UPF whose kernel sends its G-PDUs (Open5GS): its flow label is free, not its checksum."""
    want = _expected("downlink-gpdu-ipv6", "6")[0]
    like = C._fl_free(want, "x")
    other = bytearray(want)
    other[14 + 1] |= 0x0A
    other[14 + 2:14 + 4] = b"\xbe\xef"
    assert like.test(want) and like.test(bytes(other))
    other[14 + 47] ^= 1                                                   # and its UDP checksum off
    assert not like.test(bytes(other))
