"""What the tests of `pgwu pfcp` with SDF filters share (tests/pfcp/test_pfcp_agent_sdf.py,
test_pfcp_agent_mod.py): the session's UE, its SDF PDRs' flow, sessions built with
gtplab/pfcp/rules.py, uplink and downlink frames of the UE, and what the agent and the data path
made of them (each frame's reason and verdict, the Usage Reports' volumes, the sdf_* maps' sizes)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import time

from scapy.contrib.pfcp import PFCP
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from gtplab.gtpu import packets as P
from gtplab.kernel import bpf
from gtplab.pfcp import rules as R
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import failed_rule, ies, usage_report
from tests.lib.pgwu_config import stats_delta

UE4 = "10.45.0.7"
PFX6 = "fd47:7470:0:7::/64"
UE6 = "fd47:7470:0:7::1234"
SERVER, SERVER6 = "198.51.100.7", "2001:db8:5::7"
SGW_TEID = 0x100
PORT = 6000                       # the SDF PDRs' server port
PDR, FAR, URR = 0, 1, 3           # Failed Rule ID types (8.2.80)
FLOW = R.SdfFilter(flow=R.flow_description(17, "any", str(PORT)))


def session(pdrs=(), teid=None, ue6=None, urr=R.UrrSpec(), **kw) -> R.Session:
    return R.Session(ue=UE4, teid=teid, n3=M.GTPU_ADDR, gnb=M.SGW_ADDR, gnb_teid=SGW_TEID, urr=urr,
                     ue6=ue6, pdrs=tuple(pdrs), **kw)


def est_msg(seq: int, cp_seid: int, s: R.Session):
    return M.establish(seq, cp_seid, UE4, ies=R.establishment_ies(M.node_id(), M.CP_ADDR, cp_seid, s))


def rule(resp):
    fr = failed_rule(resp)
    return None if fr is None else (fr[0] & 0x1f, int.from_bytes(fr[1:], "big"))


def sdf_maps(pin_dir: str) -> dict[str, int]:
    """entries in each of the three maps"""
    out = {}
    for name in ("sdf_lists", "sdf_pdrs", "sdf_qos"):
        with bpf.Map.pinned(os.path.join(pin_dir, name)) as m:
            out[name] = len(list(m.keys()))
    return out


def sdf_urr_entries(pin_dir: str) -> int:
    """entries in sdf_urr (the thresholds and quotas of URRs of SDF PDRs)"""
    with bpf.Map.pinned(os.path.join(pin_dir, "sdf_urr")) as m:
        return len(list(m.keys()))


@contextlib.contextmanager
def agent_held(agent):
    """The agent stopped (SIGSTOP) while packets run through the data path, released (SIGCONT) after:
    meanwhile it reads no counter and sends nothing, so what it reports of those packets afterwards
    is what the data path recorded as they passed, not what a poll of the counters finds later."""
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)


def session_reports(assoc, cp_seid: int, timeout: float, n: int | None = None) -> list[dict]:
    """The Usage Reports (usage_report) of the Session Report Requests for cp_seid that arrive within
    timeout seconds, each checked to carry Report Type USAR; returns early once n have come."""
    out: list[dict] = []
    deadline = time.monotonic() + timeout
    while (n is None or len(out) < n) and (left := deadline - time.monotonic()) > 0:
        try:
            m = PFCP(assoc.recv_raw(left))
        except socket.timeout:
            break
        if m.message_type != 56:
            continue
        assert m.seid == cp_seid, f"report for SEID {m.seid:#x}"
        got = list(m.payload.IE_list)
        assert [bytes(i)[4] for i in got if i.ietype == 39] == [0x02], "Report Type not USAR"
        out += [usage_report(i) for i in got if i.ietype == 80]
    return out


def ul(teid: int, dport: int = 5001, sport: int = 40000, family: int = 4, tos: int = 0, fl: int = 0,
       dst: str | None = None) -> bytes:
    ip = (IP(src=UE4, dst=dst or SERVER, tos=tos) if family == 4
          else IPv6(src=UE6, dst=dst or SERVER6, tc=tos, fl=fl))
    return bytes(P.gtpu(ip / UDP(sport=sport, dport=dport) / Raw(b"\x5a" * 100), teid=teid))


def dl(sport: int = 5001, dport: int = 40000, family: int = 4, tos: int = 0, fl: int = 0,
       src: str | None = None) -> bytes:
    ip = (IP(src=src or SERVER, dst=UE4, tos=tos) if family == 4
          else IPv6(src=src or SERVER6, dst=UE6, tc=tos, fl=fl))
    return bytes(Ether(src=P.ROUTER_SGI_MAC, dst=P.PGW_SGI_MAC) / ip / UDP(sport=sport, dport=dport) /
                 Raw(b"\x5a" * 100))


def inner_len(frame: bytes, uplink: bool) -> int:
    """what the usage counts of a packet: its inner IP packet's length"""
    off = 14 + 20 + 8 + 8 if uplink else 14
    if frame[off] >> 4 == 6:
        return 40 + struct.unpack_from("!H", frame, off + 4)[0]
    return struct.unpack_from("!H", frame, off + 2)[0]


def run(dp, frames) -> list[tuple[str, str]]:
    """(reason, verdict) of each frame, one run each"""
    out = []
    for f in frames:
        s0 = dp.stats_array()
        (dp.run_access if f[12:14] == b"\x08\x00" and f[14 + 9] == 17 and
         struct.unpack_from("!H", f, 14 + 20 + 2)[0] == 2152 else dp.run_sgi)(f)
        [k] = list(stats_delta(s0, dp.stats_array()))
        out.append(k)
    return out


def reports(resp, ietype: int) -> dict[int, tuple]:
    """{URR ID: volume} of the Usage Reports of a response"""
    return {r["urr"]: r["volume"] for r in (usage_report(i) for i in ies(resp) if i.ietype == ietype)}


def vol(ul_frames, dl_frames) -> tuple:
    u = sum(inner_len(f, True) for f in ul_frames)
    d = sum(inner_len(f, False) for f in dl_frames)
    return (u + d, u, d, len(ul_frames) + len(dl_frames), len(ul_frames), len(dl_frames))


FWD_UL, FWD_DL = ("ul_fwd", "redirect"), ("dl_fwd", "redirect")
