"""`gtplab upftest rules` (gtplab/upftests/classification.py) decided on a simulated UPF: one that
classifies as TS 29.244 says passes every case, and each way real UPFs were seen to get it wrong
(docs/upftests.md) fails the case named after it, with the figures, never another; loss before the
UPF makes a case "not decided". The real UPFs are in test_upftests_lab.py::test_rules_outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from scapy.layers.inet6 import ICMPv6ND_RA, IPv6
from scapy.layers.l2 import Ether

from gtplab.gtpu import packets as P
from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import PfcpTimeout
from gtplab.upftests import classification as K
from gtplab.upftests import rules as R
from gtplab.upftests.harness import Cases, Unsupported, inner_len
from gtplab.upftests.harness import TestSession as Session


@dataclass
class Behaviour:
    """How the simulated UPF departs from TS 29.244 (all False: it does not)."""
    reject_sdf: bool = False            # cause 73 to a session with SDF PDRs (the PGW-U, eUPF)
    drop_after_reject: bool = False     # and then drops every later session's packets (eUPF a8d774a)
    urrs_alike: bool = False            # every URR reports the session's downlink, no uplink (Open5GS 8f25f3b)
    gate_ignored: bool = False          # an SDF PDR's closed gate passes its packets (Open5GS 8f25f3b)
    ring_loss: int = 0                  # packets of the first default uplink stream lost at the DUT's ring
    no_ipv6: bool = False               # accepts IPv4v6 sessions, forwards none of their IPv6 (eUPF a8d774a)
    rs: str = "cp"                      # a Router Solicitation matching the CP function's PDR: "cp" in its
                                        # tunnel, "ra" answered (with the PSC), "ra_no_psc" answered without
                                        # it (Open5GS #4804), "n6" forwarded on N6, "drop" neither
    icmp_takes_all: bool = False        # the CP function's PDR takes all the UE's IPv6 (Open5GS #4702)
    ignore_precedence: bool = False     # the first SDF PDR given that matches, not the lowest precedence
    no_n3v6: bool = False               # cause 73 to a session over N3 IPv6 (eUPF a8d774a)
    spi_ignored: bool = False           # an SDF filter with an SPI takes any ESP, whatever its SPI
    silent_on: tuple = ()               # session indexes whose establishment it never answers (eUPF a8d774a:
                                        # the fields session's request it cannot decode)


@dataclass
class Frame:
    d: str
    s: object
    size: int
    family: int
    server: str
    port: int
    tos: int = 0
    fl: int = 0
    proto: int = 17
    spi: int | None = None


def _matches(x, f: Frame, spi_ignored: bool = False) -> bool:
    """SDF filter x (gtplab.pfcp.rules.SdfFilter; flow descriptions as its flow_description makes them)
    against frame f, every field given (UDP only: the simulated streams are)."""
    if x.tos is not None and f.tos & x.tos[1] != x.tos[0]:
        return False
    if x.flow_label is not None and (f.family != 6 or f.fl != x.flow_label):
        return False
    if x.spi is not None and (f.proto != 50 or (f.spi != x.spi and not spi_ignored)):
        return False
    if x.flow:
        t = x.flow.split()
        proto, remote, rest = t[2], t[4], t[5:]
        if proto not in ("ip", str(f.proto)) or (remote != "any" and remote.split("/")[0] != f.server):
            return False
        if rest[0] != "to":
            lo, _, hi = rest[0].partition("-")
            if not int(lo) <= f.port <= int(hi or lo):
                return False
    return True


@dataclass
class FakeUpf:
    b: Behaviour
    node: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(reports=[]))
    lab: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(
        ports=[SimpleNamespace(ifname="gen0"), SimpleNamespace(ifname="gen1")]))
    rejected: bool = False
    flows: dict = field(default_factory=dict)
    where: dict = field(default_factory=dict)
    counted: dict = field(default_factory=dict)     # cp_seid -> {urr: [ul_b, dl_b, ul_p, dl_p]}
    deleted: list = field(default_factory=list)
    _seid: int = 0

    def cases(self):
        return Cases()

    def rules(self, i, **kw):
        return R.Rules(**{"ue": f"10.64.0.{i}", "teid": 1000 + i, "n3": "10.201.0.1", "gnb": "10.201.0.2",
                          "gnb_teid": 2000 + i, **kw})

    def rules_n3v6(self, i, **kw):
        return self.rules(i, n3="fd47:7473::1", gnb="fd47:7473::10", **kw)

    @property
    def established(self):
        return self._seid

    def establish(self, r, index):
        if index in self.b.silent_on:
            e = PfcpTimeout("no answer")
            e.exchange = {"message": "session establishment request", "seq": 9, "sends": 4, "answer": "no answer"}
            raise e
        if ":" in r.n3 and self.b.no_n3v6:
            raise Unsupported("session establishment", 73)
        if r.pdrs and self.b.reject_sdf:
            self.rejected = True
            raise Unsupported("session establishment", 73)
        self._seid += 1
        s = Session(index, r, self._seid)
        s.up_seid = self._seid
        s.broken = self.rejected and self.b.drop_after_reject
        self.counted[s.cp_seid] = {}
        return s

    # a frame is what the simulated UPF classifies by: direction, session, size, family, the server's
    # address and port (uplink: destination, downlink: source), ToS / Traffic Class, Flow Label
    def server(self, i):
        return f"198.51.100.{i % 200}"

    def server6(self, i):
        return f"fd47:7471::{i % 200 + 1:x}"

    def ul_frame(self, s, size, **l4):
        return Frame("uplink", s, size, 4, self.server(s.index), l4.get("inner_dport", 5001), l4.get("tos", 0),
                     proto=l4.get("l4", 17), spi=l4.get("spi"))

    def dl_frame(self, s, size, **l4):
        return Frame("downlink", s, size, 4, self.server(s.index), l4.get("sport", 40000), l4.get("tos", 0),
                     proto=l4.get("l4", 17), spi=l4.get("spi"))

    def ul6_frame(self, s, size, server=None, **kw):
        assert s.rules.ue6, "an IPv6 frame of a session without a /64"
        return Frame("uplink", s, size, 6, self.server6(s.index if server is None else server), 5001,
                     kw.get("tc", 0), kw.get("fl", 0))

    def dl6_frame(self, s, size, server=None, **kw):
        assert s.rules.ue6, "an IPv6 frame of a session without a /64"
        return Frame("downlink", s, size, 6, self.server6(s.index if server is None else server), 40000,
                     kw.get("tc", 0), kw.get("fl", 0))

    def rs_frame(self, s):
        return ("rs", s)

    def frame_stream(self, port, frame, pg, pps, total):
        return port, {"frame": frame, "pg": pg, "total": total, "port": port}

    # the engine's capture and port counters, for the cp-function trial
    @property
    def client(self):
        return self

    def start_capture(self, rx_ports, limit):
        return {"id": rx_ports[0]}

    def stop_capture(self, cid):
        return [(0, f, len(f)) for f in self.captured[cid]]

    def get_stats(self):
        return {p: {"opackets": n, "capture_lost": 0} for p, n in self.sent.items()}

    def _rs_fate(self, s, n):
        """What the UPF sends for n Router Solicitations of session s: {port: [frames]}."""
        r, cp = s.rules, s.rules.pdrs[0].to_cp
        rs = P.router_solicitation6("fe80::1")
        if self.b.rs == "cp":
            return {0: [bytes(P.gtpu(rs, teid=cp[1], src=r.n3, dst=cp[0]))] * n}
        if self.b.rs in ("ra", "ra_no_psc"):
            ext = [P.pdu_session_container(r.qfi, uplink=False)] if self.b.rs == "ra" else ()
            ra = IPv6(src="fe80::2", dst="fe80::1", hlim=255) / ICMPv6ND_RA()
            return {0: [bytes(P.gtpu(ra, teid=r.gnb_teid, src=r.n3, dst=r.gnb, ext=ext))] * n}
        if self.b.rs == "n6":
            return {1: [bytes(Ether() / rs)] * n}
        return {}

    def _pdr(self, s, f):
        """(URR ID or None, gate open) of the PDR the packet matches: the SDF PDRs by precedence, the
        defaults' after them (self.b.ignore_precedence: in the order they were given)."""
        pdrs = list(enumerate(s.rules.pdrs))
        if not self.b.ignore_precedence:
            pdrs.sort(key=lambda kp: kp[1].precedence)
        for k, p in pdrs:
            if p.uplink == (f.d == "uplink") and any(_matches(x, f, self.b.spi_ignored) for x in p.sdf):
                return (2 + k if p.urr else 2 + p.urr_of if p.urr_of is not None else None), p.gate[0 if p.uplink else 1]
        return (1 if s.rules.urr else None), True

    def start(self, streams):
        self.flows, self.where = {}, {}
        self.sent, self.captured = {0: 0, 1: 0}, {0: [], 1: []}
        lost, self.b.ring_loss = self.b.ring_loss, 0         # in the first trial only
        for _, st in streams:
            self.sent[st["port"]] += st["total"]
            if isinstance(st["frame"], tuple):
                for p, frames in self._rs_fate(st["frame"][1], st["total"]).items():
                    self.captured[p] += frames
                continue
            f = st["frame"]
            d, s, size, port, family = f.d, f.s, f.size, f.port, f.family
            urr, gate = self._pdr(s, f)
            rx = 0 if s.broken or (not gate and not self.b.gate_ignored) else st["total"]
            if family == 6 and (self.b.no_ipv6 or (self.b.icmp_takes_all and d == "uplink" and s.rules.pdrs
                                                   and s.rules.pdrs[0].to_cp)):
                rx = 0
            if lost and d == "uplink" and port == 5001:
                rx, lost = rx - lost, 0
                self.where = {"veth": {"gen0.rx_xdp_xmit_err": st["total"] - rx}}
            self.flows[st["pg"]] = (st["total"], rx)
            if urr:
                a = self.counted[s.cp_seid].setdefault(urr, [0, 0, 0, 0])
                k = 0 if d == "uplink" else 1
                a[k] += rx * inner_len(size, d)
                a[2 + k] += rx
        return [0, 1]

    def wait(self, ports):
        pass

    def flow(self):
        return dict(self.flows)

    def loss_snapshot(self):
        return {}

    def loss_delta(self, a, b):
        return dict(self.where)

    def delete(self, s):
        self.deleted.append(s.index)
        acc = self.counted.pop(s.cp_seid, {})
        if self.b.urrs_alike and len(acc) > 1:      # every URR: the last one's downlink, no uplink
            last = acc[max(acc)]
            acc = {u: [0, last[1], 0, last[3]] for u in acc}
        s.usage += [m.Usage(urr=u, volume=(v[0] + v[1], v[0], v[1]), packets=(v[2] + v[3], v[2], v[3]),
                            where="deletion") for u, v in sorted(acc.items())]
        return s.usage

    def reports_for(self, s, since=0):
        return []


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch):
    monkeypatch.setattr(K, "SETTLE_S", 0)


