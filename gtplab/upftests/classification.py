"""Classification (issue 32 item 5): a session's packets go to the PDR their SDF filters and
precedence say, and each PDR's URR and QER apply to its packets only; the Outer Header Removal
forms SMFs send all decapsulate; a second session on the same UPF is independent of the first.

Sessions (UE i of the lab; each stream TOTAL packets at PPS; the plain sessions' trial first, the
SDF sessions' last, so that what a rejection does to a UPF cannot decide the plain cases):
    precedence  the two default PDRs (precedence 100, URR 1) and, at precedence 10, an uplink and a
                downlink PDR with the SDF filter `permit out 17 from any PORT to assigned` (UDP
                from / to the server's port PORT), each with its own FAR and URR (2: uplink, 3:
                downlink). Streams: the UE's UDP to PORT (matches) and to 5001 (does not), both
                ways.
    qer         the same SDF PDRs, with their own QER's gate closed both ways: the matching
                streams are not forwarded, the others are.
    ohr-0       Outer Header Removal 0 (GTP-U/UDP/IPv4) on the uplink PDR.
    ohr-6       Outer Header Removal 6 (GTP-U/UDP/IP, as Open5GS's SMF sends it; eUPF #639).
    ohr-1       GTP-U over IPv6 (N3 over IPv6): F-TEID V6 (the UPF's N3 IPv6 address), Outer Header
                Creation GTP-U/UDP/IPv6 to gNB i's IPv6 address, Outer Header Removal 1. With the
                SDF sessions (a UPF may reject it, and eUPF a8d774a breaks after a rejection).
    second      two sessions of two UEs: both forward; the first is deleted; the second still
                forwards (free5GC #388/#395).
    ipv6        an IPv4v6 session (UE IP Address V4 and V6: the UE's address and its /64): its
                IPv4 and its IPv6 packets both forward, both ways (eUPF #293).
    fields      an IPv4v6 session with, each way, four SDF PDRs with their own FAR (and a URR per
                filter, both ways: fields_urr): precedence
                10 the server's address and a port range (`permit out 17 from SERVER 6000-6010 to
                assigned`), 20 a ToS/Traffic Class (0xb8/0xfc: EF), 30 an IPv6 server address
                (another server of the lab's prefix), 40 an IPv6 Flow Label (0x12345). Streams: one
                for each, one matching both 10 and 20 (precedence decides: 10), and the defaults' IPv4
                and IPv6 ones that match none.
    cp-function an IPv4v6 session with QFI 9 and, at precedence 10, Open5GS's SMF's UP2CP PDR: the
                uplink filter `permit out 58 from ff02::2/128 to assigned` (ICMPv6 to all-routers:
                Router Solicitations) whose FAR forwards to the CP function in a GTP-U tunnel (the
                lab's stand-in for the SMF's N4-u address: the gNB address of the session, TEID
                CP_TEID + i). Its own trial: the UE's IPv6 UDP both ways beside RS_TOTAL Router
                Solicitations from its link-local address, everything the UPF sends on N3 and N6
                captured (Open5GS #4702: the ICMPv6 filter took all traffic; #4804: its Router
                Advertisements carried no PDU Session Container).
    spi         a session with, each way, an SDF PDR for IPsec ESP with one Security Parameter Index
                (an SDF Filter with the Flow Description `permit out 50 from any to assigned` and the
                SPI field SPI, 8.2.5) and its own URR (one for both directions). Its own trial, after
                the cp-function one: ESP packets with that SPI (match) and with SPI_OTHER (the
                defaults'), both ways.
    after       a plain session established after the SDF sessions (accepted or rejected): it
                forwards (eUPF a8d774a rejects `permit out 17 ...` with 73, protocol numbers being
                unknown to it, and then drops every later session's packets, drop_rules).
Criteria: precedence: each URR's reported octets and packets equal the generator's packets of the
streams its PDR matches (received beyond the UPF) times their L3 length, per direction, and every
stream is forwarded whole; fields: the same per direction for its five PDRs; spi: the same for
its two URRs, both directions in one case; qer: the matching
streams' packets 0 received, the others whole; ohr-*,
second, ipv6 and after: every stream forwarded whole; cp-function: the IPv6 UDP streams forwarded
whole (the CP function's PDR takes nothing else), no Router Solicitation on N6 (the default PDR
does not take them), and every one either in the CP function's tunnel or answered by the UPF with a
Router Advertisement to the UE in its tunnel, with the PDU Session Container of its QFI. Each case keeps `where`: the UPF's counters by
reason and the lab's ring counters over its trial, so a packet not forwarded is found.

Premises ("not decided" when one fails): the generator sent every stream's packets as asked; no
packet lost where the UPF's rules never saw it (the DUT's veth receive ring, a socket UPF's receive
buffers: criteria.PRE_POLICER_PLACES), which says nothing of how it classifies.
A UPF that rejects a case's rules (a Cause other than 1) is "not supported" for that case, with its
Cause. Verdicts measured (tests/upftests/test_upftests_lab.py RULES_KNOWN): the PGW-U passes every
case but ohr-1 (not tried: no N3 IPv6 address), cp-function included (its XDP program relays the
Solicitations in the CP function's tunnel, xdp_cp; until then its agent answered 73 to the FAR to
the CP function); eUPF a8d774a fails ohr-6, ipv6, after, cp-function and fields and is not
supported on precedence, qer and ohr-1; Open5GS 8f25f3b fails precedence, qer, cp-function and
fields.
"""

