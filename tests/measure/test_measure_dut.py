"""The embedded lab measures the DUT, not its generator (docs/lab.md, "The measurement model").

With the DUT's receive NAPI threads on their own CPU, a generator that offers more than the DUT can
forward must see loss, and that loss must be the DUT's: counted in the DUT's ingress ring or its drop
counters, with packet conservation exact. Before the CPU layout, the DUT ran in the generator's
softirq: the generator slowed down with it, nothing was ever lost, and these tests fail that way.
The NDR search must then end below the rate the generator offered, with the DUT as the limit.
"""

from __future__ import annotations

import os

import pytest

from gtplab.lab import config as labconfig
from gtplab.kernel.threads import napi_threads
from gtplab.measure.plan import CaseParams
from gtplab.measure.runner import Runner
from gtplab.measure.search import ndr_search

pytestmark = pytest.mark.lab

CFG = labconfig.load("embedded")


@pytest.fixture(scope="module")
def runner(request):
    """A Runner on a lab whose DUT is request.param: the PGW-U or the reference forwarder."""
    from gtplab.traffic import backend
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the lab's CPU layout needs two CPUs (generator and DUT); this host gives one")
    be = backend.choose(CFG, "local", dut=request.param).open()
    try:
        with Runner(be, CFG) as r:
            yield r
    finally:
        be.close()


BOTH = pytest.mark.parametrize("runner", ["pgwu", "fwd"], indirect=True)


@BOTH
def test_layout_puts_the_dut_on_its_own_cpu(runner):
    lab = runner.backend.lab
    lay = lab.state["cpu_layout"]
    assert lay["honoured"], lay["notes"]
    assert set(lay["generator"]).isdisjoint(lay["dut"])
    for p in lab.ports:
        dut = napi_threads(p.dut_ifname)
        gen = napi_threads(p.ifname)          # made anew when the engine attached: pinned again
        assert dut and gen, f"no threaded NAPI on {p.dut_ifname} / {p.ifname}"
        assert all(sorted(os.sched_getaffinity(t)) == lay["dut"] for t in dut)
        assert all(sorted(os.sched_getaffinity(t)) == lay["generator"] for t in gen)
        assert all(os.sched_getscheduler(t) == os.SCHED_FIFO for t in dut + gen)


@BOTH
def test_overload_loses_packets_at_the_dut_and_every_one_is_counted(runner):
    prep = runner.prepare(CaseParams("uplink", 64, flows=1024, latency=False))
    with runner.dut.bpf_stats():
        t = runner.trial(prep, None, 0.5)
    c = t["conservation"]
    assert c["ok"], c["errors"]
    lost = t["tx_packets"] - t["rx_packets"]
    dut_lost = t["loss"]["dut_ingress_ring"] + t["loss"]["dut_dropped"]
    assert lost > 0, f"no loss at the generator's maximum ({t['offered_pps']:.0f} pps): the DUT is not loaded"
    assert dut_lost > 0, f"{lost} lost, none by the DUT: {t['loss']}"
    # every lost packet has a counter: the DUT's ring, its drop reasons, or the generator's ring
    assert lost == dut_lost + t["loss"]["generator_ingress_ring"]
    assert t["dut"]["cpu_seconds"] and t["dut"]["cpu_source"].startswith("DUT receive NAPI threads")


# the PGW-U only: the reference forwarder may outrun the generator (its NDR is then generator-bound)
@pytest.mark.parametrize("runner", ["pgwu"], indirect=True)
def test_ndr_search_ends_below_the_offered_rate(runner):
    prep = runner.prepare(CaseParams("uplink", 64, flows=1024, latency=False))
    with runner.dut.bpf_stats():
        best, trials, status = ndr_search(lambda pps: runner.trial(prep, pps, 0.3), 0.001,
                                          resolution=0.05, max_trials=6)
    for t in trials:
        assert t["conservation"]["ok"], t["conservation"]["errors"]
    top = trials[0]["offered_pps"]
    assert best is not None, status
    assert not trials[0]["passed"] and best["offered_pps"] < top, status
    # the limit is the DUT's: the trial just above the result lost packets at the DUT
    above = min((t for t in trials if not t["passed"] and t["offered_pps"] > best["offered_pps"]),
                key=lambda t: t["offered_pps"])
    assert above["loss"]["dut_ingress_ring"] + above["loss"]["dut_dropped"] > 0, above["loss"]
    assert status.endswith("limit: dut"), status
