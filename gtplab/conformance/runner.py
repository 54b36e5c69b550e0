"""A conformance run: the namespace lab a lab config describes (as tests/dataplane/
test_suite_correctness.py's fixture builds it, the generator always the embedded engine), its
bearers provisioned (the PGW-U with `pgwu session load`, or over PFCP as the config's dut.pfcp says:
any external UPF, the PGW-U's own agent), each case's packets sent as single bursts, the other port
and the sending port captured, and each case judged (judge.py) against the oracle's output.

    with Run(labconfig.load("embedded-eupf")) as run:
        for case in cases.CASES:
            rec = run.case(case)          # {"case", "result": pass | fail | departs | not supported, ...}

Bearers: 0-3 (outer UDP checksum on for 0 and 1, off for 2 and 3 where the UPF has that knob: the
PGW-U's bearer file), and QFI_BEARER with QFI (TS 38.415): in the PGW-U's bearer file, or over PFCP a
session of a second association from a second N4 address (one QFI per association, as
gtplab.pfcp.provision builds sessions). A UPF that rejects it has no QFI cases ("not supported",
with its answer). The lab is always torn down (close()).
"""

from __future__ import annotations

import base64
import dataclasses
import ipaddress
import json
import subprocess
import tempfile
import time
from pathlib import Path

from scapy.layers.inet import defragment
from scapy.layers.l2 import Ether

from gtplab.conformance import cases as C
from gtplab.conformance import departs
from gtplab.conformance import oracle as O
from gtplab.conformance.judge import Got, judge
from gtplab.dut.external import ExternalDut
from gtplab.dut.local import LocalDut
from gtplab.dut.pfcp import EmbeddedAgent, in_lab, provisioner
from gtplab.errors import UserError
from gtplab.lab.topology import DEFAULT_MTU, Lab
from gtplab.measure.conservation import DutDelta
from gtplab.pfcp import messages as pm
from gtplab.pfcp import provision
from gtplab.pfcp.errors import PfcpError
from gtplab.traffic.backend import engine_client, require_built_for

SECOND_N4 = "10.203.0.3"        # the QFI session's association, beside gtplab's N4 address


def _ue6(i: int) -> str:
    """The bearer file's IPv6 option of bearer i: the IPv4v6 bearers carry their UE's /64."""
    return f" ue6={C.ue6_prefix(i)}" if i in C.IPV6_BEARERS else ""


def _sgw6(a, i: int, n3: str) -> str:
    """The bearer file's N3 IPv6 option of bearer i: with n3 "6" its peer's IPv6 address (sgw6=)."""
    return f" sgw6={a.sgw6(i)}" if n3 == "6" else ""



def _stream(frame: bytes, n: int, isg_us: float = 0.0) -> dict:
    return {"mode": {"type": "single_burst", "total_pkts": n, "rate": {"type": "pps", "value": 2000}},
            "isg": isg_us, "packet": {"binary": base64.b64encode(bytes(frame)).decode(), "meta": ""},
            "vm": {"instructions": []}, "flow_stats": {"enabled": False}}


def transmit(c, tx: int, frames: list[bytes], copies: int, spaced_us: float = 0.0,
             rx_delay_ms: int = 150) -> Got:
    """Every frame `copies` times from port tx of the generator client c (a single burst each at
    2000 pps; frame k from k * spaced_us on, else all at once), capturing the other port and port tx
    meanwhile: what the DUT forwarded (fwd) and what came back to the sender (back). The conformance
    runner's send and the suite's (tests/lib/correctness.py) both send so."""
    rx = 1 - tx
    c.reset()
    c.add_streams([_stream(f, copies, k * spaced_us) for k, f in enumerate(frames)], ports=[tx])
    cap = c.start_capture([rx], 10000)
    cap_back = c.start_capture([tx], 10000)
    c.start(ports=[tx])
    c.wait_on_traffic(ports=[tx], timeout=30, rx_delay_ms=rx_delay_ms)
    return Got(fwd=[f for _, f, _ in c.stop_capture(cap["id"])],
               back=[f for _, f, _ in c.stop_capture(cap_back["id"])])