from __future__ import annotations

import time

from gtplab.pfcp import rules as PR
from gtplab.pfcp.errors import PfcpTimeout
from gtplab.upftests import criteria as C
from gtplab.upftests import rules as R
from gtplab.upftests.harness import TestSession, Unsupported, Upf, inner_len

PPS = 200
TOTAL = 400
SIZE = 256
PORT = 6000                     # the SDF filter's server port; the default streams use 5001 / 40000
PRECEDENCE = 10                 # before the defaults' PRECEDENCE_DEFAULT
IPV6_PREFIX = "fd47:7470:0:43::/64"     # session 67's UE /64 (the sweep's bearer 67's: fd47:7470:XXXX:YYYY, i = 0x43)
PG_BASE = 1000                  # pg ids of the second stream of a session (2 per session)
SETTLE_S = 0.5                  # after the traffic: packets still on their way
PG6_BASE = 1100                 # pg ids of the IPv6 streams of a session (2 per session)
PG_FIELDS_BASE = 1300           # pg ids of the fields session's streams (2 per FIELD_STREAMS)
FIELDS_PREFIX = "fd47:7470:0:45::/64"     # session 69's UE /64
RANGE = "6000-6010"             # the fields session's port range; its streams use 6005
RANGE_PORT = 6005
EF = (0xB8, 0xFC)               # ToS / Traffic Class (value, mask): DSCP 46
FLOW_LABEL = 0x12345
# the fields session's SDF PDRs: (name, precedence), each once per direction, in the order of their
# Create PDRs; tos before range, out of precedence order (the order of IEs in a message means nothing:
# precedence decides which of two matching PDRs takes a packet, 29.244 5.2.1)
FIELDS = (("tos", 20), ("range", 10), ("addr6", 30), ("flow_label", 40))
# its streams: name -> (family, the PDR they match: one of FIELDS' names, or None for the defaults)
FIELD_STREAMS = {"plain": (4, None), "plain6": (6, None), "range": (4, "range"), "tos": (4, "tos"),
                 "range_tos": (4, "range"), "addr6": (6, "addr6"), "flow_label": (6, "flow_label")}
CP_PREFIX = "fd47:7470:0:44::/64"         # session 68's UE /64
CP_QFI = 9
CP_TEID = 0xC0DE0000            # + the session's index: the CP function's tunnel (the FAR's Outer Header Creation)
CP_FLOW = "permit out 58 from ff02::2/128 to assigned"   # Open5GS's SMF's UP2CP filter, as it sends it
RS_TOTAL = 40                   # Router Solicitations sent (a UE sends 3: RFC 4861 10; these many at RS_PPS)
RS_PPS = 20
ICMPV6_RS, ICMPV6_RA = 133, 134
SPI, SPI_OTHER = 0x1000, 0x1001       # the spi session's SPI filter, and the SPI of its other ESP streams
ESP = 50
PG_SPI_BASE = 1400              # pg ids of the spi session's four streams
CASES = ("ohr-0", "ohr-6", "second", "ipv6", "precedence-uplink", "precedence-downlink", "fields-uplink",
         "fields-downlink", "qer", "ohr-1", "cp-function", "spi", "after")


def planned(**_) -> int:
    """The cases run() makes."""
    return len(CASES)


def _sdf_pdrs(**kw) -> tuple[PR.Pdr, PR.Pdr]:
    sdf = (PR.SdfFilter(flow=PR.flow_description(17, "any", str(PORT))),)
    return (PR.Pdr(uplink=True, precedence=PRECEDENCE, sdf=sdf, **kw),
            PR.Pdr(uplink=False, precedence=PRECEDENCE, sdf=sdf, **kw))


