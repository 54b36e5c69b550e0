"""Provisioning a run's bearers on a UPF over PFCP, from the lab config's `dut.pfcp` section.

    dut:
      provision: pfcp
      pfcp:
        upf: 10.0.0.2:8805        # the UPF's N4/Sx address (port 8805 if omitted); `lab`: an external
                                  # UPF's in the namespace lab (gtplab/lab/external.py), reached from
                                  # the lab's control-plane namespace; n3, n6, local then default to
                                  # the lab's addresses
        local: 10.0.0.1           # our address on N4 (default: what the route to the UPF picks)
        listen_port: 8805         # where gtplab's node listens on it (the UPF's heartbeats, reports);
                                  # 0: any free port (default 0 with upf: embedded, else 8805)
        node_id: 10.0.0.1         # our Node ID: IPv4 or FQDN (default: the local address)
        n3: 10.201.0.1            # the UPF's N3/S1-U GTP-U address: the uplink's outer destination;
                                  # an IPv6 one, or a list of one of each ([10.201.0.1, fd47:7473::1]),
                                  # for GTP-U over IPv6 (sweep --n3 6: F-TEID V6, OHC GTP-U/UDP/IPv6)
        n6: 198.18.0.254          # the UPF's N6/SGi address (the downlink traffic's next hop)
        choose: auto              # auto: the UPF allocates the uplink F-TEIDs (CHOOSE) when its UP
                                  # Function Features say FTUP, else gtplab gives the profile's;
                                  # true: always CHOOSE; false: always the profile's
        urr: false                # a volume URR per session, compared with the generator's counts
        mbr_kbps: [ul, dl]        # a QER per session with this MBR
        qfi: 9                    # 5G N3: every session's QoS flow, in its QER (downlink marking)
                                  # and its uplink PDI (what uplink G-PDUs must carry), 0..63
        network_instance: {access: "", core: ""}
        window: 256               # requests in flight
        t1: 3                     # s; TS 29.244 response timer
        n1: 3                     # retransmissions
        heartbeat: 10             # s between our Heartbeat Requests
        release_wait: 1           # s to wait for the Association Release Response, sent once
                                  # (default: T1 x (N1 + 1) with N1 retransmissions); for a UPF that
                                  # never answers it (eUPF): a warning after this, not after 12 s

The bearer file the run writes (the `pgwu session load` format, one line per bearer) is read back
here for the bearers' UE, SGW and SGW TEID; the file written after provisioning records what the
UPF returned: the TEID in force in the first column, and its F-TEID address in a comment. The uplink
profile takes its TEIDs from that file (--teid-file), so the traffic uses what the UPF chose.
"""

from __future__ import annotations

import math
import dataclasses
import ipaddress
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from gtplab import bounded
from gtplab.errors import UserError, note_cleanup
from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import PfcpError, PfcpRejected, PfcpTimeout
from gtplab.pfcp.node import Node, Report, Timers
from gtplab.pfcp.sessions import Session, Sessions

PROVISION = ("pgwu", "pfcp", "none")
# how the DUT's counters are read (gtplab.dut.probe.make_dut; kernel and eupf: gtplab/dut/upf_counters.py)
COUNTERS = ("pgwu", "prometheus", "eupf", "kernel", "kernelpath", "none")
_PFCP_KEYS = {"upf", "local", "listen_port", "node_id", "n3", "n6", "choose", "urr", "mbr_kbps",
              "network_instance", "window", "t1", "n1", "heartbeat", "qfi", "release_wait"}
CHOOSE = {"auto": None, True: True, False: False}
EMBEDDED = "embedded"      # upf: embedded -- the lab starts `pgwu pfcp --listen` on loopback
LAB = "lab"                # upf: lab -- an external UPF in the namespace lab, on its N4 link


