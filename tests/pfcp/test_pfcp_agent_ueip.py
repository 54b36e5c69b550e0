"""`pgwu pfcp` choosing the UE's address (issue 32): a PDR's UE IP Address with CHV4 / CHV6 (TS 29.244
8.2.62, 5.21) gets an IPv4 address from `--ue-pool A/LEN`, a /64 from `--ue-pool6 P/LEN`, returned in the
Created PDR (7.5.3.2) and installed as an address the CP gave; a deletion frees it; a used-up pool is cause
79 (all dynamic addresses are occupied), no pool is 73; the UEIP feature (8.2.25 octet 7 bit 3) only with a
pool. docs/pfcp.md (UE IP Address) and docs/ipv6.md say what is built.

Each test has its own PGW-U and agent (tests/pfcp/conftest.py); what was installed is read from
`pgwu session list --json`, the downlink through BPF_PROG_TEST_RUN.
"""

from __future__ import annotations

import socket
import struct
import subprocess

import pytest
from scapy.contrib.pfcp import IE_CreatePDR, IE_FAR_Id, IE_FSEID, IE_PDI, IE_PDR_Id, IE_Precedence, IE_SourceInterface
from scapy.packet import Raw

from gtplab.dut.dataplane import Dataplane
from gtplab.gtpu import packets as P
from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import PGWU, Agent, cause, failed_rule, ies, tables, up_seid
from tests.lib.pfcp_smf import forwarding_config
from tests.lib.pgwu import pgwu

pytestmark = pytest.mark.bpf

POOL4 = "10.45.9.0/30"                 # two addresses: .1 and .2 (not the network's, not the broadcast)
POOL6 = "fd47:7470:0:8::/63"           # two /64s: fd47:7470:0:8::/64 and fd47:7470:0:9::/64
A1, A2 = "10.45.9.1", "10.45.9.2"
P1, P2 = "fd47:7470:0:8::/64", "fd47:7470:0:9::/64"
V6, V4, SD, IPV6D, CHV4, CHV6, IPV6PL = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40


def ue_ie(flags: int, extra: bytes = b"") -> Raw:
    """UE IP Address (8.2.62) as octets: Scapy's IE has no CHV4/CHV6 and would add an address after V4/V6."""
    body = bytes([flags]) + extra
    return Raw(struct.pack("!HH", 93, len(body)) + body)


def establish(agent, seq: int, cp_seid: int, chv: int, ul: bool = True, extra: bytes = b""):
    """One bearer, its downlink PDR's UE IP Address asking for what chv names (CHV4 and/or CHV6, each
    with its V bit), and the same in the uplink PDR (SD 0) when ul."""
    want = chv | (V4 if chv & CHV4 else 0) | (V6 if chv & CHV6 else 0)
    ul_pdr = M.ul_pdr(None, None, extra=[ue_ie(want, extra)] if ul else ())
    dl_pdr = IE_CreatePDR(IE_list=[IE_PDR_Id(id=M.DL_PDR), IE_Precedence(precedence=100),
                                   IE_PDI(IE_list=[IE_SourceInterface(interface=1), ue_ie(want | SD, extra)]),
                                   IE_FAR_Id(id=M.DL_FAR)])
    return agent.req(M.establish(seq, cp_seid, "", ies=[
        M.node_id(), IE_FSEID(v4=1, seid=cp_seid, ipv4=M.CP_ADDR), ul_pdr, dl_pdr, M.ul_far(),
        M.dl_far(M.SGW_ADDR, 0x100 + seq)]))


def created_ue(resp) -> dict[int, tuple]:
    """{PDR ID: (flags, IPv4 or None, IPv6 or None)} of the UE IP Addresses in the Created PDRs"""
    out = {}
    for ie in ies(resp):
        if ie.ietype != 8:
            continue
        raw = bytes(ie)[4:]
        sub, off = {}, 0
        while off + 4 <= len(raw):
            t, n = struct.unpack_from("!HH", raw, off)
            sub[t] = raw[off + 4:off + 4 + n]
            off += 4 + n
        if 93 not in sub:
            continue
        u, o = sub[93], 1
        v4 = v6 = None
        if u[0] & V4:
            v4, o = socket.inet_ntoa(u[o:o + 4]), o + 4
        if u[0] & V6:
            v6 = socket.inet_ntop(socket.AF_INET6, u[o:o + 16])
        out[struct.unpack("!H", sub[56])[0]] = (u[0], v4, v6)
    return out


def rule(resp):
    fr = failed_rule(resp)
    return None if fr is None else (fr[0] & 0x1f, int.from_bytes(fr[1:], "big"))


def up_features(resp) -> bytes:
    [f] = [bytes(i)[4:] for i in ies(resp) if i.ietype == 43]
    return f


@pytest.fixture
def pools(pin_dir):
    """The agent with both pools, associated."""
    a = Agent(pin_dir, "--ue-pool", POOL4, "--ue-pool6", POOL6)
    try:
        assert cause(a.req(M.assoc_setup(seq=1))) == 1
        yield a
    finally:
        a.stop()


# ---- CHV4 / CHV6 chosen, returned, installed ------------------------------------------------------

