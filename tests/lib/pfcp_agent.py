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
import socket

import pytest
from scapy.contrib.pfcp import PFCP
from scapy.packet import Raw

from tests.lib import pfcp_smf as S
from tests.lib.pgwu import pgwu
# what the agent's tests share with those of deployed control planes (tests/lib/pfcp_smf.py): the
# binary, the readers of an answer, the forwarding config
from tests.lib.pfcp_smf import PGWU, cause, created_teid, forwarding_config, ies, offending, up_seid  # noqa: F401

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