def _streams(upf: Upf, s: TestSession, size: int, pps: float, total: int, sdf: bool,
             v6: bool = False) -> dict[str, tuple]:
    """{name: (port, stream, pg)}: the default streams (ul, dl: UDP 40000 -> 5001 both ways); with
    sdf, the ones the SDF filter matches (ul_sdf: the UE to PORT; dl_sdf: from PORT to the UE); with
    v6, the same as ul and dl in IPv6 (ul6, dl6: from and to the UE's address in its /64)."""
    out = {"ul": upf.frame_stream(0, upf.ul_frame(s, size), s.pg_ul, pps, total) + (s.pg_ul,),
           "dl": upf.frame_stream(1, upf.dl_frame(s, size), s.pg_dl, pps, total) + (s.pg_dl,)}
    if v6:
        pg_u, pg_d = PG6_BASE + 2 * s.index, PG6_BASE + 2 * s.index + 1
        out["ul6"] = upf.frame_stream(0, upf.ul6_frame(s, size), pg_u, pps, total) + (pg_u,)
        out["dl6"] = upf.frame_stream(1, upf.dl6_frame(s, size), pg_d, pps, total) + (pg_d,)
    if sdf:
        pg_u, pg_d = PG_BASE + 2 * s.index, PG_BASE + 2 * s.index + 1
        out["ul_sdf"] = upf.frame_stream(0, upf.ul_frame(s, size, inner_dport=PORT), pg_u, pps, total) + (pg_u,)
        out["dl_sdf"] = upf.frame_stream(1, upf.dl_frame(s, size, sport=PORT, dport=40000), pg_d, pps,
                                         total) + (pg_d,)
    return out


def _fields_pdrs(upf: Upf, i: int) -> tuple[PR.Pdr, ...]:
    """The fields session's SDF PDRs (FIELDS, each way, uplink first), each with its own FAR and URR:
    URR ID URR_ID + 1 + k for the k-th (fields_urr)."""
    sdf = {"range": PR.SdfFilter(flow=PR.flow_description(17, upf.server(i), RANGE)),
           "tos": PR.SdfFilter(tos=EF),
           "addr6": PR.SdfFilter(flow=PR.flow_description(17, upf.server6(i + 1))),
           "flow_label": PR.SdfFilter(flow_label=FLOW_LABEL)}
    pdrs = []
    for name, prec in FIELDS:
        pdrs += [PR.Pdr(uplink=True, precedence=prec, sdf=(sdf[name],), urr=R.UrrSpec()),
                 PR.Pdr(uplink=False, precedence=prec, sdf=(sdf[name],), urr_of=len(pdrs))]
    return tuple(pdrs)


def fields_urr(name: str | None) -> int:
    """The URR ID of the fields session's PDRs name (None: the defaults'), one URR for both
    directions (5 in the session: Open5GS 8f25f3b accepts a session of 9 URRs, one per PDR, and then
    cannot build its Session Deletion Response, `No TLV length - [Packet Rate Status]`, and never
    answers it)."""
    if name is None:
        return PR.URR_ID
    return PR.URR_ID + 1 + 2 * [n for n, _ in FIELDS].index(name)


def _field_streams(upf: Upf, s: TestSession, size: int, pps: float, total: int) -> dict[str, tuple]:
    """{name: (port, stream, pg)} of the fields session: FIELD_STREAMS each way (ul_NAME, dl_NAME)."""
    out, pg = {}, PG_FIELDS_BASE
    for name in FIELD_STREAMS:
        for d in ("ul", "dl"):
            up = d == "ul"
            if name == "plain":
                f = upf.ul_frame(s, size) if up else upf.dl_frame(s, size)
            elif name in ("range", "tos", "range_tos"):
                port = RANGE_PORT if name != "tos" else 5001
                tos = EF[0] if name != "range" else 0
                f = (upf.ul_frame(s, size, inner_dport=port, tos=tos) if up else
                     upf.dl_frame(s, size, sport=port, dport=40000, tos=tos))
            else:
                kw = {"server": s.index + 1} if name == "addr6" else {"fl": FLOW_LABEL} if name == "flow_label" else {}
                f = upf.ul6_frame(s, size, **kw) if up else upf.dl6_frame(s, size, **kw)
            out[f"{d}_{name}"] = upf.frame_stream(0 if up else 1, f, pg, pps, total) + (pg,)
            pg += 1
    return out


def _urr_why(got: dict[int, dict], expect: dict[int, int], direction: str, l3: int) -> list[str]:
    """Why the URRs' sums (got, _urr_sums) are not expect ({URR ID: packets matched of l3 octets})
    in direction."""
    x = "ul" if direction == "uplink" else "dl"
    why = []
    for urr, n in expect.items():
        u = got.get(urr)
        if u is None:
            if n:
                why.append(f"URR {urr}: no usage reported, {n} {direction} packets matched its PDR")
            continue
        if u[f"{x}_bytes"] != n * l3:
            why.append(f"URR {urr}: {u[f'{x}_bytes']} {direction} octets reported, {n} packets of "
                       f"{l3} octets ({n * l3}) matched its PDR")
        if u[f"{x}_packets"] is not None and u[f"{x}_packets"] != n:
            why.append(f"URR {urr}: {u[f'{x}_packets']} {direction} packets reported, {n} matched its PDR")
    return why


