"""A trial's counters are read once the frames in flight have arrived (Runner._settled_stats): the
generator's receive counter holding still is not enough while a stalled DUT CPU still holds frames it
forwards afterwards (read after them, the DUT counts more than the generator got: "unexplained" on a
busy host). The XDP DUT's own counters must hold still too; the wait is bounded and recorded."""

from __future__ import annotations

from types import SimpleNamespace

from gtplab.measure.runner import Runner


class _Client:
    def __init__(self, rx):
        self.rx = list(rx)

    def get_stats(self):
        v = self.rx.pop(0) if len(self.rx) > 1 else self.rx[0]
        return {1: {"ipackets": v}}


class _Dut:
    kind, sock = "local", None

    def __init__(self, fwd):
        self.fwd = list(fwd)
        self.reads = 0

    def counters(self):
        self.reads += 1
        v = self.fwd.pop(0) if len(self.fwd) > 1 else self.fwd[0]
        return {("ul_fwd", "redirect"): v}


def _runner(client, dut, step=0.001, most=1.0) -> Runner:
    r = Runner.__new__(Runner)
    r.client, r.dut = client, dut
    r.SETTLE_STEP_S, r.SETTLE_MAX_S = step, most
    return r


def test_the_dut_still_forwarding_keeps_the_trial_waiting():
    # the generator's counter holds still from the first read; the DUT forwards 3 more reads' worth
    dut = _Dut([90, 95, 99, 100, 100])
    r = _runner(_Client([100]), dut)
    r._settled_stats(1)
    assert dut.reads >= 5 and r.settled["settled"] is True


def test_counters_that_never_hold_still_are_recorded_unsettled():
    r = _runner(_Client(list(range(10_000))), _Dut([0]), most=0.05)
    r._settled_stats(1)
    assert r.settled["settled"] is False and r.settled["s"] >= 0.05


def test_a_dut_read_over_the_network_is_not_polled():
    dut = SimpleNamespace(kind="prometheus", counters=lambda: (_ for _ in ()).throw(AssertionError("polled")))
    r = _runner(_Client([5]), dut)
    assert r._settled_stats(1) == {1: {"ipackets": 5}} and r.settled["settled"] is True