def ttl_free(frame: bytes) -> bytes:
    """The frame with its outer IPv4 TTL and header checksum zeroed (after id_free): for packets a
    kernel may have forwarded once more (the outer fragments of downlink-too-big)."""
    f = O.id_free(frame)
    l2, _ = O.l2_split(f)
    b = bytearray(f)
    if len(b) >= l2 + 20 and b[l2] >> 4 == 4:
        b[l2 + 8] = 0
        b[l2 + 10:l2 + 12] = b"\0\0"
    return bytes(b)


def reassembled(frames: list[bytes]) -> list[bytes]:
    """The captured frames with IPv4 fragments reassembled (Scapy's defragment), others as they are."""
    if not frames:
        return frames
    return [bytes(p) for p in defragment([Ether(f) for f in frames])]


def check_config(cfg) -> None:
    """What the run needs of a lab config, checked before anything is built (UserError, one line)."""
    if cfg.backend != "local":
        raise UserError(f"lab config {cfg.path}: conformance runs on the namespace lab (backend: local), "
                        f"not {cfg.backend}")
    if cfg.dut_mode not in ("pgwu", "socket", "external"):
        raise UserError(f"lab config {cfg.path}: dut.mode {cfg.dut_mode}: conformance needs a UPF "
                        "(pgwu, socket or external)")
    if cfg.dut_mode == "external" and (cfg.provision != "pfcp" or not cfg.dut.get("pfcp")):
        raise UserError(f"lab config {cfg.path}: an external UPF is provisioned over PFCP (dut.provision: pfcp, "
                        "dut.pfcp)")
    require_built_for(cfg.dut_mode, "engine", cfg.socket_knobs if cfg.dut_mode == "socket" else None)