def _icmp6_type(frame: bytes, ip6: int | None) -> int | None:
    """The ICMPv6 type of the IPv6 packet at offset ip6 of frame when its next header is ICMPv6 (no
    extension header), else None."""
    if ip6 is None or len(frame) < ip6 + 41 or frame[ip6] >> 4 != 6 or frame[ip6 + 6] != 58:
        return None
    return frame[ip6 + 40]


def rs_fates(n3: list[bytes], n6: list[bytes], gnb_teid: int, cp_teid: int, qfi: int | None) -> dict:
    """Where the Router Solicitations went, from the frames the UPF sent on N3 (n3) and N6 (n6):
    on_n6 (an untagged IPv6 frame with an ICMPv6 133), to_cp (a G-PDU with TEID cp_teid carrying one),
    ra (a G-PDU to the UE's tunnel, gnb_teid, carrying a Router Advertisement) and ra_without_psc
    (of those, without a PDU Session Container of QFI qfi, when the session has one)."""
    out = {"on_n6": 0, "to_cp": 0, "ra": 0, "ra_without_psc": 0}
    for f in n6:
        if f[12:14] == b"\x86\xdd" and _icmp6_type(f, 14) == ICMPV6_RS:
            out["on_n6"] += 1
    for f in n3:
        c = C.classify(f)
        if c is None:
            continue
        t = _icmp6_type(f, c["inner"])
        if c["teid"] == cp_teid and t == ICMPV6_RS:
            out["to_cp"] += 1
        elif c["teid"] == gnb_teid and t == ICMPV6_RA:
            out["ra"] += 1
            if qfi is not None and c["psc_qfi"] != qfi:
                out["ra_without_psc"] += 1
    return out


def rs_why(fates: dict, sent: int, qfi: int | None, cp_teid: int) -> list[str]:
    """Why the Router Solicitations' fates fail the cp-function case (rs_fates; sent of them)."""
    why = []
    if fates["on_n6"]:
        why.append(f"{fates['on_n6']} of {sent} Router Solicitations forwarded on N6: the default PDR took "
                   "ICMPv6 the CP function's PDR should")
    if not fates["ra"] and fates["to_cp"] != sent:
        why.append(f"{fates['to_cp']} of {sent} Router Solicitations in the CP function's tunnel (TEID "
                   f"{cp_teid:#x}), none answered with a Router Advertisement")
    if fates["ra_without_psc"]:
        why.append(f"{fates['ra_without_psc']} of {fates['ra']} Router Advertisements without the PDU Session "
                   f"Container of QFI {qfi} (the UE's QoS flow: Open5GS #4804)")
    return why


def _urr_sums(reports: list[R.Usage]) -> dict[int, dict]:
    """{URR ID: {ul_bytes, dl_bytes, ul_packets, dl_packets}} of reports added up (each carries the
    usage since the previous one of its URR); a figure the UPF did not report is None."""
    out: dict[int, dict] = {}
    for u in reports:
        o = out.setdefault(u.urr, {"ul_bytes": 0, "dl_bytes": 0, "ul_packets": 0, "dl_packets": 0})
        for k, v in (("ul_bytes", u.volume[1]), ("dl_bytes", u.volume[2]), ("ul_packets", u.packets[1]),
                     ("dl_packets", u.packets[2])):
            o[k] = None if v is None or o[k] is None else o[k] + v
    return out


def _premises(upf: Upf, flows: dict, streams: dict[str, tuple], total: int, where: dict) -> list[dict]:
    tx = {name: flows.get(pg, (0, 0))[0] for name, (_, _, pg) in streams.items()}
    out = [C.traffic_as_asked(tx, total)]
    lost = {}
    for d, port in (("uplink", 0), ("downlink", 1)):
        n, at = C.lost_before_policer(where, d, upf.lab.ports[port].ifname)
        if n:
            lost.update({f"{d} {k}": v for k, v in at.items()})
    # lost where the UPF's rules never saw them (the DUT's receive ring, its sockets' buffers): says
    # nothing of how it classifies
    out.append(C.premise("nothing lost before the UPF's rules", not lost,
                         "lost before the UPF's rules: " + ", ".join(f"{k} {v}" for k, v in lost.items()),
                         lost=lost))
    return out


def _whole(flows: dict, streams: dict[str, tuple], names) -> list[str]:
    """Why each named stream was not forwarded whole (received != sent)."""
    why = []
    for name in names:
        tx, rx = flows.get(streams[name][2], (0, 0))
        if rx != tx:
            why.append(f"{name}: {rx} of {tx} packets forwarded")
    return why


