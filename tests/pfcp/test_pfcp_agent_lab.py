"""`pgwu pfcp` in the namespace lab (gtplab.lab.topology.Lab: the XDP PGW-U attached natively to
veths, a generator namespace on the other ends): sessions set up over PFCP forward real traffic.

- An SMF-shaped session (tests/lib/pfcp_smf_msgs.py: 3 QERs, 2 URRs, SDF filters, the downlink FAR
  created DROP with a placeholder outer header, then made to forward by an Update FAR with an Update
  URR) forwards uplink G-PDUs decapsulated to SGi at once, drops downlink until the modification,
  then sends it to the RAN's tunnel with the flow's QFI; its usage reports count what was forwarded.
- A control plane that restarts (same address and port, a new Recovery Time Stamp, sequence numbers
  from 1) gets its new sessions installed: they forward both ways, its old ones no longer do.

Frames are sent and captured with AF_PACKET sockets on the generator's ports (send_frames and
packet_socket of tests/lib/lab.py); the agent runs in the host namespace on 127.0.0.1 (it only writes the pinned
maps). The lab, the agent and the sockets are removed afterwards, also on failure.
"""

from __future__ import annotations

import re
import secrets
import signal
import socket
import subprocess
import time

import pytest
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from tests.lib import pfcp_msgs as M
from tests.lib import pfcp_smf_msgs as S
from tests.lib.lab import dut_counters, packet_socket, send_frames
from gtplab.dut.dataplane import pgwu_binary
from gtplab.gtpu import packets as P

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab():
    from gtplab.lab.topology import Lab
    with Lab.up() as lab:
        yield lab


