"""The PGW-U's next hop from the kernel (bpf_fib_lookup), tested in place in a namespace of our own.

A unique netns holds two veth pairs: a0-a1 (access: GTP-U address 192.0.2.1/24) and s0-s1 (SGi:
198.51.100.1/24), forwarding on, permanent neighbours, a routed prefix, blackhole/unreachable/
prohibit routes and an MTU-locked route. The programs run with BPF_PROG_TEST_RUN and ingress_ifindex
of a0/s0, from a thread that joined the netns (gtplab.kernel.netns.run_in), so the lookup sees its
routes. Checked: the resolved next hop (MACs, egress: TX when it is the ingress device, and the
cache entry's ifindex), PASS_NO_NEIGH / PASS_FIB_OTHER with the packet the spec says, DROP_NO_ROUTE,
and that the cache follows neighbour and route changes (fib_gen).
"""

from __future__ import annotations

import json
import secrets
import socket
import struct
import subprocess
import time

import pytest

from gtplab.gtpu import packets as P
from gtplab.dut.dataplane import Config, Nexthop, VERDICTS, REASONS
from gtplab.kernel.netns import run_in as run_in_netns
from tests.lib import oracle as O
from tests.lib.pgwu import pgwu

pytestmark = pytest.mark.lab

PDN_NEAR = "198.51.100.10"     # on the SGi link, permanent neighbour
PDN_NONEIGH = "198.51.100.20"  # on the SGi link, no neighbour
PDN_FAR = "203.0.113.10"       # via the SGi router 198.51.100.254
ROUTER = "198.51.100.254"
ROUTER2 = "198.51.100.253"
ACC_ROUTER = "192.0.2.254"
BLACKHOLE, UNREACH, PROHIBIT = "203.0.113.66", "203.0.113.77", "203.0.113.88"
MTU_DST = "203.0.113.200"      # route with mtu lock 1000
SGW_MTU = "192.0.2.77"         # an SGW behind a route with mtu lock 1000 (access side)
UE_MTU, TEID_MTU, SGW_TEID_MTU = "10.45.0.77", 0x777, 0x7777
M_NEAR, M_ROUTER, M_ROUTER2, M_SGW, M_ACC_ROUTER = ("02:aa:00:00:00:10", "02:aa:00:00:00:fe", "02:aa:00:00:00:fd",
                                                     "02:bb:00:00:00:02", "02:bb:00:00:00:fe")
M_NEAR2 = "02:aa:00:00:01:10"


def ip(ns, *args, check=True):
    return subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, check=check, timeout=30)


def link(ns, dev):
    j = json.loads(ip(ns, "-j", "link", "show", "dev", dev).stdout)[0]
    return j["ifindex"], j["address"]


@pytest.fixture(scope="module")
def ns():
    name = f"gtplab-fib-{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        ip(name, "link", "add", "a0", "type", "veth", "peer", "name", "a1")
        ip(name, "link", "add", "s0", "type", "veth", "peer", "name", "s1")
        for d in ("lo", "a0", "a1", "s0", "s1"):
            ip(name, "link", "set", d, "up")
        ip(name, "addr", "add", "192.0.2.1/24", "dev", "a0")
        ip(name, "addr", "add", "198.51.100.1/24", "dev", "s0")
        for k in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.forwarding=1"):
            subprocess.run(["nsenter", f"--net=/run/netns/{name}", "--", "sysctl", "-qw", k], check=True, timeout=30)
        ip(name, "neigh", "add", PDN_NEAR, "lladdr", M_NEAR, "dev", "s0", "nud", "permanent")
        ip(name, "neigh", "add", ROUTER, "lladdr", M_ROUTER, "dev", "s0", "nud", "permanent")
        ip(name, "neigh", "add", ROUTER2, "lladdr", M_ROUTER2, "dev", "s0", "nud", "permanent")
        ip(name, "neigh", "add", P.SGW_ADDR, "lladdr", M_SGW, "dev", "a0", "nud", "permanent")
        ip(name, "neigh", "add", ACC_ROUTER, "lladdr", M_ACC_ROUTER, "dev", "a0", "nud", "permanent")
        ip(name, "route", "add", "203.0.113.0/24", "via", ROUTER, "dev", "s0")
        ip(name, "route", "add", "blackhole", f"{BLACKHOLE}/32")
        ip(name, "route", "add", "unreachable", f"{UNREACH}/32")
        ip(name, "route", "add", "prohibit", f"{PROHIBIT}/32")
        ip(name, "route", "add", f"{MTU_DST}/32", "via", ROUTER, "dev", "s0", "mtu", "lock", "1000")
        ip(name, "route", "add", f"{SGW_MTU}/32", "via", ACC_ROUTER, "dev", "a0", "mtu", "lock", "1000")
        # the neighbour the spec test adds and deletes
        ip(name, "neigh", "add", PDN_NONEIGH, "lladdr", "02:aa:00:00:00:20", "dev", "s0", "nud", "permanent")
        ip(name, "neigh", "del", PDN_NONEIGH, "dev", "s0")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], timeout=30)