def _case(case_id: str, criterion: str, why: list[str], premises: list[dict], where: dict, **figures) -> dict:
    """A case with its verdict; where: what the UPF's counters and the lab's rings said of the trial's
    packets (Upf.loss_delta), so that a packet not forwarded is found where it went."""
    c = {"case_id": f"rules-{case_id}", "kind": "rules", "criterion": criterion,
         "verdict": "fail" if why else "pass", "where": where, **figures}
    if why:
        c["why"] = "; ".join(why)
    return C.decide(c, premises)


def _unsupported(names, e: Unsupported) -> list[dict]:
    return [{"case_id": f"rules-{n}", "kind": "rules", "verdict": "not supported", "why": str(e), "cause": e.cause}
            for n in names]


def _trial(upf: Upf, streams: dict) -> tuple[dict, dict]:
    """Run every stream of streams ({key: (port, stream, pg)}) at once to its end: (flows, where)."""
    snap = upf.loss_snapshot()
    ports = upf.start([(p, st) for p, st, _ in streams.values()])
    upf.wait(ports)
    time.sleep(SETTLE_S)
    return upf.flow(), upf.loss_delta(snap, upf.loss_snapshot())


def _establish(upf: Upf, cases, names, i: int, **kw) -> TestSession | None:
    """Session i with kw's rules (UE, TEID, gNB and N6 server i), or None with its cases "not
    supported" (the UPF's Cause)."""
    return _establish_rules(upf, cases, names, i, upf.rules(i, **kw))


def _establish_rules(upf: Upf, cases, names, i: int, rules) -> TestSession | None:
    """_establish with the rules given."""
    try:
        return upf.establish(rules, index=i)
    except Unsupported as e:
        cases.extend(_unsupported(names, e))
        return None
    except PfcpTimeout as e:        # a UPF must answer, if only to reject (29.244 7.2.2.4)
        x = getattr(e, "exchange", None) or {}
        n_ok = upf.established
        # the N4 path worked: the UPF answered this run's earlier establishments
        prem = [C.premise("N4 answered before", n_ok > 0, "no establishment of this run was answered",
                          sessions_established=n_ok)]
        for n in names:
            cases.append(C.decide({"case_id": f"rules-{n}", "kind": "rules", "verdict": "fail", "exchange": x,
                                   "criterion": "the Session Establishment Request answered",
                                   "why": f"no answer to the {x.get('message', 'session establishment request')} "
                                          f"after {x.get('sends', '?')} sends: the session's rules were neither "
                                          "taken nor refused"}, prem))
        return None