def _run(b: Behaviour) -> tuple[dict, FakeUpf]:
    upf = FakeUpf(b)
    cases = K.run(upf, pps=100, total=40, size=256)
    assert sorted(c["case_id"] for c in cases) == sorted(f"rules-{n}" for n in K.CASES)
    assert len(cases) == K.planned()
    return {c["case_id"][6:]: c for c in cases}, upf


def _verdicts(got: dict) -> dict:
    return {k: c["verdict"] for k, c in got.items()}


def test_a_upf_that_classifies_as_the_specification_says_passes_every_case():
    got, upf = _run(Behaviour())
    assert _verdicts(got) == {n: "pass" for n in K.CASES}, {k: c.get("why") for k, c in got.items()}
    assert sorted(upf.deleted) == list(range(60, 72))              # every session deleted
    assert got["cp-function"]["router_solicitations"] == {"on_n6": 0, "to_cp": K.RS_TOTAL, "ra": 0,
                                                          "ra_without_psc": 0}
    u = got["precedence-uplink"]["usage"]
    l3u, l3d = inner_len(256, "uplink"), inner_len(256, "downlink")
    assert u == {"1": {"ul_bytes": 40 * l3u, "dl_bytes": 40 * l3d, "ul_packets": 40, "dl_packets": 40},
                 "2": {"ul_bytes": 40 * l3u, "dl_bytes": 0, "ul_packets": 40, "dl_packets": 0},
                 "3": {"ul_bytes": 0, "dl_bytes": 40 * l3d, "ul_packets": 0, "dl_packets": 40}}, u