class Run:
    """See the module doc."""

    def __init__(self, cfg, lab_name: str | None = None, n3: str = "4"):
        check_config(cfg)
        self.cfg = cfg
        self.n3 = n3                    # "6": every bearer's peer over IPv6 (GTP-U over IPv6)
        self.upf = departs.upf_key(cfg)
        self.lab = self.client = self.probe = self.agent = self.prov = self.prov_qfi = None
        self.notes: list[str] = []
        ext = cfg.external_spec() if cfg.dut_mode == "external" else None
        self.lab = Lab.up(lab_name, dut=cfg.dut_mode, mtu=int(cfg.lab.get("mtu", DEFAULT_MTU)),
                          external_spec=ext, share_cpus=True,
                          socket_knobs=cfg.socket_knobs if cfg.dut_mode == "socket" else None)
        try:
            self._tmp = tempfile.TemporaryDirectory(prefix="gtplab-conformance-")
            self.ctx = self._provision()
            if cfg.dut_mode == "external":
                # the kernel answers what a UPF passes it (ICMP errors): one per packet
                subprocess.run(["ip", "netns", "exec", self.lab.dut_ns, "sysctl", "-qw",
                                "net.ipv4.icmp_ratelimit=0"], check=True)
                # what a UPF sends through the kernel's sockets gets its checksums in software, as a
                # NIC would finish them: a veth has no hardware, and with tx checksum offload on a
                # UDP datagram reaches the generator with the pseudo-header sum in its checksum
                for p in self.lab.ports:
                    subprocess.run(["ip", "netns", "exec", self.lab.dut_ns, "ethtool", "-K", p.dut_ifname,
                                    "tx", "off"], check=True, capture_output=True)
                self.ctx.upf_started = (self.lab.external or {}).get("started")
                self.probe = ExternalDut(self.lab, cfg)
            else:
                self.probe = LocalDut(self.lab)
            self.client = engine_client(self.lab)
            self.client.connect()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- bearers -------------------------------------------------------------------------------

    def _mtu(self, ifname: str) -> int:
        out = subprocess.run(["ip", "-n", self.lab.dut_ns, "-j", "link", "show", "dev", ifname],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)[0]["mtu"]

    def _provision(self) -> C.Ctx:
        lab, cfg, a, q = self.lab, self.cfg, self.lab.addressing, C.QFI_BEARER
        ctx = C.Ctx(addressing=a, ports=lab.ports, upf=self.upf, mtu_access=self._mtu(lab.ports[0].dut_ifname),
                    mtu_sgi=self._mtu(lab.ports[1].dut_ifname), n3=self.n3)
        bf = Path(self._tmp.name) / "bearers.txt"
        n3 = self.n3
        if cfg.provision != "pfcp":
            bf.write_text("".join(f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x} "
                                  f"csum={'on' if i in (0, 1) else 'off'}{_ue6(i)}{_sgw6(a, i, n3)}\n"
                                  for i in range(4)))
            bq = bf.with_name("bearers-qfi.txt")
            bq.write_text(f"{a.local_teid(q):#x} {a.ue(q)} {a.sgw(q)} {a.sgw_teid(q):#x} csum=on qfi={C.QFI}"
                          f"{_sgw6(a, q, n3)}\n")
            lab.pgwu("session", "load", str(bf))
            lab.pgwu("session", "load", str(bq))
            ctx.csum_on = frozenset((0, 1, q))
            ctx.qfi = ctx.first_qer_qfi = C.QFI
            ctx.ipv6 = True
            return ctx
        bf.write_text("".join(f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x}{_ue6(i)}"
                              f"{_sgw6(a, i, n3)}\n" for i in range(4)))
        pc, ns = in_lab(provision.parse_config(cfg.dut["pfcp"], f"lab config {cfg.path}"), lab)
        upf = None
        if pc.upf == provision.EMBEDDED:
            self.agent = EmbeddedAgent(lab.pin_dir)
            upf = self.agent.addr
        deadline = time.monotonic() + 15
        while True:
            try:
                self.prov = provisioner(pc, ns, upf)
                break
            except PfcpError:
                if time.monotonic() > deadline:          # an external UPF may still be starting
                    raise
                time.sleep(0.5)
        try:
            got = self.prov.install(str(bf), str(bf.with_suffix(".provisioned")))
        except PfcpError as e:
            if n3 != "6":
                raise
            # a UPF that refuses N3 over IPv6 (eUPF: F-TEID V6, cause 73): every case says so
            ctx.n3_why = f"the UPF refused N3 over IPv6 (sessions with an IPv6 F-TEID and peer): {e}"
            self.notes.append(ctx.n3_why)
            return ctx
        ctx.teids = {s.bearer.index: s.teid for s in got if s.teid is not None}
        ctx.csum_on = frozenset(range(5))                 # PFCP has no per-bearer checksum flag
        ctx.ipv6 = True                                   # the sessions are IPv4v6 (UE IP Address V4 and V6)
        try:
            if ns is not None:
                subprocess.run(["ip", "-n", ns, "addr", "add", f"{SECOND_N4}/{a.prefixlen('n4')}", "dev",
                                lab.external["n4"]["cp_ifname"]], check=True)
                qcfg = dataclasses.replace(pc, qfi=C.QFI, local=SECOND_N4, node_id=SECOND_N4)
            else:
                qcfg = dataclasses.replace(pc, qfi=C.QFI, node_id="qfi.gtplab.test")
            self.prov_qfi = provisioner(qcfg, ns, upf)
            b = pm.Bearer(q, int(ipaddress.IPv4Address(a.ue(q))), int(ipaddress.IPv4Address(a.sgw(q))),
                          a.sgw_teid(q), None if self.prov_qfi.cfg.choose else a.local_teid(q),
                          sgw6=int(ipaddress.IPv6Address(a.sgw6(q))) if n3 == "6" else None)
            s = self.prov_qfi.sessions.establish([b])
            if s and s[0].teid is not None:
                ctx.teids[q] = s[0].teid
            ctx.qfi = ctx.first_qer_qfi = C.QFI
        except (PfcpError, UserError, subprocess.CalledProcessError) as e:
            ctx.qfi_why = f"no QFI session: {e}"
            self.notes.append(ctx.qfi_why)
        return ctx

    # -- a case --------------------------------------------------------------------------------

    def send(self, tx: int, frames: list[bytes], copies: int, spaced_us: float) -> Got:
        """Every frame `copies` times from port tx (frame k from k * spaced_us on); what the other port
        and port tx received meanwhile."""
        return transmit(self.client, tx, frames, copies, spaced_us)

    def _counters(self):
        try:
            return self.probe.counters() if self.probe is not None else None
        except Exception:               # evidence only: a UPF whose counters cannot be read is judged the same
            return None

    def _pgwu_config(self, args) -> None:
        self.lab.pgwu("config", *args)
        if self.lab.dut_mode == "socket":
            time.sleep(0.5)             # the socket path reads its config every 200 ms

    def _ip_route(self, route: C.Route, verb: str) -> subprocess.CompletedProcess:
        """`ip -n DUT_NS route VERB ...` of a case's route (C.Route)."""
        return subprocess.run(["ip", "-n", self.lab.dut_ns] + route.args(verb), capture_output=True, text=True)

    def case(self, case: C.Case) -> dict:
        """Run one case; its record (result, why, the first differing packet ...)."""
        t0 = time.monotonic()
        rec = {"case": case.name, "clause": case.clause, "direction": "uplink" if case.tx == 0 else "downlink",
               "n3": self.n3}
        if self.n3 not in case.n3:
            return {**rec, "result": "not supported", "why": f"not built over N3 IPv{self.n3} (cases.N3V6_CASES)"}
        if self.ctx.n3_why:
            return {**rec, "result": "not supported", "why": self.ctx.n3_why}
        if "qfi" in case.needs and self.ctx.qfi is None:
            return {**rec, "result": "not supported", "why": self.ctx.qfi_why or "no QFI session"}
        if "ipv6" in case.needs and not self.ctx.ipv6:
            return {**rec, "result": "not supported", "why": "no IPv4v6 sessions"}
        if "pgwu" in case.needs and self.lab.dut_mode not in ("pgwu", "socket"):
            return {**rec, "result": "not supported", "why": "a knob of the PGW-U's own (pgwu config " +
                    " ".join(case.config[0]) + ")"}
        why = departs.not_supported(self.upf, case.uses)
        if why:
            return {**rec, "result": "not supported", "why": why}
        frames = [bytes(f) for f in case.frames(self.ctx)]
        facts = departs.facts(self.upf)
        keys = [k for k in case.uses if k in facts]
        if "ipv6" in keys:              # a UPF that forwards no IPv6: how it would forward is moot
            keys = ["ipv6"]
        spec = case.expect(self.ctx, frames, {})
        departing = case.expect(self.ctx, frames, {k: facts[k] for k in keys}) if keys else None
        route = case.route_mtu(self.ctx) if case.route_mtu else None
        if route is not None:
            r = self._ip_route(route, "add")
            if r.returncode:
                return {**rec, "result": "not supported",
                        "why": f"the lab could not lower the route's MTU ({' '.join(route.args('add'))}: "
                               f"{r.stderr.strip()})"}
        c0 = self._counters()
        try:
            if case.config:
                self._pgwu_config(case.config[0])
            try:
                got = self.send(case.tx, frames, case.copies, case.spaced_us)
            finally:
                if case.config:
                    self._pgwu_config(case.config[1])
        finally:
            if route is not None:
                r = self._ip_route(route, "del")
                if r.returncode:        # the lab's later cases would run with it: say so in run.json
                    self.notes.append(f"{case.name}: could not remove its route ({r.stderr.strip()})")
        c1 = self._counters()
        fwd = reassembled(got.fwd) if case.defragment else got.fwd
        norm = ttl_free if case.defragment else (O.id_free if case.id_free else None)
        v = judge(spec, Got(fwd=fwd, back=got.back), departing=departing,
                  causes=departs.causes(self.upf, keys), norm=norm, norm_back=O.id_free)
        rec.update(v)
        rec.update(sent=len(frames) * case.copies, received={"forwarded": len(got.fwd), "back": len(got.back)},
                   seconds=round(time.monotonic() - t0, 2))
        if c0 is not None and c1 is not None:
            d = DutDelta.from_counters(c0, c1)
            rec["upf_counters"] = {"forwarded": d.fwd_packets, "drops": d.drops_by_reason,
                                   "passed": d.passed_by_reason}
        return rec

    # -- end -----------------------------------------------------------------------------------

    def close(self) -> None:
        try:
            for x in (self.client,):
                if x is not None:
                    x.disconnect()
            if self.probe is not None:
                self.probe.close()
            for p in (self.prov_qfi, self.prov):
                if p is not None:
                    try:
                        p.close()
                    except PfcpError as e:
                        self.notes.append(f"at the end: {e}")
            if self.agent is not None:
                self.agent.close()
        finally:
            self.client = self.probe = self.prov = self.prov_qfi = self.agent = None
            if getattr(self, "_tmp", None) is not None:
                self._tmp.cleanup()
                self._tmp = None
            if self.lab is not None:
                lab, self.lab = self.lab, None
                lab.down()
