"""One UPF in the namespace lab, as the behaviour tests drive it: the lab its config describes
(the PGW-U with its agent `pgwu pfcp`, or an external UPF such as eUPF), gtplab's PFCP node
associated with it (answering its heartbeats and reports, as for `gtplab pfcp`), the embedded
engine on the lab's two ports, and the test sessions (rules.py) one PFCP message at a time.

    with Upf.open(labconfig.load("embedded-pfcp")) as upf:
        s = upf.establish(upf.rules(0, mbr_kbps=(10_000, 10_000)))    # Unsupported: the UPF's Cause
        upf.start([upf.ul_stream(s, 512, 2000)], duration=2)
        ...
        usage = upf.delete(s)

Every session a test makes is deleted by close(), which also ends the association and the lab.
A rejection by the UPF is Unsupported (its Cause and offending IE), never a timeout: the test
kinds report it as "not supported" from what the UPF answered.
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import os
import subprocess
import time
from dataclasses import dataclass, field

from gtplab.bounded import http_get
from gtplab.dut.external import ExternalDut
from gtplab.dut.local import LocalDut
from gtplab.dut.pfcp import EmbeddedAgent, in_lab, provisioner
from gtplab.errors import UserError
from gtplab.gtpu import packets
from gtplab.kernel.netns import run_in
from gtplab.measure.conservation import DutDelta
from gtplab.pfcp import messages as m
from gtplab.pfcp import provision as prov
from gtplab.pfcp.errors import PfcpError, PfcpRejected, PfcpTimeout
from gtplab.traffic import backend
from gtplab.traffic.engine.capture import capture_clock_ns
from gtplab.upftests import rules as R

# L3 octets of the user's IP packet in a frame of `size` bytes on the wire (incl. FCS): what
# TS 29.244 measures (bit rates and volumes of the user plane's IP packets, not the GTP-U tunnel)
ETH_FCS = 14 + 4
GTPU_OUTER = 20 + 8 + 8           # IPv4 + UDP + GTP-U header (no extension)
PSC_EXT = 8                       # the optional-fields word + a 4-byte PDU Session Container


API_MAX_BYTES = 16 << 20          # eUPF's REST API: its session list, some 100 B a session (gtplab.bounded)


def _get(url: str) -> str:
    return http_get(url, API_MAX_BYTES, 5.0, what=f"UPF API {url}").decode()


class Unsupported(Exception):
    """The UPF rejected what a test asked for (its Cause, offending IE): "not supported"."""

    def __init__(self, what: str, cause: int | None, offending: int | None = None):
        self.what, self.cause, self.offending = what, cause, offending
        off = f", offending IE type {offending}" if offending is not None else ""
        super().__init__(f"{what}: rejected with cause {m.cause_name(cause)}{off}")


class Cases(list):
    """A test kind's cases: each one added (append, extend, +=) is passed to on_case as it is added."""

    def __init__(self, on_case=None):
        super().__init__()
        self.on_case = on_case

    def append(self, c: dict) -> None:
        super().append(c)
        if self.on_case is not None:
            self.on_case(c)

    def extend(self, cs) -> None:
        for c in cs:
            self.append(c)

    def __iadd__(self, cs):
        self.extend(cs)
        return self


@dataclass
class TestSession:
    index: int
    rules: R.Rules
    cp_seid: int
    up_seid: int | None = None
    usage: list = field(default_factory=list)       # R.Usage from answers (modification, deletion)

    @property
    def pg_ul(self) -> int:
        return 2 * self.index

    @property
    def pg_dl(self) -> int:
        return 2 * self.index + 1


def _ue6_addr(prefix: str) -> str:
    """The UE's IPv6 address the tests use in its /64: interface identifier 1."""
    return str(ipaddress.IPv6Network(prefix).network_address + 1)


def _server6(a, i: int) -> str:
    """Server 1 + i % 200 of the lab's N6 IPv6 prefix (pdn6_net), as a.pdn(i % 200) is for IPv4."""
    return str(ipaddress.IPv6Network(a.pdn6_net).network_address + 1 + i % 200)