@pytest.fixture(scope="module")
def devs(ns):
    return {d: link(ns, d) for d in ("a0", "s0")}


@pytest.fixture
def dp(dataplane):
    return dataplane


def watcher(dp) -> int:
    """The tgid registered in fib_gen[1] by a live `pgwu watch`, 0 when there is none."""
    v = dp.maps["fib_gen"].lookup(struct.pack("=I", 1))
    return struct.unpack("=Q", v)[0] if v is not None else 0


def start_watch(ns, pin_dir, dp) -> subprocess.Popen:
    """`pgwu watch` on pin_dir in the netns, once it has registered itself."""
    from gtplab.dut.dataplane import pgwu_binary
    proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "--", str(pgwu_binary()), "-d", pin_dir, "watch"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    while not watcher(dp):
        if proc.poll() is not None:
            pytest.fail(f"pgwu watch exited ({proc.returncode}): {proc.stderr.read().strip()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("pgwu watch runs but did not register itself in fib_gen[1]")
        time.sleep(0.02)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def watch(ns, pgwu_pin_dir, dataplane):
    """`pgwu watch` in the test netns: it keeps the route-change socket, and the data plane trusts
    its FIB cache only while a watcher is registered (the cache variants need it running)."""
    proc = start_watch(ns, pgwu_pin_dir, dataplane)
    try:
        yield proc
    finally:
        stop(proc)


@pytest.fixture(params=[False, True], ids=["nocache", "cache"])
def fib_cache(request):
    """Both ways: without the cache, and with it (then `pgwu watch` must be running)."""
    if request.param:
        request.getfixturevalue("watch")
    return request.param


def setup(dp, fib_cache: bool):
    dp.set_config(Config(local_addr=P.PGW_ADDR, csum=True, fib_cache=fib_cache, ue_pool=P.UE_POOL,
                         nexthop=(Nexthop(), Nexthop())))
    dp.flush_bearers()
    dp.flush_fib_cache()
    dp.add_bearer(P.TEID_UL, P.UE_ADDR, P.SGW_ADDR, P.TEID_DL)


def run(dp, ns, prog, frame, ifindex):
    """Run in the netns; returns (verdict, [(reason, verdict)], output)."""
    before = dp.stats_array()
    fn = dp.run_access if prog == "access" else dp.run_sgi
    res = run_in_netns(ns, fn, bytes(frame), ingress_ifindex=ifindex)
    after = dp.stats_array()
    counted = [(REASONS[i // 5], VERDICTS[i % 5]) for i, (a, b) in enumerate(zip(before, after)) if a != b]
    return res.verdict, counted, res.data


def expect_ul(dp, ns, devs, frame, smac, dmac, verdict="redirect"):
    v, counted, out = run(dp, ns, "access", frame, devs["a0"][0])
    assert (v, counted) == (verdict, [("ul_fwd", verdict)])
    exp = O.decap_expected(O.gpdu_inner(bytes(frame)), P.mac_bytes(smac), P.mac_bytes(dmac), None)
    assert out == exp, O.mismatch_report(exp, out)


def cache_entry(dp, dst: str, ingress: int):
    """(egress ifindex, smac, dmac) of the fib_cache entry for (dst, ingress), or None."""
    slot = dp.fib_cache_slot(dst, ingress)
    if slot is None:
        return None
    _gen, eg, s, d = slot
    return eg, s, d


def test_resolved_next_hops(dp, ns, devs, fib_cache):
    setup(dp, fib_cache)
    a0, s0 = devs["a0"], devs["s0"]
    # uplink to a neighbour on SGi, and to a prefix via the router
    expect_ul(dp, ns, devs, P.gpdu(dst=PDN_NEAR, size=256), s0[1], M_NEAR)
    expect_ul(dp, ns, devs, P.gpdu(dst=PDN_FAR, size=256), s0[1], M_ROUTER)
    # again: served from the cache when on, same result
    expect_ul(dp, ns, devs, P.gpdu(dst=PDN_FAR, size=512), s0[1], M_ROUTER)
    if fib_cache:
        ent = cache_entry(dp, PDN_FAR, a0[0])
        assert ent is not None, "fib cache on, but no entry for (dst, ingress)"
        assert ent == (s0[0], P.mac_bytes(s0[1]), P.mac_bytes(M_ROUTER))
    # uplink whose next hop is out of the ingress device itself: XDP_TX
    expect_ul(dp, ns, devs, P.gpdu(dst="192.0.2.254", size=256), a0[1], M_ACC_ROUTER, verdict="tx")
    # downlink: outer destination is the SGW on the access link
    f = bytes(P.downlink_ip(size=300, l4="tcp", df=True))
    v, counted, out = run(dp, ns, "sgi", f, s0[0])
    assert (v, counted) == ("redirect", [("dl_fwd", "redirect")])
    exp = O.encap_expected(O.ip_payload(f), smac=P.mac_bytes(a0[1]), dmac=P.mac_bytes(M_SGW), vlan=None,
                           local=P.PGW_ADDR, sgw=P.SGW_ADDR, teid=P.TEID_DL, csum=True, ip_id=0)
    assert out == exp, O.mismatch_report(exp, out)


def test_no_neigh_passes_decapsulated(dp, ns, devs, fib_cache):
    setup(dp, fib_cache)
    f = bytes(P.gpdu(dst=PDN_NONEIGH, size=256, vlan=7))
    v, counted, out = run(dp, ns, "access", f, devs["a0"][0])
    assert (v, counted) == ("pass", [("pass_no_neigh", "pass")])
    exp = f[:12] + b"\x08\x00" + O.gpdu_inner(f)  # original MACs, tag removed, inner untouched
    assert out == exp, O.mismatch_report(exp, out)
    u = dp.ul_bearer(P.TEID_UL)
    assert (u.packets, u.bytes) == (0, 0), "usage counted on a passed packet"


def test_no_neigh_passes_encapsulated(dp, ns, devs, fib_cache):
    setup(dp, fib_cache)
    ip(ns, "neigh", "del", P.SGW_ADDR, "dev", "a0")
    try:
        f = bytes(P.downlink_ip(size=256, vlan=9, df=True))
        v, counted, out = run(dp, ns, "sgi", f, devs["s0"][0])
        assert (v, counted) == ("pass", [("pass_no_neigh", "pass")])
        enc = O.encap_expected(O.ip_payload(f), smac=b"\0" * 6, dmac=b"\0" * 6, vlan=None, local=P.PGW_ADDR,
                               sgw=P.SGW_ADDR, teid=P.TEID_DL, csum=True, ip_id=0)
        exp = f[:12] + enc[12:]  # received dst/src, tag removed
        assert out == exp, O.mismatch_report(exp, out)
    finally:
        ip(ns, "neigh", "replace", P.SGW_ADDR, "lladdr", M_SGW, "dev", "a0", "nud", "permanent")


@pytest.mark.parametrize("dst", [BLACKHOLE, UNREACH, PROHIBIT], ids=["blackhole", "unreachable", "prohibit"])
def test_no_route_drops(dp, ns, devs, dst, fib_cache):
    setup(dp, fib_cache)
    v, counted, _ = run(dp, ns, "access", P.gpdu(dst=dst, size=200), devs["a0"][0])
    assert (v, counted) == ("drop", [("drop_no_route", "drop")])


def test_fib_other(dp, ns, devs, fib_cache):
    setup(dp, fib_cache)
    a0 = devs["a0"][0]
    # local delivery (the gateway's own SGi address): the kernel handles it, decapsulated
    f = bytes(P.gpdu(dst="198.51.100.1", size=200))
    v, counted, out = run(dp, ns, "access", f, a0)
    assert (v, counted) == ("pass", [("pass_fib_other", "pass")])
    exp = f[:12] + b"\x08\x00" + O.gpdu_inner(f)
    assert out == exp, O.mismatch_report(exp, out)
    # fragmentation needed: route MTU 1000; a small packet first (fills the cache when on)
    expect_ul(dp, ns, devs, P.gpdu(dst=MTU_DST, size=300), devs["s0"][1], M_ROUTER)
    v, counted, _ = run(dp, ns, "access", P.gpdu(dst=MTU_DST, size=1200), a0)
    assert (v, counted) == ("pass", [("pass_fib_other", "pass")]), "inner 1150 bytes over a 1000-byte route MTU"


def test_forwarding_disabled_drops(dp, ns, devs):
    setup(dp, False)
    subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "sysctl", "-qw", "net.ipv4.conf.a0.forwarding=0"],
                   check=True, timeout=30)
    try:
        v, counted, _ = run(dp, ns, "access", P.gpdu(dst=PDN_NEAR, size=200), devs["a0"][0])
        assert (v, counted) == ("drop", [("drop_no_route", "drop")])
    finally:
        subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "sysctl", "-qw",
                        "net.ipv4.conf.a0.forwarding=1"], check=True, timeout=30)


