"""A UPF's own counters in the shape the measurement reads them ({(reason, verdict): packets},
conservation.DutDelta.from_counters): one adapter per UPF kind, chosen by the lab config's
`dut.counters` (docs/lab.md "An external UPF", docs/pfcp.md).

    counters: kernel      any XDP UPF in the namespace lab: the kernel's own count of the XDP
                          verdicts on the DUT's veths (ethtool -S: rx_queue_0_xdp_redirect,
                          _xdp_tx, _xdp_drops, _drops; what is left of _xdp_packets was passed)
    counters: eupf        eUPF (edgecomllc/eupf): its REST API (dut.eupf.api), /api/v1/xdp_stats
                          (its XDP program's verdicts) and /api/v1/route_stats (its FIB lookups)
    counters: prometheus  any UPF: a mapping of metric selectors (gtplab.dut.prometheus)
    counters: kernelpath  a UPF without XDP (UDP socket, TUN) in the namespace lab: its namespace's
                          UDP/IP MIB, veth and TUN counters, balanced per direction (gtplab.dut.kernelpath)

eUPF's XDP program ends every packet with one verdict and counts it (upf_ext_stat.xdp_actions);
its routing counts its FIB lookups that dropped (blackhole, unreachable, prohibit) and those it left
to the kernel (no neighbour, fragmentation needed ...). So, as reasons:

    eupf_fwd/redirect     forwarded (bpf_redirect to the other port)
    eupf_returned/tx      sent back out of the port it came in on (XDP_TX: a GTP-U echo answer, or
                          a route back out of the ingress port)
    drop_fib/drop         its FIB lookup said blackhole / unreachable / prohibit
    drop_rules/drop       every other XDP_DROP: a PDR without FAR or QER, a FAR that does not forward,
                          a closed gate, over the MBR
    aborted/aborted       XDP_ABORTED (headers it could not add or remove)
    pass_fib/pass         to the kernel: the FIB lookup had no neighbour, needed fragmentation ...
    pass_no_match/pass    to the kernel: no PDR for its TEID or UE address, a tagged frame, ARP,
                          anything not IPv4/IPv6

Why the REST API and not its Prometheus endpoint: at a8d774a the upf_rx and upf_route series grow on
every scrape with no traffic (each scrape adds the map's totals again: 266, then 279 a second later,
while /api/v1/route_stats said 13 both times); upf_xdp_* are right, but without the FIB split.

Used by gtplab.dut.external (ExternalDut) and gtplab.dut.probe.make_dut.
"""

from __future__ import annotations

import json
from typing import Callable, Protocol

from gtplab.errors import UserError

EUPF_KEYS = {"api"}


class UpfCounters(Protocol):
    kind: str

    def counters(self) -> dict[tuple[str, str], int]:
        """Packets per (reason, verdict) so far."""


def parse_eupf(d, where: str) -> dict:
    """dut.eupf: {api: http://HOST:8080} (eUPF's REST API; {placeholders} of the namespace lab)."""
    if not isinstance(d, dict) or set(d) - EUPF_KEYS or "api" not in d:
        raise UserError(f"{where}: dut.eupf must be {{api: http://HOST:PORT}} (eUPF's REST API, api_address)")
    api = d["api"]
    if not isinstance(api, str) or not api.startswith(("http://", "https://")):
        raise UserError(f"{where}: dut.eupf.api {api!r}: an http(s) URL of eUPF's REST API")
    return {"api": api.rstrip("/")}


def kernel_counts(ethtool: dict[str, int]) -> dict[str, int]:
    """One DUT veth's XDP verdicts as the kernel counted them (drivers/net/veth.c): every frame its
    ring delivered (xdp_packets), redirected, sent back (xdp_tx), dropped by the program (xdp_drops:
    XDP_DROP and XDP_ABORTED), dropped after the program (drops: a redirect or XDP_TX that failed, a
    passed frame without memory), and what is left: passed to the stack."""
    g = ethtool.get
    n, red, tx = g("rx_queue_0_xdp_packets", 0), g("rx_queue_0_xdp_redirect", 0), g("rx_queue_0_xdp_tx", 0)
    drops, failed = g("rx_queue_0_xdp_drops", 0), g("rx_queue_0_drops", 0)
    return {"packets": n, "redirect": red, "tx": tx, "drops": drops, "failed": failed,
            "passed": n - red - tx - drops - failed}


class KernelVerdicts:
    """The DUT ports' XDP verdicts as the kernel counts them, summed over both ports (a trial sends
    one direction): any XDP UPF, whatever counters it has. read(): {port: ethtool -S}."""

    kind = "kernel"

    def __init__(self, read: Callable[[], dict[str, dict[str, int]]]):
        self.read = read

    def counters(self) -> dict[tuple[str, str], int]:
        tot = {"redirect": 0, "tx": 0, "drops": 0, "failed": 0, "passed": 0}
        for stats in self.read().values():
            for k, v in kernel_counts(stats).items():
                if k in tot:
                    tot[k] += v
        return {("xdp_fwd", "redirect"): tot["redirect"], ("xdp_returned", "tx"): tot["tx"],
                ("xdp_drop", "drop"): tot["drops"], ("veth_failed", "drop"): tot["failed"],
                ("xdp_pass", "pass"): tot["passed"]}


class EupfCounters:
    """eUPF's counters from its REST API (module doc). fetch(url) -> body text (run where the API
    is reachable: the lab's control-plane namespace)."""

    kind = "eupf"

    def __init__(self, api: str, fetch: Callable[[str], str]):
        self.api = api.rstrip("/")
        self.fetch = fetch

    def _get(self, path: str) -> dict:
        url = self.api + path
        try:
            d = json.loads(self.fetch(url))
        except (OSError, ValueError) as e:
            raise UserError(f"Couldn't read eUPF's counters from {url}: {e}") from None
        if not isinstance(d, dict):
            raise UserError(f"eUPF's {url} answered {str(d)[:80]!r}, not an object")
        return d

    @staticmethod
    def mapping(xdp: dict, route: dict) -> dict[tuple[str, str], int]:
        """eUPF's xdp_stats and route_stats as {(reason, verdict): packets} (module doc)."""
        def g(d, k):
            v = d.get(k, 0)
            if not isinstance(v, int) or isinstance(v, bool):
                raise UserError(f"eUPF counter {k} = {v!r}: not a number")
            return v
        fib_drop = g(route, "fib_lookup_ip4_error_drop") + g(route, "fib_lookup_ip6_error_drop")
        fib_pass = g(route, "fib_lookup_ip4_error_pass") + g(route, "fib_lookup_ip6_error_pass")
        return {("eupf_fwd", "redirect"): g(xdp, "redirect"), ("eupf_returned", "tx"): g(xdp, "tx"),
                ("drop_fib", "drop"): fib_drop, ("drop_rules", "drop"): g(xdp, "drop") - fib_drop,
                ("aborted", "aborted"): g(xdp, "aborted"),
                ("pass_fib", "pass"): fib_pass, ("pass_no_match", "pass"): g(xdp, "pass") - fib_pass}

    def counters(self) -> dict[tuple[str, str], int]:
        return self.mapping(self._get("/api/v1/xdp_stats"), self._get("/api/v1/route_stats"))