def test_urrs_that_report_each_others_packets_fail_precedence_with_the_figures():
    """Open5GS 8f25f3b: every URR of the session reports its downlink and no uplink."""
    got, _ = _run(Behaviour(urrs_alike=True))
    v = _verdicts(got)
    assert v["precedence-uplink"] == v["precedence-downlink"] == "fail", v
    assert {k for k, x in v.items() if x != "pass"} == {"precedence-uplink", "precedence-downlink",
                                                         "fields-uplink", "fields-downlink", "spi"}, v
    assert "URR 2: 0 uplink octets reported, 40 packets of 202 octets (8080) matched its PDR" in \
        got["precedence-uplink"]["why"], got["precedence-uplink"]["why"]
    assert "URR 2: " in got["precedence-downlink"]["why"] and "0 packets of 238 octets (0) matched its PDR" in \
        got["precedence-downlink"]["why"], got["precedence-downlink"]["why"]


def test_a_closed_gate_on_the_sdf_pdr_that_passes_its_packets_fails_qer():
    """Open5GS 8f25f3b: the SDF PDR's QER gate closed both ways, every packet forwarded."""
    got, _ = _run(Behaviour(gate_ignored=True))
    v = _verdicts(got)
    assert {k for k, x in v.items() if x != "pass"} == {"qer"}, v
    assert got["qer"]["why"] == ("ul_sdf: 40 of 40 packets forwarded through its PDR's closed gate; "
                                 "dl_sdf: 40 of 40 packets forwarded through its PDR's closed gate")


