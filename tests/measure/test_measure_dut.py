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
    """A Runner on a lab whose DUT is request.param: the XDP PGW-U, the socket-path PGW-U or the
    reference forwarder."""
    from gtplab.traffic import backend
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("the lab's CPU layout needs two CPUs (generator and DUT); this host gives one")
    be = backend.choose(CFG, "local", dut=request.param).open()
    try:
        with Runner(be, CFG) as r:
            yield r
    finally:
        be.close()


BOTH = pytest.mark.parametrize("runner", ["pgwu", "socket", "fwd"], indirect=True)


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
    if lab.dut_mode == "socket":        # its workers and main thread: on the DUT CPUs too
        tids = [int(t) for t in os.listdir(f"/proc/{lab.socket_pid()}/task")]
        assert len(tids) >= 3 and all(set(os.sched_getaffinity(t)) <= set(lay["dut"]) for t in tids)


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
    # and the receive-path summary names the place that lost the most
    pts = t["rx_path"]["loss_points"]
    assert pts and sum(p["packets"] for p in pts) == lost, pts
    assert pts[0]["where"] in t["rx_path"]["dominant"]


# the PGW-Us only: the reference forwarder may outrun the generator (its NDR is then generator-bound)
@pytest.mark.parametrize("runner", ["pgwu", "socket"], indirect=True)
def test_ndr_search_ends_below_the_offered_rate(runner):
    from gtplab.dut.sock import SocketKnobs
    lab = runner.backend.lab
    if lab.dut_mode == "socket":
        # with the kernel's default buffer the socket path loses a few packets of the generator's
        # bursts at any rate here (docs/socket.md); these knobs give it a PDR to find
        lab.start_socket(SocketKnobs(rcvbuf=4 << 20, rt_priority=50))
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


@pytest.mark.parametrize("runner", ["socket"], indirect=True)
def test_socket_buffer_overflow_is_counted_as_rcvbuferrors(runner):
    """The socket path's workers stopped (SIGSTOP) during a trial at a rate its NAPI thread takes
    easily, its receive buffer 4 KiB: the UDP socket overflows, and every packet the trial lost is
    the DUT netns's Udp RcvbufErrors (kernel_udp_rcvbuferrors), none in a ring; conservation exact;
    the trial's receive-path summary names the socket buffer and its knob."""
    import signal
    from gtplab.dut.sock import SocketKnobs
    lab = runner.backend.lab
    lab.start_socket(SocketKnobs(rcvbuf=4096))
    pid = lab.socket_pid()
    phase = []

    def hook():                 # called right before the traffic starts and right after it stopped
        os.kill(pid, signal.SIGCONT if phase else signal.SIGSTOP)
        phase.append(len(phase))
        return 0.0

    runner.generator_cpu = hook
    try:
        prep = runner.prepare(CaseParams("uplink", 128, flows=1024, latency=False))
        t = runner.trial(prep, 10000, 0.5)
    finally:
        runner.generator_cpu = None
        os.kill(pid, signal.SIGCONT)
        lab.start_socket(SocketKnobs())
    assert phase == [0, 1]
    c = t["conservation"]
    assert c["ok"], c["errors"]
    lost = t["tx_packets"] - t["rx_packets"]
    assert lost > t["tx_packets"] // 2, t["loss"]
    assert t["dut"]["drops_by_reason"] == {"kernel_udp_rcvbuferrors": lost}, t["dut"]["drops_by_reason"]
    assert t["loss"]["dut_ingress_ring"] == 0 and t["loss"]["generator_ingress_ring"] == 0, t["loss"]
    assert t["rx_path"]["udp"]["RcvbufErrors"] == lost, t["rx_path"]["udp"]
    top = t["rx_path"]["loss_points"][0]
    assert top["key"] == "kernel_udp_rcvbuferrors" and top["packets"] == lost
    assert "RcvbufErrors" in t["rx_path"]["dominant"] and "rcvbuf" in t["rx_path"]["dominant"]
    assert t["limit"] == "dut"