@pytest.fixture
def agent(lab):
    proc = subprocess.Popen([str(pgwu_binary()), "-d", lab.pin_dir, "pfcp", "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"listening on ([\d.]+):(\d+)", proc.stdout.readline())
        assert m, proc.stderr.read() if proc.poll() is not None else "no listening line"
        yield (m.group(1), int(m.group(2)))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class CP:
    def __init__(self, agent, port: int = 0):
        self.agent = agent
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.settimeout(2)
        self.port = self.sock.getsockname()[1]

    def req(self, pkt):
        from scapy.contrib.pfcp import PFCP
        b = bytes(pkt)
        seq = int.from_bytes(b[12:15] if b[0] & 1 else b[4:7], "big")
        self.sock.sendto(b, self.agent)
        deadline = time.monotonic() + 2
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            r = self.sock.recv(65535)
            if int.from_bytes(r[12:15] if r[0] & 1 else r[4:7], "big") == seq:
                return PFCP(r)

    def close(self):
        self.sock.close()


def ie(resp, t: int):
    found = [x for x in resp.payload.IE_list if x.ietype == t]
    return found[0] if found else None


def cause(resp) -> int:
    return ie(resp, 19).cause


def created_teid(resp) -> int:
    return [x for x in ie(resp, 8).IE_list if x.ietype == 21][0].TEID


def up_seid(resp) -> int:
    return ie(resp, 57).seid


def capture(lab, port: int, frames: list[bytes], send_port: int, match, want: int,
            timeout: float = 5.0, quiet: float = 0.5) -> list[Ether]:
    """Send frames out of generator port send_port, return the frames generator port `port` received
    that match: until `want` arrived (then `quiet` s more, so extra ones show), at most `timeout`."""
    got = []
    with packet_socket(lab, port, timeout=0.05) as s:
        send_frames(lab, send_port, frames)
        deadline, done_at = time.monotonic() + timeout, None
        while time.monotonic() < deadline and (done_at is None or time.monotonic() - done_at < quiet):
            try:
                f, addr = s.recvfrom(65535)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            e = Ether(f)
            if match(e):
                got.append(e)
                if len(got) >= want and done_at is None:
                    done_at = time.monotonic()
    return got


def uplink(lab, teid: int, ue: str, marker: bytes, n: int, qfi: int | None = None) -> list[Ether]:
    a, p0 = lab.addressing, lab.ports[0]
    frames = [bytes(P.gpdu(teid, ue, a.pdn(1), inner=P.ip_packet(ue, a.pdn(1), payload=marker, ip_id=i),
                           outer_src=a.sgw(0), outer_dst=a.dut_access, src_mac=p0.mac, dst_mac=p0.dut_mac,
                           **({"ext": [P.pdu_session_container(qfi)]} if qfi is not None else {})))
              for i in range(n)]
    return capture(lab, 1, frames, 0, lambda e: IP in e and e[IP].src == ue and marker in bytes(e), n)


def downlink(lab, ue: str, marker: bytes, n: int) -> list[Ether]:
    a, p1 = lab.addressing, lab.ports[1]
    frames = [bytes(P.downlink_ip(ue=ue, src=a.pdn(1), src_mac=p1.mac, dst_mac=p1.dut_mac, ip_id=i, payload=marker))
              for i in range(n)]
    return capture(lab, 0, frames, 1, lambda e: GTP_U_Header in e and marker in bytes(e), n)


def dl_qfi(e: Ether) -> int | None:
    g = bytes(e[GTP_U_Header])
    return g[14] & 0x3F if g[0] & 0x04 else None


def test_smf_shaped_session_forwards_both_ways(lab, agent):
    a = lab.addressing
    ue, n = a.ue(0), 5
    cp = CP(agent)
    try:
        assert cause(cp.req(M.assoc_setup(seq=1))) == 1
        r = cp.req(S.establish(2, 0x51, ue))
        assert cause(r) == 1
        seid, teid = up_seid(r), created_teid(r)
        assert [x for x in ie(r, 8).IE_list if x.ietype == 21][0].ipv4 == a.dut_access
        mark = b"SMF-UL-" + secrets.token_hex(4).encode()
        got = uplink(lab, teid, ue, mark, n, qfi=S.QFI)
        assert len(got) == n, f"{len(got)}/{n} uplink G-PDUs came out on SGi"
        assert GTP_U_Header not in got[0] and got[0][IP].dst == a.pdn(1)
        before = dut_counters(lab)
        dmark = b"SMF-DL-" + secrets.token_hex(4).encode()
        assert downlink(lab, ue, dmark, 3) == [], "the DROP FAR forwarded"
        drops = {k: v - before.get(k, 0) for k, v in dut_counters(lab).items() if "unknown_ue" in k.lower()}
        assert sum(drops.values()) == 3, drops

        r = cp.req(S.modify_forward(3, seid, sgw=a.sgw(0), sgw_teid=a.sgw_teid(0)))
        assert cause(r) == 1
        got = downlink(lab, ue, dmark, n)
        assert len(got) == n, f"{len(got)}/{n} downlink packets came out in G-PDUs"
        e = got[0]
        assert (e[IP].src, e[IP].dst, e[UDP].dport) == (a.dut_access, a.sgw(0), 2152)
        assert (e[GTP_U_Header].teid, dl_qfi(e)) == (a.sgw_teid(0), S.QFI)
        assert e[GTP_U_Header].payload[IP].dst == ue
        assert len(uplink(lab, teid, ue, mark, n, qfi=S.QFI)) == n

        r = cp.req(M.delete(4, seid))
        assert cause(r) == 1
        reports = {x.IE_list[0].id: bytes([y for y in x.IE_list if y.ietype == 66][0])[5:53]
                   for x in r.payload.IE_list if x.ietype == 79}
        assert sorted(reports) == [S.URR_PERIODIC, S.URR_VOLUME]
        for vol in reports.values():
            pkts = [int.from_bytes(vol[i:i + 8], "big") for i in (24, 32, 40)]
            assert pkts == [3 * n, 2 * n, n], pkts        # the dropped downlink packets are not counted
        assert lab.pgwu_json("session", "list")["bearers"] == []
    finally:
        cp.close()


def test_restarted_cp_sessions_forward(lab, agent):
    a = lab.addressing
    cp = CP(agent)
    port = cp.port
    ues = [a.ue(10 + i) for i in range(3)]
    try:
        assert cause(cp.req(M.assoc_setup(seq=1))) == 1
        old = []
        for i, ue in enumerate(ues):
            r = cp.req(M.establish(2 + i, 0x100 + i, ue, sgw=a.sgw(i), sgw_teid=a.sgw_teid(i)))
            assert cause(r) == 1
            old.append(created_teid(r))
        mark = b"OLD-" + secrets.token_hex(4).encode()
        assert len(uplink(lab, old[0], ues[0], mark, 2)) == 2
    finally:
        cp.close()                                          # the CP goes away

    cp = CP(agent, port)                                    # ... and comes back, restarted
    try:
        assert cause(cp.req(M.assoc_setup(seq=1, rts=M.CP_RTS + 3600))) == 1
        new = []
        for i, ue in enumerate(ues):
            r = cp.req(M.establish(2 + i, 0x200 + i, ue, sgw=a.sgw(i), sgw_teid=a.sgw_teid(i) + 0x1000))
            assert (cause(r), r.seid) == (1, 0x200 + i), "answered from before the restart"
            new.append(created_teid(r))
        assert not set(new) & set(old)
        for i, ue in enumerate(ues):
            mark = f"NEW-{i}-".encode() + secrets.token_hex(4).encode()
            assert len(uplink(lab, new[i], ue, mark, 3)) == 3, f"session {i}: uplink"
            got = downlink(lab, ue, mark, 3)
            assert len(got) == 3 and {e[GTP_U_Header].teid for e in got} == {a.sgw_teid(i) + 0x1000}, \
                f"session {i}: downlink"
        assert uplink(lab, old[0], ues[0], b"STALE-" + secrets.token_hex(4).encode(), 2) == [], \
            "the restarted CP's old session still forwards"
    finally:
        cp.close()