@dataclass
class PfcpConfig:
    upf: tuple[str, int] | str
    n3: str | None                      # None only with upf: lab (the lab's N3 address), or n3 IPv6 only
    n6: str | None
    local: str | None = None
    listen_port: int | None = None      # None: 8805, or any free port with upf: embedded
    node_id: str | None = None
    choose: bool | None = None          # None: auto (CHOOSE if the UPF says FTUP)
    urr: bool = False
    mbr_kbps: tuple[int, int] | None = None
    qfi: int | None = None
    access_instance: str = ""
    core_instance: str = ""
    window: int = 256
    timers: Timers = field(default_factory=Timers)
    release_wait: float | None = None   # None: T1 x (N1 + 1), with retransmissions
    n3_6: str | None = None             # the UPF's N3 IPv6 address (GTP-U over IPv6), if it has one

    def options(self) -> m.SessionOptions:
        return m.SessionOptions(n3_addr=self.n3 or "0.0.0.0", n3_addr6=self.n3_6, choose=bool(self.choose), urr=self.urr, mbr_kbps=self.mbr_kbps,
                                access_instance=self.access_instance, core_instance=self.core_instance,
                                qfi=self.qfi)


def _n3(v, where: str) -> tuple[str | None, str | None]:
    """dut.pfcp.n3: an IPv4 address, an IPv6 one, or a list of one of each -> (IPv4, IPv6)."""
    vals = v if isinstance(v, list) else [v]
    out: dict[int, str] = {}
    for x in vals:
        try:
            a = ipaddress.ip_address(str(x))
        except ValueError:
            a = None
        if a is None or isinstance(x, bool) or a.version in out:
            raise UserError(f"{where}: {v!r} is not an IPv4 or IPv6 address, or a list of one of each")
        out[a.version] = str(a)
    if not out:
        raise UserError(f"{where}: an empty list (give the UPF's N3 IPv4 and/or IPv6 address)")
    return out.get(4), out.get(6)


def _ipv4(v, where: str) -> str:
    try:
        return str(ipaddress.IPv4Address(str(v)))
    except ValueError:
        raise UserError(f"{where}: {v!r} is not an IPv4 address") from None


# dut.pfcp's numbers: (lowest, highest, type); the ranges of a lab config's (gtplab/lab/config_schema.py),
# for `gtplab pfcp`'s options too. A NaN or an infinity passes every `<` test, and a timer of 1e300 s
# overflows select(): finite and at most the highest.
NUMBERS = {"window": (1, 65536, int), "n1": (0, 100, int), "t1": (0.001, 3600, (int, float)),
           "heartbeat": (0, 3600, (int, float)), "release_wait": (0.001, 3600, (int, float))}


def check_number(key: str, v, what: str):
    """v as dut.pfcp.<key> (NUMBERS), or UserError `<what> <v> must be ...`."""
    lo, hi, kind = NUMBERS[key]
    if isinstance(v, bool) or not isinstance(v, kind) or not math.isfinite(v) or not lo <= v <= hi:
        raise UserError(f"{what} {v!r} must be a number >= {lo} (at most {hi})")
    return v