def poll(fn, deadline_s=2.0):
    """fn() until it returns True or the deadline passes; returns the last value."""
    end = time.monotonic() + deadline_s
    while True:
        r = fn()
        if r or time.monotonic() > end:
            return r
        time.sleep(0.02)


def test_cache_follows_kernel_changes(dp, ns, devs, fib_cache):
    setup(dp, fib_cache)
    a0, s0 = devs["a0"], devs["s0"]
    near = bytes(P.gpdu(dst=PDN_NEAR, size=200))
    far = bytes(P.gpdu(dst=PDN_FAR, size=200))

    def dmac_of(frame):
        v, counted, out = run(dp, ns, "access", frame, a0[0])
        return v, counted, out[:6], out[6:12]

    try:
        assert dmac_of(near) == ("redirect", [("ul_fwd", "redirect")], P.mac_bytes(M_NEAR), P.mac_bytes(s0[1]))
        if fib_cache:
            assert cache_entry(dp, PDN_NEAR, a0[0]) is not None, "fib cache on, but the lookup was not cached"
        # the neighbour's MAC changes
        ip(ns, "neigh", "replace", PDN_NEAR, "lladdr", M_NEAR2, "dev", "s0", "nud", "permanent")
        assert poll(lambda: dmac_of(near)[2] == P.mac_bytes(M_NEAR2)), "neighbour MAC change not followed"
        # the neighbour goes away: the kernel must resolve it
        ip(ns, "neigh", "del", PDN_NEAR, "dev", "s0")
        assert poll(lambda: dmac_of(near)[1] == [("pass_no_neigh", "pass")]), "neighbour delete not followed"

        assert dmac_of(far)[2] == P.mac_bytes(M_ROUTER)
        # the route changes to another gateway on the same link
        ip(ns, "route", "replace", "203.0.113.0/24", "via", ROUTER2, "dev", "s0")
        assert poll(lambda: dmac_of(far)[2] == P.mac_bytes(M_ROUTER2)), "route change not followed"
        # the route moves to the access link: egress == ingress -> TX with a0's MAC
        ip(ns, "route", "replace", "203.0.113.0/24", "via", ACC_ROUTER, "dev", "a0")
        assert poll(lambda: dmac_of(far)[:4] == ("tx", [("ul_fwd", "tx")], P.mac_bytes(M_ACC_ROUTER),
                                                 P.mac_bytes(a0[1]))), "route move to another device not followed"
        # the route becomes a blackhole
        ip(ns, "route", "replace", "blackhole", "203.0.113.0/24")
        assert poll(lambda: dmac_of(far)[:2] == ("drop", [("drop_no_route", "drop")])), "blackhole not followed"
    finally:
        ip(ns, "neigh", "replace", PDN_NEAR, "lladdr", M_NEAR, "dev", "s0", "nud", "permanent")
        ip(ns, "route", "replace", "203.0.113.0/24", "via", ROUTER, "dev", "s0")