def test_sdf_rejected_is_not_supported_and_a_upf_broken_by_it_fails_after_only():
    """The PGW-U's agent (73, nothing else changes) and eUPF a8d774a (73, then every later session's
    packets dropped): the plain cases ran before the SDF sessions were tried, so they stay decided."""
    got, _ = _run(Behaviour(reject_sdf=True))
    v = _verdicts(got)
    assert v == {"ohr-0": "pass", "ohr-6": "pass", "second": "pass", "ipv6": "pass", "after": "pass", "precedence-uplink":
                 "not supported", "precedence-downlink": "not supported", "qer": "not supported",
                 "fields-uplink": "not supported", "fields-downlink": "not supported", "cp-function": "not supported",
                 "spi": "not supported", "ohr-1": "pass"}, v
    assert got["qer"]["cause"] == 73 and "cause 73" in got["qer"]["why"]
    got, _ = _run(Behaviour(reject_sdf=True, drop_after_reject=True))
    v = _verdicts(got)
    assert v["after"] == v["ohr-1"] == "fail" and \
        {k for k, x in v.items() if x == "pass"} == {"ohr-0", "ohr-6", "second", "ipv6"}, v
    assert got["after"]["why"] == "ul: 0 of 40 packets forwarded; dl: 0 of 40 packets forwarded"
    assert got["after"]["rejected_before"] == ["precedence", "qer", "cp-function"]
    got, _ = _run(Behaviour(no_n3v6=True))         # eUPF a8d774a: 73 to an F-TEID V6 session
    assert {k for k, x in _verdicts(got).items() if x != "pass"} == {"ohr-1"} and got["ohr-1"]["cause"] == 73


