"""The embedded lab measures the DUT, not its generator (docs/lab.md, "The measurement model").

With the DUT's receive NAPI threads on their own CPU, a generator that offers more than the DUT can
forward must see loss, and that loss must be the DUT's: counted in the DUT's ingress ring or its drop
counters, with packet conservation exact. Before the CPU layout, the DUT ran in the generator's
softirq: the generator slowed down with it, nothing was ever lost, and these tests fail that way.
The search (MLRsearch) must then end below the rate the generator offered, with the DUT as the limit.
"""

from __future__ import annotations

import os

import pytest

from gtplab.lab import config as labconfig
from gtplab.kernel.threads import napi_threads
from gtplab.measure import mlrsearch as mlr
from gtplab.measure import search
from gtplab.measure.plan import CaseParams
from gtplab.measure.runner import Runner

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


# the PGW-U only: the reference forwarder may outrun the generator (its result is then the generator's)
@pytest.mark.parametrize("runner", ["pgwu"], indirect=True)
def test_search_ends_below_the_offered_rate(runner):
    prep = runner.prepare(CaseParams("uplink", 64, flows=1024, latency=False))
    # a PDR of 0.1 % decided by one 0.3 s trial per load: short, and a host stall below the DUT's
    # limit moves the result down, never up
    goal = mlr.pdr(0.001, exceed_ratio=0.0, final_trial_duration=0.3, duration_sum=0.3, initial_trial_duration=0.3,
                   width=0.05)
    with runner.dut.bpf_stats():
        trial = lambda load, s: runner.trial(prep, load, s)       # noqa: E731
        top = search.max_load(trial)
        cs = search.run(trial, [goal], min_load=10e3, max_load=top, max_trials=6)
    v = search.verdict(cs, 64)
    for t in list(top.probes) + cs.trials:
        assert t["conservation"]["ok"], t["conservation"]["errors"]
    g = v.goals[goal.code]
    assert cs.trials[0]["search"]["load"] == top.pps and cs.trials[0]["search"]["high_loss"][goal.code], v.status
    assert g["lower_pps"] is not None and g["lower_pps"] < top.pps, v.status
    # the limit is the DUT's: the trials at the relevant upper bound lost packets at the DUT
    above = [t for t in cs.trials if t["search"]["load"] == g["upper_pps"] and t["search"]["high_loss"][goal.code]]
    assert above and all(t["loss"]["dut_ingress_ring"] + t["loss"]["dut_dropped"] > 0 for t in above), \
        [t["loss"] for t in above]
    assert v.limit == "dut" and v.claim == g["lower_pps"], v.status