@pytest.fixture
def own_dp():
    """A PGW-U of the test's own (pin dir, maps, watcher registration): killing its watcher must not
    touch the module's."""
    from gtplab.dut.dataplane import Dataplane
    pin_dir = f"/sys/fs/bpf/gtplab-t-{secrets.token_hex(4)}"
    pgwu(pin_dir, "load", "--max-bearers", "64")
    try:
        with Dataplane(pin_dir) as d:
            yield pin_dir, d
    finally:
        pgwu(pin_dir, "unload", check=False)


def pgwu_stats(pin_dir: str) -> dict:
    return json.loads(pgwu(pin_dir, "stats", "--json", timeout=30).stdout)


def plant_slot(dp, dst: str, ingress: int, egress: int, smac: str, dmac: str) -> None:
    """Write a cache entry for (dst, ingress) on every CPU, made under the current generation."""
    from gtplab.dut.dataplane import fib_slot_of
    (gen,) = struct.unpack("=Q", dp.maps["fib_gen"].lookup(struct.pack("=I", 0)))
    slot = struct.pack("=4sII4xQI6s6sHH", socket.inet_aton(dst), ingress, 0, gen, egress, P.mac_bytes(smac),
                       P.mac_bytes(dmac), 0xffff, 0)
    dp.maps["fib_cache"].update(struct.pack("=I", fib_slot_of(dst, ingress)), slot)


