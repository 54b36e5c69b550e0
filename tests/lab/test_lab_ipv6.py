"""The lab's IPv6 N6 side (issue 32): what the PGW-U's bpf_fib_lookup(AF_INET6) needs to reach the
servers fd47:7471::/64 (an address on the DUT's N6 port, a route via the generator's N6 MAC as a
permanent neighbour, forwarding on the ingress port), nothing routed out of the lab, and the frames the
kernel sends of its own: no DAD, no router solicitation, no link-local address; the only ones are the
two MLDv2 reports for the N6 address's solicited-node group at build (docs/lab.md)."""

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
        # one address, on the N6 port, no link-local anywhere
        assert {k: v for k, v in v6.items() if v} == {sgi.dut_ifname: ["fd47:7472::1"]}
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
                                                  "addr_gen_mode", "forwarding")] == [0, 0, 0, 0, 1, 0]
        assert knob(acc.dut_ifname, "forwarding") == 1 and knob(acc.dut_ifname, "disable_ipv6") == 1
        assert knob("all", "forwarding") == 0
        gen = json.loads(subprocess.run(["ip", "-n", lab.gen_ns, "-j", "-6", "addr"], capture_output=True,
                                        text=True, check=True).stdout)
        assert not [i for a in gen for i in a.get("addr_info", [])]           # the generator has no IPv6
        # what the kernel sent of its own: the MLDv2 reports of the N6 address's group, at build, on
        # the N6 port only (the access port's are discarded: IPv6 is disabled there), none after
        s = _snmp6(lab)
        assert s["Icmp6OutRouterSolicits"] == s["Icmp6OutNeighborSolicits"] == s["Icmp6OutNeighborAdvertisements"] == 0
        assert s["Ip6OutRequests"] == s["Icmp6OutMLDv2Reports"], s

        def sent(dev):
            d = dict(ln.split() for ln in _ns(lab, "cat", f"/proc/net/dev_snmp6/{dev}").splitlines())
            return int(d.get("Ip6OutTransmits", 0)), int(d.get("Icmp6OutMLDv2Reports", 0))
        first = sent(sgi.dut_ifname)
        assert first[0] == first[1] <= 4 and sent(acc.dut_ifname)[0] == 0, first
        time.sleep(1.5)
        assert sent(sgi.dut_ifname) == first and sent(acc.dut_ifname)[0] == 0
