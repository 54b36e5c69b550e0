"""`pgwu pfcp`, the PGW-U's PFCP agent, driven over loopback by the tests of tests/pfcp/ (its fixtures,
`pin_dir`, `agent` and `assoc`, are in tests/pfcp/conftest.py):

    Agent(pin_dir, *extra)    a running `pgwu pfcp` on 127.0.0.1 and a client socket: req(), send(),
                              recv_raw(), no_answer(), stop()
    cause(resp), up_seid(resp), created_teid(resp), offending(resp), failed_rule(resp), ie(resp, cls)
    tables(pin_dir)           the bearer tables (`pgwu session list --json`)
    forwarding_config(dp)     a config under which the programs forward a PFCP-provisioned bearer
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time

import pytest
from scapy.contrib.pfcp import PFCP, IE_FSEID, IE_FTEID
from scapy.packet import Raw

from gtplab.dut.dataplane import Config, Nexthop, pgwu_binary
from gtplab.gtpu import packets as P
from tests.lib import pfcp_msgs as M
from tests.lib.pgwu import pgwu

PGWU = str(pgwu_binary())
UE = "10.45.0.7"


def tables(pin_dir: str) -> list[dict]:
    return json.loads(pgwu(pin_dir, "session", "list", "--json").stdout)["bearers"]


def _seq_of(b: bytes) -> int | None:
    """The sequence number in a PFCP header, None when the bytes are too short for one."""
    off = 12 if len(b) >= 1 and b[0] & 1 else 4
    return int.from_bytes(b[off:off + 3], "big") if len(b) >= off + 4 else None


class Agent:
    """A running `pgwu pfcp` and a client socket talking to it."""

    def __init__(self, pin_dir: str, *extra: str):
        self.pin_dir = pin_dir
        self.proc = subprocess.Popen([PGWU, "-d", pin_dir, "pfcp", "--listen", "127.0.0.1:0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([\d.]+):(\d+)", line)
        assert m, f"agent did not start: {line!r} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.addr = (m.group(1), int(m.group(2)))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(2)
        self.log: list[bytes] = []      # every datagram both ways, for the tshark check

    def send(self, pkt) -> None:
        b = bytes(pkt)
        self.log.append(("req", b))
        self.sock.sendto(b, self.addr)

    def recv_raw(self, timeout: float = 2) -> bytes:
        self.sock.settimeout(timeout)
        b = self.sock.recv(65535)
        self.log.append(("resp", b))
        return b

    def req(self, pkt) -> PFCP:
        """Send a request and return the answer with its sequence number (a late answer to an
        earlier request, on a loaded machine, is skipped)."""
        b = bytes(pkt)
        self.send(Raw(b))
        want = _seq_of(b)
        deadline = time.monotonic() + 2
        while True:
            r = self.recv_raw(max(0.01, deadline - time.monotonic()))
            if want is None or _seq_of(r) in (want, None):
                return PFCP(r)

    def no_answer(self, pkt, wait: float = 0.3) -> None:
        self.send(pkt)
        with pytest.raises(socket.timeout):
            self.recv_raw(wait)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.sock.close()
        return self.proc.stdout.read() + self.proc.stderr.read()

def ies(resp) -> list:
    return list(resp.payload.IE_list)


def ie(resp, cls):
    found = [i for i in ies(resp) if isinstance(i, cls)]
    return found[0] if found else None


def cause(resp) -> int:
    c = [i for i in ies(resp) if i.ietype == 19]
    assert c, f"no Cause in {resp.summary()}"
    return c[0].cause


def offending(resp) -> int | None:
    o = [i for i in ies(resp) if i.ietype == 40]
    return o[0].type if o else None


def failed_rule(resp) -> bytes | None:
    f = [i for i in ies(resp) if i.ietype == 114]
    return bytes(f[0])[4:] if f else None


def up_seid(resp) -> int:
    return ie(resp, IE_FSEID).seid


def created_teid(resp) -> int | None:
    for i in ies(resp):
        if i.ietype == 8:
            for sub in i.IE_list:
                if isinstance(sub, IE_FTEID):
                    return sub.TEID
    return None




def forwarding_config(dp) -> None:
    """The PGW-U's config on the agent's pin dir so that its programs forward (BPF_PROG_TEST_RUN)."""
    dp.set_config(Config(local_addr=M.GTPU_ADDR, csum=True, fib_cache=False, ue_pool=P.UE_POOL,
                         egress_vlan=(0, 0), restart_counter=0,
                         nexthop=(Nexthop(1001, P.PGW_ACCESS_MAC, "02:00:00:00:01:99"),
                                  Nexthop(1002, P.PGW_SGI_MAC, "02:00:00:00:02:02"))))