def test_cache_unused_once_its_watcher_is_killed(own_dp, ns, devs):
    """The cache is trusted only while its `pgwu watch` lives: SIGKILL it and the kernel's exit hook
    clears the registration at once, so a cache entry (here a planted, wrong one, under the current
    generation) is no longer used, with no clock read on the packet path."""
    pin_dir, dp = own_dp
    setup(dp, True)
    a0, s0 = devs["a0"], devs["s0"]
    far = bytes(P.gpdu(dst=PDN_FAR, size=200))
    bogus = "02:de:ad:be:ef:01"

    def dmac():
        v, counted, out = run(dp, ns, "access", far, a0[0])
        assert (v, counted) == ("redirect", [("ul_fwd", "redirect")])
        return out[:6]

    assert watcher(dp) == 0
    plant_slot(dp, PDN_FAR, a0[0], s0[0], s0[1], bogus)
    assert dmac() == P.mac_bytes(M_ROUTER), "no watcher registered, but the cache was used"

    proc = start_watch(ns, pin_dir, dp)
    try:
        tgid = watcher(dp)
        # the planted entry is used while the watcher lives (a generation bump from an unrelated
        # neighbour timer anywhere on the machine can make it stale: plant it again then)
        for _ in range(50):
            plant_slot(dp, PDN_FAR, a0[0], s0[0], s0[1], bogus)
            if dmac() == P.mac_bytes(bogus):
                break
        else:
            pytest.fail("watcher registered, but the planted cache entry was never used")
        gen = dp.maps["fib_gen"].lookup(struct.pack("=I", 0))
        assert pgwu_stats(pin_dir)["fib_watcher_pid"] == tgid
        proc.kill()
        proc.wait(5)
        assert watcher(dp) == 0, f"watcher {tgid} was killed but is still registered"
        assert pgwu_stats(pin_dir)["fib_watcher_pid"] == 0
        assert dp.maps["fib_gen"].lookup(struct.pack("=I", 0)) != gen, "its exit did not start a new generation"
        for _ in range(20):
            plant_slot(dp, PDN_FAR, a0[0], s0[0], s0[1], bogus)
            assert dmac() == P.mac_bytes(M_ROUTER), "the watcher is dead, but the cache was used"
    finally:
        stop(proc)


