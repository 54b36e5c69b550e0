"""`pgwu pfcp`, the PGW-U's PFCP agent, driven over loopback by the tests of tests/pfcp/ (its fixtures,
`pin_dir`, `agent` and `assoc`, are in tests/pfcp/conftest.py):

    Agent(pin_dir, *extra)    a running `pgwu pfcp` on 127.0.0.1 and a client socket: req(), send(),
                              recv_raw(), no_answer(), stop()
    cause(resp), up_seid(resp), created_teid(resp), offending(resp), failed_rule(resp), ie(resp, cls)
    usage_report(ie)          a Usage Report IE (78, 79, 80) as a dict
    tables(pin_dir)           the bearer tables (`pgwu session list --json`)
    forwarding_config(dp)     a config under which the programs forward a PFCP-provisioned bearer
"""

from __future__ import annotations

import json
import socket
import struct

import pytest
from scapy.contrib.pfcp import PFCP
from scapy.packet import Raw

from tests.lib import pfcp_smf as S
from tests.lib.pgwu import pgwu
# what the agent's tests share with those of deployed control planes (tests/lib/pfcp_smf.py): the
# binary, the readers of an answer, the forwarding config
from tests.lib.pfcp_smf import PGWU, cause, created, created_teid, forwarding_config, ies, offending, up_seid  # noqa: F401

UE = "10.45.0.7"


def tables(pin_dir: str) -> list[dict]:
    return json.loads(pgwu(pin_dir, "session", "list", "--json").stdout)["bearers"]


class Agent(S.Agent):
    """A running `pgwu pfcp` (tests/lib/pfcp_smf.Agent) and one client socket talking to it, which
    logs every datagram both ways (for the tshark check)."""

    def __init__(self, pin_dir: str, *extra: str):
        super().__init__(pin_dir, *extra)
        self.pin_dir = pin_dir
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.log: list[tuple[str, bytes]] = []

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
        earlier request, on a loaded machine, is skipped); both logged."""
        b = bytes(pkt)
        self.send(Raw(b))
        return PFCP(S.answer_to(b, self.recv_raw))

    def no_answer(self, pkt, wait: float = 0.3) -> None:
        self.send(pkt)
        with pytest.raises(socket.timeout):
            self.recv_raw(wait)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> str:
        out = super().stop()
        self.sock.close()
        return out


def ie(resp, cls):
    found = [i for i in ies(resp) if isinstance(i, cls)]
    return found[0] if found else None


def failed_rule(resp) -> bytes | None:
    f = [i for i in ies(resp) if i.ietype == 114]
    return bytes(f[0])[4:] if f else None


def usage_report(ie) -> dict:
    """A Usage Report IE (78, 79 or 80) as {urr, seqn, trigger (octets 5-7 as int), volume (octets
    total/ul/dl, packets total/ul/dl) or None, duration or None, start, end}."""
    sub = {x.ietype: bytes(x)[4:] for x in ie.IE_list}
    vol = None
    if 66 in sub:
        v = sub[66]
        assert v[0] & 0x3F == 0x3F, f"volume flags {v[0]:#x}"
        vol = struct.unpack("!6Q", v[1:49])
    return {"urr": struct.unpack("!I", sub[81])[0], "seqn": struct.unpack("!I", sub[104])[0],
            "trigger": int.from_bytes(sub[63][:3], "big"), "volume": vol,
            "duration": struct.unpack("!I", sub[67])[0] if 67 in sub else None,
            "start": struct.unpack("!I", sub[75])[0] if 75 in sub else None,
            "end": struct.unpack("!I", sub[76])[0]}