def run(upf: Upf, pps: float = PPS, total: int = TOTAL, size: int = SIZE) -> list[dict]:
    """Three trials: the plain sessions (OHR forms, two sessions); the second of those alone after the
    first's deletion; then the SDF sessions beside a plain one established after them. The SDF
    sessions come last, so that a UPF that rejects them (and what that rejection does to it) cannot
    decide the plain cases."""
    l3 = {"uplink": inner_len(size, "uplink"), "downlink": inner_len(size, "downlink")}
    cases = upf.cases()

    def streams_of(group_sessions: dict[str, TestSession], sdf=()) -> dict:
        return {(g, name): st for g, s in group_sessions.items()
                for name, st in _streams(upf, s, size, pps, total, sdf=g in sdf, v6=g == "ipv6").items()}

    def of(streams: dict, group: str) -> dict[str, tuple]:
        return {name: st for (g, name), st in streams.items() if g == group}

    # 1. the plain sessions, all at once
    plain = {g: _establish(upf, cases, names, i, **kw) for g, names, i, kw in (
        ("ohr-0", ("ohr-0",), 60, {"ohr": PR.OHR_GTPU_UDP_IPV4}),
        ("ohr-6", ("ohr-6",), 61, {"ohr": PR.OHR_GTPU_UDP_IP}),
        ("first", ("second",), 62, {}),
        ("ipv6", ("ipv6",), 67, {"ue6": IPV6_PREFIX}))}
    plain = {g: s for g, s in plain.items() if s is not None}
    second = _establish(upf, cases, (), 63) if "first" in plain else None
    if second is not None:
        plain["second"] = second
    if plain:
        st1 = streams_of(plain)
        flows, where = _trial(upf, st1)
        for group, form in (("ohr-0", "GTP-U/UDP/IPv4"), ("ohr-6", "GTP-U/UDP/IP")):
            if group in plain:
                st = of(st1, group)
                cases.append(_case(group, f"Outer Header Removal {group[4:]} ({form}): both ways forwarded whole",
                                   _whole(flows, st, ("ul", "dl")), _premises(upf, flows, st, total, where),
                                   where, frame_size=size))
                upf.delete(plain[group])
        if "ipv6" in plain:
            st = of(st1, "ipv6")
            cases.append(_case("ipv6", "an IPv4v6 session: its IPv4 and its IPv6 packets forwarded whole, both ways",
                               _whole(flows, st, ("ul", "dl", "ul6", "dl6")), _premises(upf, flows, st, total, where),
                               where, frame_size=size, ue6=plain["ipv6"].rules.ue6))
            upf.delete(plain["ipv6"])
    # 2. the second session alone, after the first's deletion
    if second is not None:
        st0, st1b = of(st1, "first"), of(st1, "second")
        why = [f"first session: {w}" for w in _whole(flows, st0, ("ul", "dl"))]
        why += [f"second session: {w}" for w in _whole(flows, st1b, ("ul", "dl"))]
        prem = _premises(upf, flows, {**{f"a_{k}": v for k, v in st0.items()},
                                      **{f"b_{k}": v for k, v in st1b.items()}}, total, where)
        upf.delete(plain["first"])
        again = _streams(upf, second, size, pps, total, sdf=False)
        flows2, where2 = _trial(upf, again)
        prem += _premises(upf, flows2, again, total, where2)
        why += [f"second session after the first's deletion: {w}" for w in _whole(flows2, again, ("ul", "dl"))]
        cases.append(_case("second", "two sessions forward independently; the second still after the first's "
                           "deletion", why, prem, {"both": where, "second alone": where2}, frame_size=size))
        upf.delete(second)
    elif "first" in plain:
        upf.delete(plain["first"])

    # 3. the SDF sessions (the UPF may reject them), and a plain session established after them
    n_rep = len(upf.node.reports)
    sdf = {g: _establish(upf, cases, names, i, **kw) for g, names, i, kw in (
        ("precedence", ("precedence-uplink", "precedence-downlink"), 64,
         {"urr": R.UrrSpec(), "pdrs": _sdf_pdrs(urr=R.UrrSpec())}),
        ("qer", ("qer",), 65, {"pdrs": _sdf_pdrs(gate=(False, False))}))}
    try:
        r1 = upf.rules_n3v6(70, ohr=PR.OHR_GTPU_UDP_IPV6)
    except ValueError:               # the UPF has no N3 IPv6 address
        r1 = None
    if r1 is None:
        cases.append({"case_id": "rules-ohr-1", "kind": "rules", "verdict": "not supported",
                      "why": "the UPF has no N3 IPv6 address (dut.pfcp.n3)", "cause": None})
    else:
        sdf["ohr-1"] = _establish_rules(upf, cases, ("ohr-1",), 70, r1)
    rejected = [g for g, s in sdf.items() if s is None]
    sdf = {g: s for g, s in sdf.items() if s is not None}
    cp_teid = CP_TEID + 68
    cp = _establish(upf, cases, ("cp-function",), 68, ue6=CP_PREFIX, qfi=CP_QFI, pdrs=(
        PR.Pdr(uplink=True, precedence=PRECEDENCE, sdf=(PR.SdfFilter(flow=CP_FLOW),),
               to_cp=(upf.rules(68).gnb, cp_teid)),))
    if cp is None:
        rejected.append("cp-function")
    after = _establish(upf, cases, ("after",), 66)
    if after is not None:
        sdf["after"] = after
    if not sdf:
        if cp is not None:
            cases.append(_cp_function(upf, cp, cp_teid, size, pps, total))
        _spi(upf, cases, size, pps, total)
        _fields(upf, cases, size, pps, total, l3)
        return cases
    st3 = streams_of(sdf, sdf=("precedence", "qer"))
    flows, where = _trial(upf, st3)
    if "precedence" in sdf:
        s = sdf["precedence"]
        st = of(st3, "precedence")
        upf.delete(s)
        reports = upf.reports_for(s, n_rep) + s.usage
        got = _urr_sums(reports)
        prem = _premises(upf, flows, st, total, where)
        # URR 1: the default PDRs (both ways); 2: the uplink SDF PDR only; 3: the downlink SDF PDR only
        rx = {name: flows.get(st[name][2], (0, 0))[1] for name in ("ul", "dl", "ul_sdf", "dl_sdf")}
        expect = {"uplink": {PR.URR_ID: rx["ul"], PR.URR_ID + 1: rx["ul_sdf"], PR.URR_ID + 2: 0},
                  "downlink": {PR.URR_ID: rx["dl"], PR.URR_ID + 1: 0, PR.URR_ID + 2: rx["dl_sdf"]}}
        for d, default, match in (("uplink", "ul", "ul_sdf"), ("downlink", "dl", "dl_sdf")):
            why = _whole(flows, st, (default, match)) + _urr_why(got, expect[d], d, l3[d])
            cases.append(_case(f"precedence-{d}", f"the SDF PDR (precedence {PRECEDENCE}) takes UDP port {PORT} "
                               f"before the default (precedence {PR.PRECEDENCE_DEFAULT}): each URR counts "
                               "its PDR's packets only", why, prem, where,
                               usage={str(k): v for k, v in got.items()}, reports=[u.as_dict() for u in reports],
                               frame_size=size, direction=d))
    if "ohr-1" in sdf:
        st = of(st3, "ohr-1")
        cases.append(_case("ohr-1", "Outer Header Removal 1 (GTP-U/UDP/IPv6, N3 over IPv6): both ways forwarded "
                           "whole", _whole(flows, st, ("ul", "dl")), _premises(upf, flows, st, total, where),
                           where, frame_size=size, n3=sdf["ohr-1"].rules.n3, gnb=sdf["ohr-1"].rules.gnb))
        upf.delete(sdf["ohr-1"])
    if "qer" in sdf:
        st = of(st3, "qer")
        why = _whole(flows, st, ("ul", "dl"))
        for name in ("ul_sdf", "dl_sdf"):
            tx, rx = flows.get(st[name][2], (0, 0))
            if rx:
                why.append(f"{name}: {rx} of {tx} packets forwarded through its PDR's closed gate")
        cases.append(_case("qer", "the SDF PDR's QER (gate closed) stops its packets only", why,
                           _premises(upf, flows, st, total, where), where, frame_size=size))
        upf.delete(sdf["qer"])
    if after is not None:
        st = of(st3, "after")
        cases.append(_case("after", "a session established after the SDF sessions"
                           + (f" (rejected: {', '.join(rejected)})" if rejected else "") + " forwards whole",
                           _whole(flows, st, ("ul", "dl")), _premises(upf, flows, st, total, where), where,
                           frame_size=size, rejected_before=rejected))
        upf.delete(after)
    if cp is not None:
        cases.append(_cp_function(upf, cp, cp_teid, size, pps, total))
    _spi(upf, cases, size, pps, total)
    _fields(upf, cases, size, pps, total, l3)
    return cases


