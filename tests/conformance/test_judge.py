"""The judge of `gtplab conformance` on fake captures (no lab): a capture that is the oracle's output
passes, one whose forwarded packet differs by one octet fails with that packet (Scapy repr and hex,
expected and got), a missing or an extra one fails, a UPF's known departure is "departs" with its
cause, and a case's output normalisation (a free outer IPv4 id) does not hide a wrong checksum."""

from __future__ import annotations

from types import SimpleNamespace

from scapy.layers.l2 import Ether

from gtplab.conformance import cases as C
from gtplab.conformance import departs
from gtplab.conformance import oracle as O
from gtplab.conformance.judge import Got, judge
from gtplab.lab.topology import Addressing


def ctx() -> C.Ctx:
    ports = [SimpleNamespace(mac="02:00:00:00:00:00", dut_mac="02:00:00:00:01:00"),
             SimpleNamespace(mac="02:00:00:00:00:01", dut_mac="02:00:00:00:01:01")]
    return C.Ctx(addressing=Addressing(), ports=ports, csum_on=frozenset((0, 1, 4)), qfi=C.QFI,
                 first_qer_qfi=C.QFI, mtu_access=3200, mtu_sgi=3200)


def run_case(name: str, got_fwd=None, got_back=None, upf: str = "pgwu") -> dict:
    """Judge case `name` on a fake capture: by default exactly the oracle's output for the spec."""
    c, x = C.BY_NAME[name], ctx()
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
