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


# ---- the lab measures its own disturbance (gtplab/observe/host.py; issue 26 item 2) ----------------

@pytest.mark.parametrize("runner", ["fwd"], indirect=True)
def test_every_trial_says_what_the_host_took_and_a_hog_on_the_dut_cpu_is_flagged(runner):
    """Every trial has its host record: the DUT's and the generator's CPUs (others, steal, the DUT
    threads' run-queue wait), how the DUT CPUs were kept awake. With a busy loop pinned to the DUT CPU
    during the trial, the trial is disturbed, the reason names the DUT CPUs, and the hog is among the
    tasks named (no timed assertion: the hog only has to run, whatever else this machine runs)."""
    import subprocess
    import sys
    lab = runner.backend.lab
    prep = runner.prepare(CaseParams("uplink", 256, flows=16, latency=False))
    t = runner.trial(prep, 20e3, 0.3)
    h = t["host"]
    assert set(h) >= {"disturbed", "reasons", "dut", "generator", "awake", "wall_s", "shared_with"}, h
    assert h["dut_cpus"] == lab.cpus.dut and h["generator_cpus"] == lab.cpus.generator
    assert h["dut"]["threads_run_s"] > 0, h          # the DUT's receive threads ran (20 kpps)
    assert h["awake"]["method"] == lab.state["awake"]["method"] and h["awake"]["held"] == h["awake"]["applied"]
    assert h["disturbed"] == bool(h["reasons"])
    hog = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, %r)\nwhile True: pass"
                            % (lab.cpus.dut,)])
    try:
        t = runner.trial(prep, 20e3, 0.5)
    finally:
        hog.kill()
        hog.wait()
    h = t["host"]
    assert h["disturbed"] and any("DUT CPUs' time" in r for r in h["reasons"]), h
    assert h["dut"]["others_s"] > 0.05, h
    # named among the five tasks outside the lab that ran most on its CPUs: unless five others ran
    # more (other suites on this machine, unpinned, also count on the lab's CPUs)
    assert hog.pid in [x["tid"] for x in h["top"]] or len(h["top"]) == 5, h


@pytest.mark.parametrize("runner", ["fwd"], indirect=True)
def test_a_trial_after_the_idle_tuning_was_undone_is_disturbed(runner):
    """The lab checks at every trial that the DUT CPUs are still kept awake the way it applied: undone
    behind its back (another lab restored the idle states, or the spinner was killed), the trial says so."""
    from gtplab.lab import awake
    lab = runner.backend.lab
    rec = lab.state["awake"]
    if not rec["applied"]:
        pytest.fail(f"the lab could not keep the DUT CPUs awake here: {rec['notes']}")
    prep = runner.prepare(CaseParams("uplink", 256, flows=16, latency=False))
    saved = dict(rec["saved"])
    awake.restore(dict(rec))                 # as someone else would: behind the lab's back
    try:
        t = runner.trial(prep, 20e3, 0.2)
    finally:
        lab.restore_cpu_idle()
        assert not saved or all(open(p).read().strip() == v for p, v in saved.items())
        lab.keep_cpus_awake(CFG.lab.get("awake", "auto"))
    h = t["host"]
    assert h["disturbed"] and not h["awake"]["held"], h
    assert any("stopped holding" in r for r in h["reasons"]), h["reasons"]


@pytest.mark.parametrize("runner", ["pgwu"], indirect=True)
def test_case_costs_swap_the_reference_in_and_give_the_pgwu_back(runner):
    """Runner.case_costs: the DUT's CPU ns/packet without bpf_stats, the reference forwarder's on the
    same links (swapped in with BPF_LINK_UPDATE), the XDP program's ns/packet with bpf_stats. After it
    the PGW-U is back on both ports, the DUT's receive threads are the same pinned threads (no
    re-attach made them anew), and it forwards and counts as before."""
    lab = runner.backend.lab
    prep = runner.prepare(CaseParams("uplink", 128, flows=64, latency=False))
    threads = sorted(lab.dut_threads())
    c = runner.case_costs(prep, 40e3)
    assert c["load_pps"] == 20000 and [t["what"] for t in c["trials"]] == ["dut", "reference", "dut_bpf_stats"]
    assert c["dut_cpu_ns_per_packet"] and c["reference_cpu_ns_per_packet"], c
    assert c["above_reference_ns_per_packet"] == c["dut_cpu_ns_per_packet"] - c["reference_cpu_ns_per_packet"]
    assert c["xdp_ns_per_packet"] and c["trials"][2]["bpf_stats"] is True, c
    progs = {ln["ifname"]: ln["xdp"]["prog"]["name"] for ln in lab.links() if ln["netns"] == lab.dut_ns}
    assert progs == {lab.ports[0].dut_ifname: "xdp_access", lab.ports[1].dut_ifname: "xdp_sgi"}, progs
    assert sorted(lab.dut_threads()) == threads
    assert all(sorted(os.sched_getaffinity(t)) == lab.cpus.dut for t in threads)
    t = runner.trial(prep, 20e3, 0.3)
    assert t["conservation"]["ok"] and t["dut"]["fwd_packets"] == t["tx_packets"] > 0, t["conservation"]