def _spi(upf: Upf, cases, size: int, pps: float, total: int) -> None:
    """The spi case, in its own trial: session 71 with an ESP SDF PDR each way (SPI), its URR
    URR_ID + 1 for both; ESP streams with SPI (its PDR's) and SPI_OTHER (the defaults', URR_ID)."""
    n_rep = len(upf.node.reports)
    sdf = (PR.SdfFilter(flow=PR.flow_description(ESP, "any"), spi=SPI),)
    s = _establish(upf, cases, ("spi",), 71, urr=R.UrrSpec(),
                   pdrs=(PR.Pdr(uplink=True, precedence=PRECEDENCE, sdf=sdf, urr=R.UrrSpec()),
                         PR.Pdr(uplink=False, precedence=PRECEDENCE, sdf=sdf, urr_of=0)))
    if s is None:
        return
    st, pg = {}, PG_SPI_BASE
    l3 = {"ul": inner_len(size, "uplink"), "dl": inner_len(size, "downlink")}
    for name, spi in (("spi", SPI), ("other", SPI_OTHER)):
        for d in ("ul", "dl"):
            f = upf.ul_frame(s, size, l4=ESP, spi=spi) if d == "ul" else upf.dl_frame(s, size, l4=ESP, spi=spi)
            st[f"{d}_{name}"] = upf.frame_stream(0 if d == "ul" else 1, f, pg, pps, total) + (pg,)
            pg += 1
    flows, where = _trial(upf, st)
    upf.delete(s)
    reports = upf.reports_for(s, n_rep) + s.usage
    got = _urr_sums(reports)
    rx = {name: flows.get(x[2], (0, 0))[1] for name, x in st.items()}
    why = _whole(flows, st, list(st))
    expect = {}
    for d, x in (("uplink", "ul"), ("downlink", "dl")):
        expect[d] = {PR.URR_ID: rx[f"{x}_other"], PR.URR_ID + 1: rx[f"{x}_spi"]}
        why += _urr_why(got, expect[d], d, l3[x])
    cases.append(_case("spi", f"an SDF filter with a Security Parameter Index (permit out {ESP} from any to "
                       f"assigned, SPI {SPI:#x}) takes ESP with that SPI to its PDR, ESP with another "
                       f"({SPI_OTHER:#x}) to the default: each URR counts its PDR's packets only, every "
                       "stream forwarded whole", why, _premises(upf, flows, st, total, where), where,
                       usage={str(k): v for k, v in got.items()},
                       expected_packets={d: {str(k): v for k, v in e.items()} for d, e in expect.items()},
                       reports=[u.as_dict() for u in reports], frame_size=size, spi=SPI))


