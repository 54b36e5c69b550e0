"""The PGW-U's config for tests that run its programs with BPF_PROG_TEST_RUN (nothing is sent):

    BASE_CONFIG   the local address P.PGW_ADDR, checksums on, no FIB cache, the UE pool P.UE_POOL, no
                  VLAN, static next hops on ifindexes that never exist (NH_ACCESS, NH_SGI)

    cfg_of(changes)  BASE_CONFIG with changes
    stats_delta(a, b) what moved in the stats map between two reads: {(reason, verdict): (packets, bytes)}

test_dataplane.py, test_dataplane_ipv6.py and test_qos.py use it.
"""

from __future__ import annotations

from gtplab.dut.dataplane import REASONS, VERDICTS, Config, Nexthop
from gtplab.gtpu import packets as P

NH_ACCESS_IF = 1001              # static next hops: never-existing ifindexes (test runs do not send)
NH_SGI_IF = 1002
ROUTER_SGI_MAC = "02:00:00:00:02:02"
NH_ACCESS = Nexthop(NH_ACCESS_IF, P.PGW_ACCESS_MAC, "02:00:00:00:01:99")   # out of access: to the SGW's router
NH_SGI = Nexthop(NH_SGI_IF, P.PGW_SGI_MAC, ROUTER_SGI_MAC)

BASE_CONFIG = Config(local_addr=P.PGW_ADDR, csum=True, fib_cache=False, ue_pool=P.UE_POOL, egress_vlan=(0, 0),
                     restart_counter=0, nexthop=(NH_ACCESS, NH_SGI))


def cfg_of(changes: dict) -> Config:
    """BASE_CONFIG with changes (Config's fields)."""
    from dataclasses import replace
    return replace(BASE_CONFIG, **changes)


def stats_delta(before, after) -> dict:
    """{(reason, verdict): (packets, bytes)} of the stats map's counters (one (packets, bytes) per
    reason x verdict, in that order) that moved from before to after."""
    d = {}
    for i, ((p0, b0), (p1, b1)) in enumerate(zip(before, after)):
        if (p1, b1) != (p0, b0):
            d[(REASONS[i // len(VERDICTS)], VERDICTS[i % len(VERDICTS)])] = (p1 - p0, b1 - b0)
    return d