def test_a_upf_that_forwards_no_ipv6_of_an_ipv4v6_session_fails_ipv6_only():
    """eUPF a8d774a: the IPv4v6 session accepted, its IPv4 packets forwarded, its IPv6 ones not."""
    got, _ = _run(Behaviour(no_ipv6=True))
    v = _verdicts(got)
    assert {k for k, x in v.items() if x != "pass"} == {"ipv6", "cp-function", "fields-uplink", "fields-downlink"}, v
    assert got["ipv6"]["why"] == "ul6: 0 of 40 packets forwarded; dl6: 0 of 40 packets forwarded", got["ipv6"]
    assert got["ipv6"]["ue6"] == K.IPV6_PREFIX


def test_a_upf_that_takes_the_first_matching_pdr_not_the_lowest_precedence_fails_fields():
    """The fields session lists its ToS PDR (precedence 20) before its address-and-port one (10): a
    packet matching both must go to the second; a UPF that takes the first it finds fails, both ways,
    with the URRs' figures."""
    got, _ = _run(Behaviour(ignore_precedence=True))
    v = _verdicts(got)
    assert {k for k, x in v.items() if x != "pass"} == {"fields-uplink", "fields-downlink"}, v
    up, tos, rng = K.fields_urr(None), K.fields_urr("tos"), K.fields_urr("range")
    assert (tos, rng) == (2, 4)
    assert got["fields-uplink"]["why"] == (
        "URR 2: 16160 uplink octets reported, 40 packets of 202 octets (8080) matched its PDR; "
        "URR 2: 80 uplink packets reported, 40 matched its PDR; "
        "URR 4: 8080 uplink octets reported, 80 packets of 202 octets (16160) matched its PDR; "
        "URR 4: 40 uplink packets reported, 80 matched its PDR"), got["fields-uplink"]["why"]
    assert got["fields-downlink"]["expected_packets"][str(K.fields_urr("range"))] == 80
    assert up == 1


def test_a_upf_that_ignores_the_spi_fails_spi_only_with_the_urrs_figures():
    """An SDF filter whose SPI is not compared takes the other SPI's ESP too: spi fails, its why
    names the URRs' figures (the default's none, the SPI PDR's twice the matched), every other case
    passes."""
    got, _ = _run(Behaviour(spi_ignored=True))
    assert _verdicts(got) == {**{n: "pass" for n in K.CASES}, "spi": "fail"}, got["spi"].get("why")
    why = got["spi"]["why"]
    assert "URR 1: no usage reported, 40 uplink packets matched its PDR" in why, why
    assert "URR 1: no usage reported, 40 downlink packets matched its PDR" in why, why
    assert "URR 2: 80 uplink packets reported, 40 matched its PDR" in why, why


def test_a_session_establishment_never_answered_fails_its_cases_and_the_run_goes_on():
    """eUPF a8d774a cannot decode the fields session's request and never answers it: both fields cases
    fail with the exchange; the fields session comes last, so every other case is decided."""
    got, _ = _run(Behaviour(silent_on=(69,)))
    v = _verdicts(got)
    assert {k for k, x in v.items() if x != "pass"} == {"fields-uplink", "fields-downlink"}, v
    assert got["fields-uplink"]["why"] == ("no answer to the session establishment request after 4 sends: the "
                                           "session's rules were neither taken nor refused")
    assert got["fields-downlink"]["exchange"]["answer"] == "no answer"
    # a UPF that answers nothing at all: its N4 path is in doubt, not its rules
    got, _ = _run(Behaviour(silent_on=tuple(range(60, 72))))
    assert set(_verdicts(got).values()) == {"not decided"}, _verdicts(got)


