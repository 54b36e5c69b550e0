"""The lab's IPv6 N6 side (issue 32): what the PGW-U's bpf_fib_lookup(AF_INET6) needs to reach the
servers fd47:7471::/64 (an address on the DUT's N6 port, a route via the generator's N6 MAC as a
permanent neighbour, forwarding on the ingress port), nothing routed out of the lab, and the frames the
kernel sends of its own: no DAD, no router solicitation, no link-local address; the only ones are the
MLDv2 reports for the addresses' groups at build (docs/lab.md). And its N3 dual stack (GTP-U over
IPv6, sweep --n3 6): fd47:7473::1 on the DUT's access port, each SGW's IPv6 address a permanent
neighbour -> the generator's N3 MAC, nothing else."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from gtplab.lab.topology import Lab

pytestmark = pytest.mark.lab


def _ns(lab, *cmd) -> str:
    return subprocess.run(["ip", "netns", "exec", lab.dut_ns, *cmd], capture_output=True, text=True,
                          check=True).stdout


def _snmp6(lab) -> dict[str, int]:
    return {k: int(v) for k, v in (ln.split() for ln in _ns(lab, "cat", "/proc/net/snmp6").splitlines())}


def test_dut_n6_reaches_the_ipv6_servers_and_sends_nothing_else():
    with Lab.up(dut="pass") as lab:
        acc, sgi = lab.ports
        addrs = json.loads(subprocess.run(["ip", "-n", lab.dut_ns, "-j", "-6", "addr"], capture_output=True,
                                          text=True, check=True).stdout)
        v6 = {a["ifname"]: [i["local"] for i in a.get("addr_info", [])] for a in addrs}
        # one address on each data port (N6; N3 for GTP-U over IPv6), no link-local anywhere
        assert {k: v for k, v in v6.items() if v} == {sgi.dut_ifname: ["fd47:7472::1"],
                                                       acc.dut_ifname: ["fd47:7473::1"]}
        neigh3 = _ns(lab, "ip", "-6", "neigh", "show", "dev", acc.dut_ifname)
        sgws = [f"fd47:7473::{0x10 + k:x} lladdr {acc.mac} PERMANENT" for k in range(lab.addressing.sgws)]
        assert sorted(ln.strip() for ln in neigh3.strip().splitlines()) == sorted(sgws), neigh3
        r = _ns(lab, "ip", "-6", "route", "get", "fd47:7473::10")
        assert f"dev {acc.dut_ifname}" in r, r
        route = _ns(lab, "ip", "-6", "route", "get", "fd47:7471::3")
        assert f"via fd47:7472::2 dev {sgi.dut_ifname}" in route, route
        neigh = _ns(lab, "ip", "-6", "neigh", "show", "dev", sgi.dut_ifname)
        assert f"fd47:7472::2 lladdr {sgi.mac} PERMANENT" in neigh, neigh
        for ue in ("fd47:7470::1", "fd00::2", "2001:db8::1"):          # nothing else is routed
            r = subprocess.run(["ip", "netns", "exec", lab.dut_ns, "ip", "-6", "route", "get", ue],
                               capture_output=True, text=True)
            assert r.returncode != 0, (ue, r.stdout)

        def knob(dev, k):
            return int(_ns(lab, "sysctl", "-n", f"net.ipv6.conf.{dev}.{k}"))
        assert [knob(sgi.dut_ifname, k) for k in ("disable_ipv6", "accept_ra", "autoconf", "accept_dad",
                                                  "addr_gen_mode", "forwarding")] == [0, 0, 0, 0, 1, 1]
        assert [knob(acc.dut_ifname, k) for k in ("disable_ipv6", "accept_ra", "autoconf", "accept_dad",
                                                  "addr_gen_mode", "forwarding")] == [0, 0, 0, 0, 1, 1]
        assert knob("all", "forwarding") == 0
        gen = json.loads(subprocess.run(["ip", "-n", lab.gen_ns, "-j", "-6", "addr"], capture_output=True,
                                        text=True, check=True).stdout)
        assert not [i for a in gen for i in a.get("addr_info", [])]           # the generator has no IPv6
        # what the kernel sent of its own: the MLDv2 reports of the addresses' groups (both ports
        # forward: the all-routers groups too), at build, none after
        s = _snmp6(lab)
        assert s["Icmp6OutRouterSolicits"] == s["Icmp6OutNeighborSolicits"] == s["Icmp6OutNeighborAdvertisements"] == 0
        assert s["Ip6OutRequests"] == s["Icmp6OutMLDv2Reports"], s

        def sent(dev):
            d = dict(ln.split() for ln in _ns(lab, "cat", f"/proc/net/dev_snmp6/{dev}").splitlines())
            return int(d.get("Ip6OutTransmits", 0)), int(d.get("Icmp6OutMLDv2Reports", 0))
        first, first3 = sent(sgi.dut_ifname), sent(acc.dut_ifname)
        assert first[0] == first[1] <= 8 and first3[0] == first3[1] <= 8, (first, first3)
        time.sleep(1.5)
        assert sent(sgi.dut_ifname) == first and sent(acc.dut_ifname) == first3