def test_chv4_address_chosen_from_the_pool_returned_and_installed(pools, pin_dir):
    r = establish(pools, 2, 0x10, CHV4)
    assert cause(r) == 1
    # each PDR that asked gets it back, with its own SD bit
    assert created_ue(r) == {M.UL_PDR: (V4, A1, None), M.DL_PDR: (V4 | SD, A1, None)}
    [b] = tables(pin_dir)
    assert (b["ue"], b["owner"]) == (A1, "pfcp")
    with Dataplane(pin_dir) as dp:
        forwarding_config(dp)
        assert dp.run_sgi(bytes(P.downlink_ip(ue=A1, size=300))).verdict == "redirect"


def test_chv4_and_chv6_in_one_ie_choose_both(pools, pin_dir):
    r = establish(pools, 2, 0x10, CHV4 | CHV6, ul=False)
    assert cause(r) == 1
    assert created_ue(r) == {M.DL_PDR: (V4 | V6 | SD, A1, "fd47:7470:0:8::")}
    [b] = tables(pin_dir)
    assert (b["ue"], b["ue6"]) == (A1, P1)


@pytest.mark.parametrize("chv,key,first,second", [(CHV4, "ue", A1, A2), (CHV6, "ue6", P1, P2)],
                         ids=["chv4", "chv6"])
def test_used_up_pool_refused_79_and_a_deletion_frees(pools, pin_dir, chv, key, first, second):
    r1 = establish(pools, 2, 0x10, chv)
    r2 = establish(pools, 3, 0x11, chv)
    assert (cause(r1), cause(r2)) == (1, 1)
    assert sorted(b[key] for b in tables(pin_dir)) == [first, second]
    before = tables(pin_dir)
    r3 = establish(pools, 4, 0x12, chv)
    assert (cause(r3), rule(r3)) == (79, None)          # all dynamic addresses are occupied
    assert tables(pin_dir) == before
    assert cause(pools.req(M.delete(5, up_seid(r1)))) == 1
    r4 = establish(pools, 6, 0x13, chv)
    assert cause(r4) == 1
    assert sorted(b[key] for b in tables(pin_dir)) == [first, second]   # the freed one, again
    assert "has no free" in pools.stop()


def test_an_address_a_bearer_has_is_not_chosen(pools, pin_dir):
    """`pgwu session add`'s bearer holds 10.45.9.1 and fd47:7470:0:8::/64: the pools skip them."""
    pgwu(pin_dir, "session", "add", "--teid", "0x77", "--ue", A1, "--sgw", M.SGW_ADDR, "--sgw-teid", "5",
         "--ue6", P1)
    r = establish(pools, 2, 0x10, CHV4 | CHV6)
    assert cause(r) == 1
    assert created_ue(r)[M.DL_PDR] == (V4 | V6 | SD, A2, "fd47:7470:0:9::")
    assert cause(establish(pools, 3, 0x11, CHV4)) == 79


# ---- refusals --------------------------------------------------------------------------------------

NO_POOL = [((), CHV4, "no --ue-pool:"), ((), CHV6, "no --ue-pool6"), (("--ue-pool", POOL4), CHV6, "no --ue-pool6"),
           (("--ue-pool6", POOL6), CHV4, "no --ue-pool:")]


def test_chv_without_its_pool_refused_73(pin_dir):
    """Each row (agent options, what the PDR asks, the log line) with an agent of its own on one PGW-U."""
    for opts, chv, log in NO_POOL:
        a = Agent(pin_dir, *opts)
        try:
            assert cause(a.req(M.assoc_setup(seq=1))) == 1
            r = establish(a, 2, 0x10, chv, ul=False)
            assert (cause(r), rule(r), tables(pin_dir)) == (73, (0, M.DL_PDR), []), (opts, chv)
        finally:
            out = a.stop()
        assert log in out, (opts, chv, out)


def test_chv6_other_than_a_64_refused_73(pools, pin_dir):
    for seq, (flag, extra) in enumerate([(IPV6D, bytes([4])), (IPV6PL, bytes([56])), (IPV6PL, bytes([128]))]):
        r = establish(pools, 2 + seq, 0x10 + seq, CHV6 | flag, ul=False, extra=extra)
        assert (cause(r), rule(r), tables(pin_dir)) == (73, (0, M.DL_PDR), []), (flag, extra)


def test_ueip_feature_only_with_a_pool(pin_dir, pools):
    assert up_features(pools.req(M.assoc_setup(seq=9)))[2] & 0x04       # octet 7 bit 3: UEIP
    plain = Agent(pin_dir)
    try:
        f = up_features(plain.req(M.assoc_setup(seq=1)))
        assert len(f) < 3 or not f[2] & 0x04
    finally:
        plain.stop()


BAD_POOL = [
    ("--ue-pool6", "fd47::/39", "LEN 40..64"),
    ("--ue-pool6", "fd47::/65", "LEN 40..64"),
    ("--ue-pool6", "fd47::1/64", "host bits"),
    ("--ue-pool6", "fe80::/64", "not a unicast prefix"),
    ("--ue-pool6", "nonsense", "expected an IPv6 prefix"),
    ("--ue-pool", "10.46.0.0/24", "not inside the PGW-U's UE pool 10.45.0.0/16"),
    ("--ue-pool", "10.0.0.0/7", "at most"),
]


def test_bad_pool_one_line_exit_2(pin_dir):
    for opt, arg, why in BAD_POOL:
        p = subprocess.run([PGWU, "-d", pin_dir, "pfcp", "--listen", "127.0.0.1:0", opt, arg],
                           capture_output=True, text=True, timeout=10)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and why in lines[0], (opt, arg, p.returncode, p.stderr)