def _fields(upf: Upf, cases, size: int, pps: float, total: int, l3: dict) -> None:
    """The fields session, established last (eUPF a8d774a cannot decode its request and never
    answers it) and in its own trial (its 14 streams beside the SDF trial's overflowed Open5GS's N3
    socket buffer): the fields-uplink and fields-downlink cases."""
    n_rep = len(upf.node.reports)
    s = _establish(upf, cases, ("fields-uplink", "fields-downlink"), 69, ue6=FIELDS_PREFIX, urr=R.UrrSpec(),
                   pdrs=_fields_pdrs(upf, 69))
    if s is None:
        return
    st = _field_streams(upf, s, size, pps, total)
    flows, where = _trial(upf, st)
    upf.delete(s)
    reports = upf.reports_for(s, n_rep) + s.usage
    got = _urr_sums(reports)
    prem = _premises(upf, flows, st, total, where)
    for d, x in (("uplink", "ul"), ("downlink", "dl")):
        expect = {fields_urr(n): 0 for n in [None] + [n for n, _ in FIELDS]}
        for name, (_, pdr) in FIELD_STREAMS.items():
            expect[fields_urr(pdr)] += flows.get(st[f"{x}_{name}"][2], (0, 0))[1]
        why = _whole(flows, st, [f"{x}_{n}" for n in FIELD_STREAMS]) + _urr_why(got, expect, d, l3[d])
        cases.append(_case(f"fields-{d}", "each SDF filter field (address and port range, ToS/Traffic Class, "
                           "IPv6 address, Flow Label) takes its packets to its PDR, by precedence: each URR "
                           "counts its PDR's packets only", why, prem, where,
                           usage={str(k): v for k, v in got.items()},
                           expected_packets={str(k): v for k, v in expect.items()},
                           reports=[u.as_dict() for u in reports], frame_size=size, direction=d))


def _cp_function(upf: Upf, s: TestSession, cp_teid: int, size: int, pps: float, total: int) -> dict:
    """The cp-function case's own trial: the session's IPv6 UDP both ways and RS_TOTAL Router
    Solicitations, everything the UPF sends on N3 and N6 captured (the Solicitations carry no flow
    stats: the engine's trailer would overwrite their last octets and not fix an ICMPv6 checksum)."""
    st = {k: v for k, v in _streams(upf, s, size, pps, total, sdf=False, v6=True).items() if k in ("ul6", "dl6")}
    rs = upf.frame_stream(0, upf.rs_frame(s), None, RS_PPS, RS_TOTAL)
    limit = 2 * (total + RS_TOTAL)
    caps = [upf.client.start_capture(rx_ports=[p], limit=limit)["id"] for p in (0, 1)]
    snap = upf.loss_snapshot()
    ports = upf.start([(p, x) for p, x, _ in st.values()] + [rs])
    upf.wait(ports)
    time.sleep(SETTLE_S)
    flows, where = upf.flow(), upf.loss_delta(snap, upf.loss_snapshot())
    stats = upf.client.get_stats()
    n3, n6 = ([data for _, data, _ in upf.client.stop_capture(c)] for c in caps)
    rs_sent = stats.get(0, {}).get("opackets", 0) - flows.get(st["ul6"][2], (0, 0))[0]
    lost = {p: stats.get(p, {}).get("capture_lost", 0) for p in (0, 1)}
    fates = rs_fates(n3, n6, s.rules.gnb_teid, cp_teid, s.rules.qfi)
    prem = _premises(upf, flows, st, total, where)
    prem.append(C.premise("Router Solicitations sent as asked", rs_sent == RS_TOTAL,
                          f"{rs_sent} of {RS_TOTAL} Router Solicitations sent", rs_sent=rs_sent))
    prem.append(C.premise("capture complete", not any(lost.values()),
                          "the capture lost " + ", ".join(f"{n} frames on port {p}" for p, n in lost.items() if n),
                          capture_lost=lost))
    why = _whole(flows, st, ("ul6", "dl6")) + rs_why(fates, rs_sent, s.rules.qfi, cp_teid)
    upf.delete(s)
    return _case("cp-function", f"ICMPv6 to the CP function ({CP_FLOW}, precedence {PRECEDENCE}): the UE's other "
                 "IPv6 packets forwarded whole, no Router Solicitation on N6, each in the CP function's tunnel "
                 "or answered with a Router Advertisement carrying the PDU Session Container",
                 why, prem, where, frame_size=size, qfi=s.rules.qfi, ue6=s.rules.ue6, rs_sent=rs_sent,
                 router_solicitations=fates, cp_teid=cp_teid)