def test_frag_needed_answered(dp, ns, devs, fib_cache):
    """Downlink with DF, too big for the access route once encapsulated (1000-byte route MTU): ICMP
    Fragmentation Needed back to the sender out of SGi, next-hop MTU 964 (1000 - 36); without DF the
    kernel gets the encapsulated packet (pass_fib_other); 964 bytes with DF fit and are forwarded."""
    setup(dp, fib_cache)
    dp.add_bearer(TEID_MTU, UE_MTU, SGW_MTU, SGW_TEID_MTU)
    s0 = devs["s0"][0]
    v, counted, _ = run(dp, ns, "sgi", P.downlink_ip(UE_MTU, size=300, df=True), s0)   # fills the cache when on
    assert (v, counted) == ("redirect", [("dl_fwd", "redirect")])
    f = bytes(P.downlink_ip(UE_MTU, size=1200, l4="tcp", df=True))
    v, counted, out = run(dp, ns, "sgi", f, s0)
    assert (v, counted) == ("tx", [("drop_frag_needed", "tx")])
    exp = O.frag_needed_dl_expected(f, P.PGW_ADDR, 1000)
    assert out == exp, O.mismatch_report(exp, out)
    v, counted, _ = run(dp, ns, "sgi", P.downlink_ip(UE_MTU, size=1200, l4="tcp"), s0)
    assert (v, counted) == ("pass", [("pass_fib_other", "pass")])
    fits = P.downlink_ip(UE_MTU, size=964 + 14 + 4, l4="tcp", df=True)
    assert len(O.ip_payload(bytes(fits))) == 964
    v, counted, _ = run(dp, ns, "sgi", fits, s0)
    assert (v, counted) == ("redirect", [("dl_fwd", "redirect")])
    v, counted, _ = run(dp, ns, "sgi", P.downlink_ip(UE_MTU, size=964 + 14 + 4 + 1, l4="tcp", df=True), s0)
    assert (v, counted) == ("tx", [("drop_frag_needed", "tx")])
    dp.set_config(dp.get_config(), err_ind=False)
    v, counted, _ = run(dp, ns, "sgi", f, s0)
    assert (v, counted) == ("drop", [("drop_frag_needed", "drop")])


def test_cache_follows_source_policy_rules(dp, ns, devs, watch):
    """`ip rule from UE2 lookup 100` sends UE2's traffic to PDN_FAR via ROUTER2, everyone else's via
    ROUTER. With the cache on, the first UE's next hop must not be reused for the second: the rule's
    addition keys the cache by source (fib_gen[2], set by the rtnetlink filter before `ip rule`
    returns), and its removal unkeys it (pgwu watch, within a tick)."""
    ue2, teid2 = "10.45.0.3", 0x300
    setup(dp, True)
    dp.add_bearer(teid2, ue2, P.SGW_ADDR, 0x301)
    a0, s0 = devs["a0"], devs["s0"]
    assert not dp.fib_by_src()
    ip(ns, "route", "add", "203.0.113.0/24", "via", ROUTER2, "dev", "s0", "table", "100")
    ip(ns, "rule", "add", "from", ue2, "lookup", "100", "prio", "100")
    try:
        assert dp.fib_by_src(), "a policy rule was added, the cache is still keyed by destination only"
        for _ in range(2):   # the second time from the cache
            expect_ul(dp, ns, devs, P.gpdu(dst=PDN_FAR, size=256), s0[1], M_ROUTER)
            expect_ul(dp, ns, devs, P.gpdu(teid=teid2, ue=ue2, dst=PDN_FAR, size=256), s0[1], M_ROUTER2)
        slot = dp.fib_cache_slot(PDN_FAR, a0[0], ue2)
        assert slot is not None and slot[3] == P.mac_bytes(M_ROUTER2)
    finally:
        ip(ns, "rule", "del", "from", ue2, "lookup", "100", "prio", "100", check=False)
        ip(ns, "route", "del", "203.0.113.0/24", "table", "100", check=False)
    deadline = time.monotonic() + 3
    while dp.fib_by_src():
        assert time.monotonic() < deadline, "the rule is gone, the cache is still keyed by source"
        time.sleep(0.05)
    expect_ul(dp, ns, devs, P.gpdu(teid=teid2, ue=ue2, dst=PDN_FAR, size=256), s0[1], M_ROUTER)
    expect_ul(dp, ns, devs, P.gpdu(teid=teid2, ue=ue2, dst=PDN_FAR, size=256), s0[1], M_ROUTER)
    assert cache_entry(dp, PDN_FAR, a0[0]) is not None