def parse_config(d, where: str) -> PfcpConfig:
    """dut.pfcp of a lab config, checked (UserError naming the key)."""
    if not isinstance(d, dict):
        raise UserError(f"{where}: dut.pfcp must be a mapping (upf, n3, n6, ...)")
    bad = set(d) - _PFCP_KEYS
    if bad:
        raise UserError(f"{where}: unknown key(s) in dut.pfcp: {', '.join(sorted(bad))} "
                        f"(allowed: {', '.join(sorted(_PFCP_KEYS))})")
    for k in ("upf", "n3", "n6"):
        if k not in d and not (k != "upf" and d.get("upf") == LAB):
            raise UserError(f"{where}: dut.pfcp.{k} is required (docs/pfcp.md)")
    upf = d["upf"]
    if upf not in (EMBEDDED, LAB):
        host, _, port = str(upf).partition(":")
        try:
            port = int(port) if port else m.PORT
        except ValueError:
            raise UserError(f"{where}: dut.pfcp.upf {upf!r}: port is not a number") from None
        if not 0 < port < 65536 or not host:
            raise UserError(f"{where}: dut.pfcp.upf {upf!r}: use HOST[:PORT]")
        upf = (host, port)
    node_id = d.get("node_id")
    if node_id is not None:
        try:
            m.node_id_ie(str(node_id))
        except ValueError as e:
            raise UserError(f"{where}: dut.pfcp.node_id: {e}") from None
    mbr = d.get("mbr_kbps")
    if mbr is not None:
        if (not isinstance(mbr, (list, tuple)) or len(mbr) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 < x < 1 << 40 for x in mbr)):
            raise UserError(f"{where}: dut.pfcp.mbr_kbps must be [uplink, downlink] in kbit/s")
        mbr = (int(mbr[0]), int(mbr[1]))
    qfi = d.get("qfi")
    if qfi is not None and (isinstance(qfi, bool) or not isinstance(qfi, int) or not 0 <= qfi <= m.QFI_MAX):
        raise UserError(f"{where}: dut.pfcp.qfi {qfi!r} must be a QFI, 0..{m.QFI_MAX}")
    ni = d.get("network_instance") or {}
    if not isinstance(ni, dict) or set(ni) - {"access", "core"}:
        raise UserError(f"{where}: dut.pfcp.network_instance must be {{access: NAME, core: NAME}}")
    if "urr" in d and not isinstance(d["urr"], bool):
        raise UserError(f"{where}: dut.pfcp.urr must be true or false")
    choose = d.get("choose", "auto")
    if not isinstance(choose, (bool, str)) or choose not in CHOOSE:
        raise UserError(f"{where}: dut.pfcp.choose {choose!r} must be auto, true or false")
    port = d.get("listen_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536):
        raise UserError(f"{where}: dut.pfcp.listen_port {port!r} must be a UDP port, 0..65535 (0: any free one)")
    nums = {}
    for k in NUMBERS:
        if k in d:
            nums[k] = check_number(k, d[k], f"{where}: dut.pfcp.{k}")
    n3, n3_6 = _n3(d["n3"], f"{where}: dut.pfcp.n3") if "n3" in d else (None, None)
    return PfcpConfig(upf=upf, n3=n3, n3_6=n3_6,
                      n6=_ipv4(d["n6"], f"{where}: dut.pfcp.n6") if "n6" in d else None,
                      local=_ipv4(d["local"], f"{where}: dut.pfcp.local") if d.get("local") else None,
                      listen_port=port, node_id=str(node_id) if node_id is not None else None,
                      choose=CHOOSE[choose], urr=d.get("urr", False), mbr_kbps=mbr, qfi=qfi,
                      access_instance=str(ni.get("access") or ""), core_instance=str(ni.get("core") or ""),
                      window=nums.get("window", 256),
                      timers=Timers(t1=float(nums.get("t1", 3.0)), n1=int(nums.get("n1", 3)),
                                    heartbeat=float(nums.get("heartbeat", 10.0))),
                      release_wait=float(nums["release_wait"]) if "release_wait" in nums else None)


def read_bearer_file(path: str, choose: bool) -> list[m.Bearer]:
    """Bearers of a pgwu bearer file (`TEID UE SGW SGW_TEID [csum=...] [qfi=...] [ue6=PREFIX/64]
    [sgw6=ADDR]`), index = line order. ue6 makes the session IPv4v6 (the UE's /64 prefix beside its
    IPv4 address); sgw6 puts it on N3 over IPv6 (the SGW's IPv6 address, gtpu_common.sgw6_addr);
    the other options are not read: over PFCP every session carries dut.pfcp.qfi. Read a line at a
    time (bounded.read_lines): at most BEARER_FILE_BYTES, BEARER_LINES lines of BEARER_LINE_BYTES
    each; UserError in one line beyond (a binary, /dev/zero) or for a FIFO."""
    out = []
    for n, raw in bounded.read_lines(path, bounded.BEARER_FILE_BYTES, bounded.BEARER_LINE_BYTES,
                                     f"bearer file {path}", max_lines=bounded.BEARER_LINES):
        try:
            line = raw.decode()
        except UnicodeDecodeError:
            raise UserError(f"bearer file {path}:{n}: not text (a bearer file is TEID UE_ADDR SGW_ADDR SGW_TEID lines)") from None
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        try:
            teid, ue, sgw, sgw_teid = int(line[0], 0), ipaddress.IPv4Address(line[1]), \
                ipaddress.IPv4Address(line[2]), int(line[3], 0)
        except (ValueError, IndexError):
            raise UserError(f"bearer file {path}:{n}: expected TEID UE_ADDR SGW_ADDR SGW_TEID") from None
        ue6 = sgw6 = None
        for opt in line[4:]:
            if opt.startswith("sgw6="):
                try:
                    sgw6 = int(ipaddress.IPv6Address(opt[5:]))
                except ValueError:
                    raise UserError(f"bearer file {path}:{n}: {opt}: the SGW's IPv6 address (sgw6=fd47:7473::10)") from None
            if opt.startswith("ue6="):
                try:
                    net = ipaddress.IPv6Network(opt[4:], strict=True)
                except ValueError:
                    net = None
                if net is None or net.prefixlen != 64:
                    raise UserError(f"bearer file {path}:{n}: {opt}: the UE's IPv6 prefix is a /64 (ue6=fd47:7470::/64)")
                ue6 = int(net.network_address) >> 64
        out.append(m.Bearer(len(out), int(ue), int(sgw), sgw_teid, None if choose else teid, ue6, sgw6))
    return out


def write_bearer_file(sessions: list[Session], path: str, upf: str) -> None:
    """The bearers as provisioned: the TEID in force (the UPF's, with CHOOSE) first; the F-TEID
    address and the SEIDs in a trailing comment. Written next to path, then renamed."""
    out = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"# bearers provisioned over PFCP on {upf}: TEID = the uplink F-TEID in force\n"
                    "# TEID UE_ADDR SGW_ADDR SGW_TEID [ue6=PREFIX/64] [sgw6=ADDR]  # F-TEID address, CP SEID, UP SEID\n")
            for s in sessions:
                b = s.bearer
                f.write(f"{s.teid:#010x} {m.ip(b.ue)} {m.ip(s.sgw if s.sgw is not None else b.sgw)} "
                        f"{(s.sgw_teid if s.sgw_teid is not None else b.sgw_teid):#010x}"
                        + (f" ue6={m.ip6_prefix(b.ue6)}" if b.ue6 is not None else "")
                        + (f" sgw6={ipaddress.IPv6Address(b.sgw6)}" if b.sgw6 is not None else "")
                        + f"  # {s.n3_addr} {s.cp_seid:#x} {s.up_seid:#x}\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise


def resolve_choose(choose: bool | None, ftup: bool | None) -> bool:
    """Whether to ask the UPF for the F-TEIDs (CHOOSE): as configured, or with auto (None) as the
    UPF offers at association (FTUP in its UP Function Features; no such IE: it offers none)."""
    return bool(ftup) if choose is None else choose


class Provisioner:
    """One association for a run: install(bearer file) establishes a session per bearer (after
    deleting the previous set), close() deletes them and releases the association. The node's
    thread answers the UPF's heartbeats and reports and re-establishes after a UPF restart between
    calls. cfg is kept with `choose` resolved at association (resolve_choose)."""

    def __init__(self, cfg: PfcpConfig, upf: tuple[str, int] | None = None):
        addr = upf or cfg.upf
        if addr == EMBEDDED:
            raise UserError("dut.pfcp.upf: embedded needs the lab to start the agent (gtplab/pfcp/provision.py)")
        if addr == LAB or (cfg.n3 is None and cfg.n3_6 is None) or cfg.n6 is None:
            raise UserError("dut.pfcp.upf: lab is an external UPF in the namespace lab: give the lab "
                            "(gtplab sweep --lab-config, gtplab pfcp --lab NAME)")
        # the embedded agent is on loopback, beside other tests' and runs' nodes: any free port
        port = cfg.listen_port if cfg.listen_port is not None else (0 if cfg.upf == EMBEDDED else m.PORT)
        self.node = Node(addr, node_id=cfg.node_id, local=cfg.local, port=port, timers=cfg.timers)
        self.upf_label = f"{self.node.upf[0]}:{self.node.upf[1]}"
        try:
            self.node.associate()
        except BaseException:
            self.node.close()
            raise
        self.cfg = dataclasses.replace(cfg, choose=resolve_choose(cfg.choose, self.node.ftup))
        self.sessions = Sessions(self.node, self.cfg.options(), window=cfg.window)
        self.usage: dict[int, tuple | None] = {}
        self.node.start()

    @property
    def warnings(self) -> list[str]:
        """What did not fail the run but should be read (a release the UPF did not answer)."""
        return self.node.warnings

    @property
    def reports(self) -> list[Report]:
        """The UPF's Session Report and Node Report Requests, as answered."""
        return self.node.reports

    def install(self, bearer_file: str, out_file: str) -> list[Session]:
        """Provision the bearers of bearer_file; write out_file (what the UPF returned)."""
        self.node.check()
        if self.sessions.sessions:
            self.usage.update(self.sessions.delete())
        got = self.sessions.establish(read_bearer_file(bearer_file, self.cfg.choose))
        write_bearer_file(got, out_file, self.upf_label)
        return got

    def close(self, error: BaseException | None = None) -> dict[int, tuple | None]:
        """Delete every session (usage reports in the result), release the association, close the
        socket. A release the UPF does not answer, or rejects, is a warning (`warnings`), not a
        failure: every session was deleted before it, and the association ends on gtplab's side
        anyway. Sessions the UPF already dropped (it released the association) are not deleted.

        error: what ended the run, if something did. Then nothing that fails here replaces it: a
        failed deletion is added to it (gtplab.errors.note_cleanup) and close() returns."""
        first: PfcpError | None = None
        try:
            if self.sessions.sessions and not self.node.released_by_upf:
                self.usage.update(self.sessions.delete())
        except PfcpError as e:
            first = e
        try:
            if self.node.associated:
                self.node.release(wait=self.cfg.release_wait)
        except (PfcpTimeout, PfcpRejected) as e:
            self.node.warnings.append(f"{e}; the association ended on gtplab's side only")
        except PfcpError as e:
            if first is None:
                first = e
            else:
                note_cleanup(first, str(e))
        finally:
            self.node.close()
        if first is not None:
            if error is None:
                raise first
            note_cleanup(error, str(first))
        return self.usage

    def reports_summary(self) -> dict | None:
        """The UPF's reports for run.json: how many of each type, and the first 20."""
        if not self.reports:
            return None
        count: dict[str, int] = {}
        for r in self.reports:
            for t in r.types or ["(no type)"]:
                count[f"{r.kind} {t}"] = count.get(f"{r.kind} {t}", 0) + 1
        return {"count": count, "first": [r.as_dict() for r in self.reports[:20]]}


def usage_differences(usage: dict[int, tuple | None], sent: dict[int, tuple[int, int]],
                      received: tuple[int, int] = (0, 0)) -> dict:
    """Compare each bearer's Usage Report (total, uplink, downlink octets) with the octets of the
    inner IP packets the generator sent to it (sent: bearer -> (uplink, downlink)), and the totals
    with what the generator sent and received (received: (uplink, downlink) octets; the generator
    does not count its receptions per bearer). Differences are UPF minus generator."""
    rows = []
    tot = {"upf_uplink": 0, "upf_downlink": 0, "gen_sent_uplink": 0, "gen_sent_downlink": 0,
           "gen_received_uplink": received[0], "gen_received_downlink": received[1]}
    for i in sorted(set(usage) | set(sent)):
        u = usage.get(i) or (None, None, None)
        g = sent.get(i, (0, 0))
        rows.append({"bearer": i, "upf_uplink": u[1], "gen_sent_uplink": g[0],
                     "uplink_difference": None if u[1] is None else u[1] - g[0],
                     "upf_downlink": u[2], "gen_sent_downlink": g[1],
                     "downlink_difference": None if u[2] is None else u[2] - g[1]})
        tot["upf_uplink"] += u[1] or 0
        tot["upf_downlink"] += u[2] or 0
        tot["gen_sent_uplink"] += g[0]
        tot["gen_sent_downlink"] += g[1]
    for d in ("uplink", "downlink"):
        tot[f"{d}_difference_sent"] = tot[f"upf_{d}"] - tot[f"gen_sent_{d}"]
        tot[f"{d}_difference_received"] = tot[f"upf_{d}"] - tot[f"gen_received_{d}"]
    return {"bearers": rows, "total": tot,
            "bearers_without_report": [r["bearer"] for r in rows if r["upf_uplink"] is None]}


def packets_per_bearer(packets: int, flows: int) -> list[int]:
    """How many of `packets` went to each of `flows` bearers when the profile cycles through them
    (bearer i gets packets n with n % flows == i on one core; split over C cores, each core's
    partial cycle shifts a bearer's count by at most C)."""
    q, r = divmod(packets, flows)
    return [q + (1 if i < r else 0) for i in range(flows)]
