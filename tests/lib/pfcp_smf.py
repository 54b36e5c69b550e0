"""The harness of the tests of `pgwu pfcp` as deployed control planes use it (test_pfcp_agent_smf.py,
test_pfcp_peers.py): `pgwu` on a pin dir, the agent on 127.0.0.1 (kernel-chosen port), a CP socket
at any loopback address, and the helpers that read the agent's answers, tables and metrics.
tests/pfcp/conftest.py's `lab` fixture puts them together. The binary is $GTPLAB_PGWU, else the one
built here (gtplab.dut.dataplane.pgwu_binary())."""

from __future__ import annotations

import json
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.request

import pytest
from scapy.contrib.pfcp import IE_FSEID, IE_FTEID, PFCP, IE_RecoveryTimeStamp, PFCPHeartbeatRequest

from gtplab.dut.dataplane import Config, Nexthop, pgwu_binary
from gtplab.gtpu import packets as P
from tests.lib import pfcp_msgs as M

PGWU = str(pgwu_binary())          # $GTPLAB_PGWU, else the one built here



def pgwu(pin_dir: str, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    cp = subprocess.run([PGWU, "-d", pin_dir, *args], capture_output=True, text=True, timeout=60, input=input)
    if check:
        assert cp.returncode == 0, f"pgwu {' '.join(args)}: {cp.stderr}"
    return cp


def tables(pin_dir: str) -> list[dict]:
    """The bearers, without what only the new agent publishes (so they compare across versions)."""
    return [{k: v for k, v in b.items() if k not in ("owner", "pfcp")}
            for b in json.loads(pgwu(pin_dir, "session", "list", "--json").stdout)["bearers"]]


def session_json(pin_dir: str, teid: int) -> dict:
    return json.loads(pgwu(pin_dir, "session", "get", "--teid", str(teid), "--json").stdout)


def _seq_of(b: bytes) -> int | None:
    """The sequence number in a PFCP header, None when the bytes are too short for one."""
    off = 12 if len(b) >= 1 and b[0] & 1 else 4
    return int.from_bytes(b[off:off + 3], "big") if len(b) >= off + 4 else None


def answer_to(request: bytes, recv, within: float = 2) -> bytes:
    """The first datagram recv(timeout) gives with request's sequence number (or none readable)
    within `within` s: a late answer to an earlier request, on a loaded machine, is skipped."""
    want, deadline = _seq_of(request), time.monotonic() + within
    while True:
        r = recv(max(0.01, deadline - time.monotonic()))
        if want is None or _seq_of(r) in (want, None):
            return r


class CP:
    """A control plane: a UDP socket (at addr, port 0: any) talking to an agent."""

    def __init__(self, agent_addr, addr: str = "127.0.0.1", port: int = 0):
        self.agent_addr = agent_addr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, port))
        self.addr = self.sock.getsockname()

    def send(self, pkt) -> None:
        self.sock.sendto(bytes(pkt), self.agent_addr)

    def recv(self, timeout: float = 2) -> bytes:
        self.sock.settimeout(timeout)
        return self.sock.recv(65535)

    def req(self, pkt) -> PFCP:
        """Send a request, return the answer with its sequence number (late answers skipped)."""
        b = bytes(pkt)
        self.send(b)
        return PFCP(answer_to(b, self.recv))

    def close(self) -> None:
        self.sock.close()


class Agent:
    """A running `pgwu pfcp` on 127.0.0.1 (port chosen by the kernel)."""

    def __init__(self, pin_dir: str, *extra: str):
        self.proc = subprocess.Popen([PGWU, "-d", pin_dir, "pfcp", "--listen", "127.0.0.1:0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        if not m:
            err = self.proc.stderr.read() if self.proc.wait(5) is not None else ""
            pytest.fail(f"pgwu pfcp {' '.join(extra)} did not start: {line!r} {err}")
        self.addr = (m.group(1), int(m.group(2)))
        self.out = ""

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not getattr(self, "out", ""):      # (a subclass may not have run __init__: test_pfcp_end_marker's)
            self.out = self.proc.stdout.read() + self.proc.stderr.read()
        return self.out


def ies(resp) -> list:
    return list(resp.payload.IE_list)


def cause(resp) -> int:
    c = [i for i in ies(resp) if i.ietype == 19]
    assert c, f"no Cause in {resp.summary()}"
    return c[0].cause


def offending(resp) -> int | None:
    o = [i for i in ies(resp) if i.ietype == 40]
    return o[0].type if o else None


def rule(resp) -> tuple[int, int] | None:
    f = [i for i in ies(resp) if i.ietype == 114]
    if not f:
        return None
    b = bytes(f[0])[4:]
    return (b[0] & 0x1f, int.from_bytes(b[1:], "big"))


def up_seid(resp) -> int:
    return [i for i in ies(resp) if isinstance(i, IE_FSEID)][0].seid


def created_teid(resp) -> int | None:
    for i in ies(resp):
        if i.ietype == 8:
            for sub in i.IE_list:
                if isinstance(sub, IE_FTEID):
                    return sub.TEID
    return None


def created(resp) -> dict[int, int]:
    """{PDR ID: TEID} of the Created PDR IEs"""
    out = {}
    for i in ies(resp):
        if i.ietype == 8:
            sub = {x.ietype: bytes(x)[4:] for x in i.IE_list}
            out[struct.unpack("!H", sub[56])[0]] = struct.unpack("!I", sub[21][1:5])[0]
    return out


def usage_reports(resp) -> dict[int, dict]:
    """URR ID -> {"volume": (tot, ul, dl, totp, ulp, dlp) or None, "duration": s or None, "seqn"}"""
    out = {}
    for rep in [x for x in ies(resp) if x.ietype == 79]:
        sub = {x.ietype: x for x in rep.IE_list}
        vol = struct.unpack("!6Q", bytes(sub[66])[5:53]) if 66 in sub else None
        dur = struct.unpack("!I", bytes(sub[67])[4:8])[0] if 67 in sub else None
        out[sub[81].id] = {"volume": vol, "duration": dur, "seqn": sub[104].number if 104 in sub else None,
                           "termr": sub[63].TERMR}
    return out


def metrics(pin_dir: str) -> str:
    p = subprocess.Popen([PGWU, "-d", pin_dir, "metrics", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         text=True)
    try:
        port = re.search(r":(\d+)/metrics", p.stdout.readline()).group(1)
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        p.terminate()
        p.wait(10)


def metric(text: str, name: str, **labels) -> int | None:
    """The value of a series whose labels include these, or None."""
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\d+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            return int(m.group(2))
    return None


def forwarding_config(dp) -> None:
    dp.set_config(Config(local_addr=M.GTPU_ADDR, csum=True, fib_cache=False, ue_pool=P.UE_POOL,
                         egress_vlan=(0, 0), restart_counter=0,
                         nexthop=(Nexthop(1001, P.PGW_ACCESS_MAC, "02:00:00:00:01:99"),
                                  Nexthop(1002, P.PGW_SGI_MAC, "02:00:00:00:02:02"))))


def dl_teid(frame: bytes) -> int:
    return struct.unpack_from("!I", frame, 14 + 20 + 8 + 4)[0]


def psc_qfi(frame: bytes) -> int | None:
    g = 14 + 20 + 8
    if not frame[g] & 0x04:
        return None
    return frame[g + 14] & 0x3F


def heartbeat(seq: int, rts: int):
    return PFCP(version=1, S=0, seq=seq) / PFCPHeartbeatRequest(IE_list=[IE_RecoveryTimeStamp(timestamp=rts)])
