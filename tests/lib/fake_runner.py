"""A fake Runner for the sweep's unit tests: trials of a modelled DUT and generator, in the shape
gtplab.measure.runner.Runner.trial returns them (counts, rates, which side lost packets, packet
conservation, latency, and the host's `host` record of issue 26 item 2 when the test asks for one).

    fr = FakeRunner(capacity=300e3, gen_max=1e6)     # the DUT forwards 300 kpps, the generator 1 Mpps
    rec = sweep.run_case(fr, case_params, spec, cfg, None, None)

The model, per trial of `duration` s at `pps` (None: flat out):
    offered  = gen_max (flat out), else min(pps, gen_max(n)); tx = offered x duration
    the DUT forwards at most capacity(n) x duration and drops the rest (drop_no_route)
    the generator receives at most gen_rx_max x duration of what the DUT forwarded (its own ring)
    bad(n, pps) more packets lost at the DUT (a stall): how a noisy host looks without the flag
    host(n, pps): the trial's `host` record, e.g. {"disturbed": True, "reasons": [...], ...}
n counts the runner's trials from 0. Latency grows with the load over capacity, so the tests can
tell the latency points apart.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from gtplab.measure import conservation
from gtplab.measure.runner import GENERATOR_BOUND_RATIO, Prepared


class FakeDut:
    @contextlib.contextmanager
    def bpf_stats(self):
        yield


def _fn(v):
    return v if callable(v) else (lambda n, pps=None: v)


class FakeRunner:
    def __init__(self, capacity: float | Callable = 300e3, gen_max: float | Callable = 1e6, *,
                 gen_rx_max: float | None = None, bad: Callable[[int, float | None], int] | None = None,
                 host: Callable[[int, float | None], dict | None] | None = None):
        self.dut = FakeDut()
        self.capacity, self.gen_max = _fn(capacity), _fn(gen_max)
        self.gen_rx_max, self.bad, self.host = gen_rx_max, bad, host
        self.asked: list[tuple[float | None, float]] = []        # (pps, duration) per trial

    def ports(self, direction: str) -> tuple[int, int]:
        return (0, 1) if direction == "uplink" else (1, 0)

    def prepare(self, p) -> Prepared:
        tun = p.tunables()
        return Prepared(p, *self.ports(p.direction), tun, tun["stats"] == "latency", [])

    def case_costs(self, prep, load_pps: float | None) -> dict[str, Any]:
        """The DUT's costs apart from the search (Runner.case_costs), at the load run_case asked
        (kept in cost_load): none measured, no trial run."""
        self.cost_load = load_pps
        return {"load_pps": load_pps, "notes": [], "xdp_ns_per_packet": None, "dut_cpu_ns_per_packet": None,
                "reference_cpu_ns_per_packet": None, "above_reference_ns_per_packet": None,
                "bpf_stats_ns_per_packet": None, "disturbed": False, "trials": []}

    def trial(self, prep, pps, duration, capture=None, capture_limit=64) -> dict[str, Any]:
        n = len(self.asked)
        self.asked.append((pps, duration))
        top = self.gen_max(n, pps)
        offered = top if pps is None else min(pps, top)
        tx = int(round(offered * duration))
        fwd = min(tx, int(self.capacity(n, pps) * duration))
        if self.bad:
            fwd = max(0, fwd - int(self.bad(n, pps) or 0))
        rx = fwd if self.gen_rx_max is None else min(fwd, int(self.gen_rx_max * duration))
        dut_loss, gen_loss = tx - fwd, fwd - rx
        d = conservation.DutDelta(tx, fwd, {"drop_no_route": dut_loss} if dut_loss else {})
        cons = conservation.check(tx, rx, d, dut_rx=tx, link_in_lost=0, link_out_lost=gen_loss)
        gen_bound = pps is not None and offered < GENERATOR_BOUND_RATIO * pps
        limit = ("generator (receive)" if gen_loss > dut_loss else "dut" if dut_loss
                 else "generator (transmit)" if gen_bound or pps is None else None)
        cap = self.capacity(n, pps)
        lat = {k: None for k in ("min", "avg", "p50", "p99", "max")}
        if prep.latency and rx:
            u = offered / cap
            lat = {"min": 5.0, "avg": 10.0 + 20 * u, "p50": 9.0 + 20 * u, "p99": 20.0 + 100 * u, "max": 50.0 + 200 * u}
        t = {"rate_asked": "100%" if pps is None else f"{pps:.0f}pps", "rate_asked_pps": pps, "duration_s": duration,
             "offered_pps": offered, "offered_bps_l1": offered * 8.0, "offered_bps_l2": offered * 8.0,
             "rx_pps": rx / duration, "rx_bps_l1": 1.0, "rx_bps_l2": 1.0, "tx_packets": tx, "rx_packets": rx,
             "loss_ratio": (tx - rx) / tx if tx else None, "latency_us": lat,
             "generator_bound": gen_bound, "limit": limit,
             "loss": {"dut_ingress_ring": 0, "dut_dropped": dut_loss, "generator_ingress_ring": gen_loss},
             "dut": {"rx_packets": tx, "fwd_packets": fwd, "drop_packets": dut_loss,
                     "drops_by_reason": d.drops_by_reason, "ns_per_packet": None, "cpu_seconds": None,
                     "cpu_ns_per_packet": None},
             "conservation": cons.as_dict()}
        h = self.host(n, pps) if self.host else None
        if h is not None:
            t["host"] = h
        return t