def inner_len(frame_size: int, direction: str, qfi: bool = False, n3: str = "4") -> int:
    """The L3 length of the UE's packet in a test frame: uplink frames are sent as G-PDUs of
    frame_size (the UE's packet is what the UPF forwards on N6; over N3 IPv6 the outer header is 20
    octets longer), downlink frames as plain IP of frame_size on N6."""
    if direction == "downlink":
        return frame_size - ETH_FCS
    return frame_size - ETH_FCS - GTPU_OUTER - (20 if n3 == "6" else 0) - (PSC_EXT if qfi else 0)


class Upf:
    """See the module doc."""

    n3 = "4"                            # "6": rules() put every session on N3 over IPv6 (use_n3, --n3 6)

    def __init__(self, cfg, lab_name: str | None = None):
        self.cfg = cfg
        pc = self.check_config(cfg)
        self.name = self.name_of(cfg)
        self.on_case = None             # called with each case as a test kind finishes it (cases())
        self.be = backend.choose(cfg, kind="local", lab=lab_name).open()
        self.agent = None
        self.prov = None
        self.sessions: dict[int, TestSession] = {}
        self.established = 0                            # sessions this run established (answered)
        self._by_cp: dict[int, TestSession] = {}
        self._next = 0
        self._closed, self._warnings = False, []
        self.probe = None
        try:
            self.lab, self.client = self.be.lab, self.be.client
            self.probe = ExternalDut(self.lab, cfg) if self.lab.dut_mode == "external" else LocalDut(self.lab)
            pcfg, netns = in_lab(prov.parse_config(pc, f"lab config {cfg.path}"), self.lab)
            upf = None
            if pcfg.upf == prov.EMBEDDED:
                self.agent = EmbeddedAgent(self.lab.pin_dir)
                upf = self.agent.addr
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.prov = provisioner(dataclasses.replace(pcfg, choose=False), netns, upf)
                    break
                except PfcpError:
                    if time.monotonic() > deadline:        # an external UPF may still be starting
                        raise
                    time.sleep(0.5)
            self.pcfg = self.prov.cfg
            self.node = self.prov.node
            prev_up, prev_owner = self.node.up_seid_of, self.node.seid_owner
            self.node.up_seid_of = lambda cp: (self._by_cp[cp].up_seid if cp in self._by_cp else
                                               (prev_up(cp) if prev_up else None))
            self.node.seid_owner = lambda cp: (self._by_cp.get(cp) or (prev_owner(cp) if prev_owner else None))
            self._seid_base = ((os.getpid() & 0xFFFF) << 40) | (0xA5 << 32)
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, cfg, lab_name: str | None = None) -> "Upf":
        return cls(cfg, lab_name)

    @staticmethod
    def check_config(cfg) -> dict:
        """The lab config's dut.pfcp; UserError when the config does not provision over PFCP (checked
        before anything is built)."""
        pc = (cfg.dut or {}).get("pfcp")
        if cfg.provision != "pfcp" or not pc:
            raise UserError(f"lab config {cfg.path}: the UPF tests provision over PFCP (dut.provision: pfcp, "
                            "dut.pfcp); e.g. embedded-pfcp (the PGW-U) or embedded-eupf")
        return pc

    @staticmethod
    def name_of(cfg) -> str:
        """What the results call the UPF: the lab config's dut.name, else PGW-U or the config's name."""
        return cfg.dut_name or ("PGW-U" if cfg.dut_mode == "pgwu" else cfg.name)

    def cases(self) -> "Cases":
        """The list a test kind collects its cases in: each case added is passed to on_case at once
        (the CLI appends it to cases.jsonl), so a run cut short keeps every case it finished."""
        return Cases(self.on_case)

    def __enter__(self) -> "Upf":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sessions ------------------------------------------------------------------------------

    def rules(self, i: int, **kw) -> R.Rules:
        """Session i's rules in the lab's addressing (UE i, TEID i, gNB i), with kw (mbr_kbps, gate,
        qfi, urr, ...); with n3 "6" (--n3 6) over IPv6 (rules_n3v6)."""
        a = self.lab.addressing
        if self.n3 == "6" and "gnb" not in kw:
            return self.rules_n3v6(i, **kw)
        return R.Rules(**{"ue": a.ue(i), "teid": a.local_teid(i), "n3": self.pcfg.n3, "gnb": a.sgw(i),
                          "gnb_teid": a.sgw_teid(i), **kw})

    def use_n3(self, n3: str) -> None:
        """Every session from now on over N3 family n3 ("6": GTP-U over IPv6, rules_n3v6). With an
        external UPF over IPv6 its DUT ports finish their checksums in software (ethtool -K tx off),
        as gtplab conformance's runner does: a veth has no hardware, and with tx checksum offload a
        UDP datagram the UPF's kernel sends reaches the capture with the pseudo-header sum in its
        checksum, which the IPv6 criteria check (criteria.udp6_ok)."""
        self.n3 = n3
        if n3 == "6" and self.lab.dut_mode == "external":
            for p in self.lab.ports:
                subprocess.run(["ip", "netns", "exec", self.lab.dut_ns, "ethtool", "-K", p.dut_ifname, "tx", "off"],
                               check=True, capture_output=True)

    def gnb(self, i: int) -> str:
        """gNB i's address in the run's N3 family (a handover's target)."""
        a = self.lab.addressing
        return a.sgw6(i) if self.n3 == "6" else a.sgw(i)

    def rules_n3v6(self, i: int, **kw) -> R.Rules:
        """rules(i, kw) with GTP-U over IPv6: the UPF's N3 IPv6 address (F-TEID V6) and gNB i's
        IPv6 address (Outer Header Creation GTP-U/UDP/IPv6). ValueError when the UPF has no N3 IPv6
        address."""
        if not self.pcfg.n3_6:
            raise ValueError("no N3 IPv6 address")
        return self.rules(i, **{"n3": self.pcfg.n3_6, "gnb": self.lab.addressing.sgw6(i), **kw})

    def _exchange(self, data: bytes, seq: int, ctx) -> m.Scanned:
        """node.request; a PfcpError raised carries `exchange`: the request (message name, sequence
        number), how many times it was sent and what came back ("no answer", or the Cause), for
        run.json."""
        try:
            return self.node.request(data, seq, ctx=ctx)
        except PfcpError as e:
            if getattr(e, "exchange", None) is None:
                x = {"message": m.message_name(data[1]), "seq": seq}
                if isinstance(e, PfcpTimeout):
                    x.update(sends=self.node.timers.n1 + 1, answer="no answer")
                elif isinstance(e, PfcpRejected) and e.cause is not None:
                    x.update(answer=f"cause {m.cause_name(e.cause)}", cause=e.cause)
                else:
                    x.update(answer=str(e))
                e.exchange = x
            raise

    def _request(self, data: bytes, seq: int, what: str, s: TestSession | None) -> m.Scanned:
        self.node.check()
        r = self._exchange(data, seq, s.rules.ue if s else None)
        if r.cause != m.CAUSE_ACCEPTED:
            raise Unsupported(what, r.cause, r.offending_ie)
        return r

    def establish(self, r: R.Rules, index: int | None = None) -> TestSession:
        i = index if index is not None else self._next
        self._next = max(self._next, i + 1)
        s = TestSession(i, r, self._seid_base + i + 1)
        self._by_cp[s.cp_seid] = s
        seq = self.node.next_seq()
        try:
            got = self._request(R.establishment(seq, self.node.node_id, self.node.addr, s.cp_seid, r), seq,
                                "session establishment", s)
        except BaseException:
            self._by_cp.pop(s.cp_seid, None)
            raise
        if got.up_seid is None:
            raise PfcpError(f"UE {r.ue}: session establishment response without UP F-SEID")
        s.up_seid = got.up_seid
        self.sessions[i] = s
        self.established += 1
        return s

    def modify(self, s: TestSession, what: str = "session modification", **kw) -> m.Scanned:
        """Session Modification (rules.modification's kw); sent_ns / answered_ns: when the request
        left / its answer was read, on the capture's clock (built first: Scapy takes milliseconds)."""
        seq = self.node.next_seq()
        data = R.modification(seq, s.up_seid, **kw)
        with self.node.lock:            # not held by the node's idle thread between now and the send
            self.sent_ns = capture_clock_ns()
            self.answered_ns = None
            r = self._request(data, seq, what, s)
            self.answered_ns = capture_clock_ns()
        s.usage += R.usage_reports(r.raw, time.time())
        return r

    def delete(self, s: TestSession) -> list[R.Usage]:
        """Delete s; returns the Usage Reports of the deletion response."""
        seq = self.node.next_seq()
        try:
            r = self._exchange(R.deletion(seq, s.up_seid), seq, s.rules.ue)
        finally:
            self.sessions.pop(s.index, None)
            self._by_cp.pop(s.cp_seid, None)
        if r.cause != m.CAUSE_ACCEPTED:
            e = PfcpRejected(f"UE {s.rules.ue}: session deletion rejected: cause {m.cause_name(r.cause)}",
                             cause=r.cause, message="session deletion request")
            e.exchange = {"message": "session deletion request", "seq": seq, "answer": f"cause {m.cause_name(r.cause)}",
                          "cause": r.cause}
            raise e
        got = R.usage_reports(r.raw, time.time())
        s.usage += got
        s.up_seid = None
        return got

    def reports_for(self, s: TestSession, since: int = 0) -> list[R.Usage]:
        """The Usage Reports of the UPF's Session Report Requests for s (node.reports[since:])."""
        out = []
        for rep in self.node.reports[since:]:
            if rep.kind != "session" or not rep.raw:
                continue
            _, _, seid, _ = m.parse_header(rep.raw)
            if seid == s.cp_seid:
                out += R.usage_reports(rep.raw, rep.at)
        return out

    # -- traffic -------------------------------------------------------------------------------

    def _stream(self, frame: bytes, pg: int, pps: float, total: int | None = None, burst: int = 1) -> dict:
        """burst > 1: burst frames back to back at the same average rate (the engine's mode.burst)."""
        mode = ({"type": "continuous", "rate": {"type": "pps", "value": pps}} if total is None else
                {"type": "single_burst", "total_pkts": total, "rate": {"type": "pps", "value": pps}})
        if burst > 1:
            mode["burst"] = burst
        return {"mode": mode, "isg": 0.0, "packet": {"binary": base64.b64encode(frame).decode(), "meta": ""},
                "vm": {"instructions": []},
                "flow_stats": {"enabled": True, "stream_id": pg, "rule_type": "stats"}}

    def ul_frame(self, s: TestSession, size: int, **l4) -> bytes:
        """Session s's uplink G-PDU; l4: the UE's packet's inner_sport/inner_dport (UDP 40000 -> 5001)."""
        p0, r = self.lab.ports[0], s.rules
        ext = [packets.pdu_session_container(r.qfi, uplink=True)] if r.qfi is not None else None
        return bytes(packets.gpdu(r.teid, r.ue, self.server(s.index), size=size, outer_src=r.gnb,
                                  outer_dst=self._n3_of(r), src_mac=p0.mac, dst_mac=p0.dut_mac,
                                  **({"ext": ext} if ext else {}), **l4))

    def dl_frame(self, s: TestSession, size: int, **l4) -> bytes:
        """Session s's downlink packet on N6; l4: its sport/dport (UDP 40000 -> 5001)."""
        p1 = self.lab.ports[1]
        return bytes(packets.downlink_ip(s.rules.ue, self.server(s.index), size=size, src_mac=p1.mac,
                                         dst_mac=p1.dut_mac, **l4))

    def _n3_of(self, r: R.Rules) -> str:
        """The UPF's N3 address a session's uplink G-PDUs go to: of its gNB's family."""
        return self.pcfg.n3_6 if ":" in r.gnb else self.pcfg.n3

    def server(self, i: int) -> str:
        """Server i % 200 of the lab's N6 IPv4 servers (session i's: what ul_frame sends to)."""
        return self.lab.addressing.pdn(i % 200)

    def server6(self, i: int) -> str:
        """Server i % 200 of the lab's N6 IPv6 prefix (session i's, as ul6_frame sends to)."""
        return _server6(self.lab.addressing, i)

    def ul6_frame(self, s: TestSession, size: int, server: int | None = None, **kw) -> bytes:
        """Session s's uplink G-PDU carrying an IPv6 packet: from its UE's address ::1 in its /64
        (rules.ue6) to a server of the lab's N6 IPv6 prefix (server6(server), default the session's
        index; UDP 40000 -> 5001); kw: the packet's tc, fl, inner_sport, inner_dport."""
        p0, r = self.lab.ports[0], s.rules
        ext = [packets.pdu_session_container(r.qfi, uplink=True)] if r.qfi is not None else None
        return bytes(packets.gpdu6(r.teid, _ue6_addr(r.ue6), self.server6(s.index if server is None else server),
                                   size=size, outer_src=r.gnb, outer_dst=self._n3_of(r), src_mac=p0.mac,
                                   dst_mac=p0.dut_mac, **({"ext": ext} if ext else {}), **kw))

    def dl6_frame(self, s: TestSession, size: int, server: int | None = None, **kw) -> bytes:
        """Session s's downlink IPv6 packet on N6, to its UE's address ::1 in its /64 from
        server6(server) (default the session's index); kw: tc, fl, sport, dport."""
        p1 = self.lab.ports[1]
        return bytes(packets.downlink_ip6(_ue6_addr(s.rules.ue6), self.server6(s.index if server is None else server),
                                          size, src_mac=p1.mac, dst_mac=p1.dut_mac, **kw))

    def rs_frame(self, s: TestSession) -> bytes:
        """Session s's uplink G-PDU carrying a Router Solicitation (RFC 4861 6.3.7) as a UE sends it
        on a PDU session: from its link-local address (interface identifier 1) to all-routers
        ff02::2, hop limit 255, no Source Link-Layer Address option (the link has none); the
        PDU Session Container with the session's QFI, as its other uplink G-PDUs."""
        a, p0, r = self.lab.addressing, self.lab.ports[0], s.rules
        ext = [packets.pdu_session_container(r.qfi, uplink=True)] if r.qfi is not None else None
        return bytes(packets.gtpu(packets.router_solicitation6("fe80::1"), teid=r.teid, src=r.gnb,
                                  dst=self._n3_of(r), src_mac=p0.mac, dst_mac=p0.dut_mac, **({"ext": ext} if ext else {})))

    def frame_stream(self, port: int, frame: bytes, pg: int | None, pps: float, total: int) -> tuple[int, dict]:
        """(port, stream) of total copies of frame at pps, counted under pg (flow()); pg None: no flow
        stats (the engine's trailer would overwrite the frame's last 16 octets, and it keeps only UDP
        and TCP checksums right)."""
        st = self._stream(frame, pg or 0, pps, total)
        if pg is None:
            del st["flow_stats"]
        return port, st

    def ul_stream(self, s: TestSession, size: int, pps: float, total: int | None = None,
                  burst: int = 1) -> tuple[int, dict]:
        return 0, self._stream(self.ul_frame(s, size), s.pg_ul, pps, total, burst)

    def dl_stream(self, s: TestSession, size: int, pps: float, total: int | None = None,
                  burst: int = 1) -> tuple[int, dict]:
        return 1, self._stream(self.dl_frame(s, size), s.pg_dl, pps, total, burst)

    def start(self, streams: list[tuple[int, dict]], duration: float = -1) -> list[int]:
        """Load (port, stream) pairs and start them; returns the ports used."""
        c = self.client
        c.reset()
        ports = sorted({p for p, _ in streams})
        for p in ports:
            c.add_streams([st for q, st in streams if q == p], ports=[p])
        c.start(ports=ports, mult="1", duration=duration)
        return ports

    def wait(self, ports: list[int], timeout: float = 60) -> None:
        self.client.wait_on_traffic(ports=ports, timeout=timeout, rx_delay_ms=100)

    def flow(self) -> dict:
        """{pg_id: (tx_pkts, rx_pkts)} now."""
        fs = self.client.get_stats()["flow_stats"]
        return {pg: (v["tx_pkts"]["total"], v["rx_pkts"]["total"]) for pg, v in fs.items() if pg != "global"}

    def max_bursts(self) -> dict:
        """{pg_id: the most frames the stream sent back to back} in the latest transmission (the
        engine's tx_max_burst)."""
        fs = self.client.get_stats()["flow_stats"]
        return {pg: sum(v["tx_max_burst"].values()) for pg, v in fs.items()
                if pg != "global" and "tx_max_burst" in v}

    def port_start(self, port: int) -> float | None:
        """When the engine started sending on port (time.monotonic(): its paced streams' bursts are
        due at this + k x period), None if the generator does not say."""
        ports = getattr(self.client, "ports", None)
        p = ports.get(port) if isinstance(ports, dict) else None
        return getattr(p, "t_start", None) or None

    # -- what the UPF's process shows ----------------------------------------------------------

    def upf_pid(self) -> int | None:
        if self.agent is not None:
            return self.agent.proc.pid
        ext = getattr(self.lab, "external", None) or {}
        return ext.get("pid")

    def rss_kib(self) -> int | None:
        """Resident memory of the UPF's PFCP process (the PGW-U's agent, the external UPF)."""
        pid = self.upf_pid()
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, TypeError):
            return None
        return None

    def loss_snapshot(self) -> dict:
        """What can say where packets were lost: the UPF's own counters by reason and verdict (the
        lab's DUT probe: the PGW-U's stats map, eUPF's API ...) and every lab veth's drop and error
        counters (`ethtool -S`: its rings, XDP transmit errors)."""
        veth = {}
        for p in self.lab.ports:
            for ns, ifname in ((p.netns, p.ifname), (p.dut_netns, p.dut_ifname)):
                r = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "ethtool", "-S", ifname],
                                   capture_output=True, text=True, timeout=30)
                for line in r.stdout.splitlines()[1:]:
                    k, _, v = line.strip().partition(":")
                    if ("drop" in k or "err" in k) and v.strip().isdigit():
                        veth[f"{ifname}.{k}"] = int(v)
        return {"upf": self.probe.counters() if self.probe is not None else None, "veth": veth}

    @staticmethod
    def loss_delta(a: dict, b: dict) -> dict:
        """Where packets went between two loss_snapshot()s: the UPF's drops and passes by reason,
        the veth counters that moved."""
        out = {"veth": {k: v - a["veth"].get(k, 0) for k, v in b["veth"].items() if v != a["veth"].get(k, 0)}}
        if a["upf"] is not None and b["upf"] is not None:
            d = DutDelta.from_counters(a["upf"], b["upf"])
            out.update(upf_drops_by_reason=d.drops_by_reason, upf_passed_by_reason=d.passed_by_reason)
        return out

    def upf_sessions(self) -> int | None:
        """How many sessions the UPF holds, where it shows them: the PGW-U's bearer table (`pgwu
        stats`: its larger half), eUPF's REST API (dut.eupf.api, /api/v1/pfcp_sessions, read from
        the lab's control-plane namespace); None for another UPF."""
        if self.cfg.dut_mode == "pgwu":
            b = self.lab.pgwu_json("stats")["bearers"]
            return max(b["uplink"], b["downlink"])
        api = ((self.cfg.dut or {}).get("eupf") or {}).get("api")
        if api and getattr(self.lab, "cp_ns", None):
            url = api.replace("{n4}", self.lab.addressing.dut_n4) + "/api/v1/pfcp_sessions"
            return len(json.loads(run_in(self.lab.cp_ns, _get, url)) or [])
        return None

    # -- end -----------------------------------------------------------------------------------

    def close(self) -> list[str]:
        """Delete what is left, end the association, stop the agent, remove the lab. Returns the
        warnings (e.g. a UPF that does not answer the release)."""
        errors = []
        if self._closed:
            return self._warnings
        self._closed = True
        try:
            if self.prov is not None:
                for s in list(self.sessions.values()):
                    try:
                        self.delete(s)
                    except PfcpError as e:
                        errors.append(str(e))
                self.prov.close()
        finally:
            try:
                if self.agent is not None:
                    self.agent.close()
                if self.probe is not None:
                    self.probe.close()
            finally:
                self.be.close()
        self._warnings = errors + (list(self.prov.warnings) if self.prov else [])
        return self._warnings