@pytest.mark.parametrize("rs,why", [
    ("ra", None),                       # answered by the UPF itself, with the PSC: as good as the CP function's
    ("ra_no_psc", f"{K.RS_TOTAL} of {K.RS_TOTAL} Router Advertisements without the PDU Session Container of QFI 9"),
    ("n6", f"{K.RS_TOTAL} of {K.RS_TOTAL} Router Solicitations forwarded on N6: the default PDR took ICMPv6"),
    ("drop", f"0 of {K.RS_TOTAL} Router Solicitations in the CP function's tunnel (TEID 0xc0de0044), none answered"),
])
def test_router_solicitations_not_given_to_the_cp_function_fail_cp_function_only(rs, why):
    """Open5GS #4804 (Router Advertisements without the PDU Session Container) and the ways a UPF can
    miss the CP function's PDR: each fails cp-function, with the figures, and no other case."""
    got, _ = _run(Behaviour(rs=rs))
    v = _verdicts(got)
    if why is None:
        assert v == {n: "pass" for n in K.CASES}, got["cp-function"].get("why")
        assert got["cp-function"]["router_solicitations"]["ra"] == K.RS_TOTAL
        return
    assert {k for k, x in v.items() if x != "pass"} == {"cp-function"}, v
    assert got["cp-function"]["why"].startswith(why), got["cp-function"]["why"]


def test_an_icmpv6_filter_that_takes_all_the_ues_ipv6_fails_cp_function():
    """Open5GS #4702: the CP function's ICMPv6 filter matched all the UE's traffic."""
    got, _ = _run(Behaviour(icmp_takes_all=True))
    assert {k for k, x in _verdicts(got).items() if x != "pass"} == {"cp-function"}
    assert got["cp-function"]["why"] == "ul6: 0 of 40 packets forwarded", got["cp-function"]["why"]


def test_loss_before_the_upf_makes_the_case_not_decided_not_a_fail():
    """3 packets of the first trial lost at the DUT's receive ring (the host's): that trial's cases
    (the loss is the trial's, not a stream's) are not decided, the one that lost them not a fail."""
    got, _ = _run(Behaviour(ring_loss=3))
    c = got["ohr-0"]
    assert c["verdict"] == "not decided" and c["criterion_verdict"] == "fail", c
    assert "lost before the UPF's rules: uplink dut_receive_ring 3" in c["why"], c["why"]
    assert {k for k, x in _verdicts(got).items() if x != "pass"} == {"ohr-0", "ohr-6", "second", "ipv6"}
    assert all(got[k]["verdict"] == "not decided" for k in ("ohr-6", "second", "ipv6"))


@pytest.mark.parametrize("kind", ["rules"])
def test_the_rules_kind_is_on_the_command_line(kind):
    from gtplab.upftests import cli
    assert cli.KINDS[kind] is K


def test_a_gpdu_to_an_ipv6_n3_address_is_gtpu_over_ipv6_with_its_udp_checksum():
    """The ohr-1 case's uplink: Ethernet / IPv6 / UDP 2152 (checksum over the IPv6 pseudo header, never
    0: RFC 8200 8.1) / GTP-U / the UE's packet; an IPv4 N3 address keeps IPv4 and its zero checksum."""
    from scapy.layers.inet import IP, UDP
    f = bytes(P.gtpu(P.ip_packet("10.64.0.71", "198.18.0.7", payload_len=20), teid=0x46, src="fd47:7473::10",
                     dst="fd47:7473::1"))
    e = Ether(f)
    assert e.type == 0x86DD and e[IPv6].nh == 17 and e[IPv6].dst == "fd47:7473::1"
    sent = e[UDP].chksum
    del e[UDP].chksum
    assert sent != 0 and sent == Ether(bytes(e))[UDP].chksum
    assert bytes(e[UDP].payload)[:8] == bytes.fromhex("30ff") + (len(bytes(e[UDP].payload)) - 8).to_bytes(2, "big") \
        + (0x46).to_bytes(4, "big")
    v4 = Ether(bytes(P.gtpu(b"x", src="10.201.0.16", dst="10.201.0.1")))
    assert IP in v4 and v4[UDP].chksum == 0
