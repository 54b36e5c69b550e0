"""The host figures of a trial (gtplab/observe/host.py) from made-up snapshots: what is the lab's own
and what is someone else's on each side, the thresholds, the case summary and its notes. No root:
the lab is a stand-in with no threads."""

from __future__ import annotations

import pytest

from gtplab.kernel.sched import CpuTimes, cpu_times
from gtplab.lab.cpu import CpuLayout
from gtplab.observe import host as hostmod
from gtplab.observe.host import THRESHOLDS, HostMonitor, Snapshot


class FakeLab:
    def __init__(self, awake=None, shared=()):
        self.cpus = CpuLayout([0], [1])
        self.state = {"awake": awake or {"method": "spinner", "applied": True}}
        self.ports = []
        self._shared = list(shared)

    def shared_with(self):
        return self._shared


def snap(t, cpu0, cpu1, dut=None, lab=None, lab_cpus=None, own=0, held=(True, "")):
    """cpuN: (busy, idle, iowait, steal) seconds."""
    return Snapshot(t, {0: CpuTimes(*cpu0), 1: CpuTimes(*cpu1)}, dut or {}, lab or {}, lab_cpus or {},
                    own, 0, held)


def figures(a, b, **kw):
    return HostMonitor(FakeLab(**kw), top=False).figures(a, b)


def test_a_quiet_trial_is_all_the_labs_own():
    # 1 s: the DUT CPU ran its receive thread 0.4 s and the spinner 0.6 s; the generator ran this
    # process 0.9 s and its receive thread 0.1 s
    a = snap(10.0, (0, 0, 0, 0), (0, 0, 0, 0), dut={7: (0, 0)}, lab={8: 0, 9: 0}, lab_cpus={8: [1], 9: [0]})
    b = snap(11.0, (1.0, 0, 0, 0), (1.0, 0, 0, 0), dut={7: (400_000_000, 1_000_000)},
             lab={8: 600_000_000, 9: 100_000_000}, lab_cpus={8: [1], 9: [0]}, own=900_000_000)
    h = figures(a, b)
    assert h["dut"]["others_s"] == 0 and h["generator"]["others_s"] == 0
    assert h["dut"]["threads_run_s"] == 0.4 and h["dut"]["wait_ratio"] == 0.001
    assert not h["disturbed"] and h["reasons"] == [] and h["awake"] == {"method": "spinner", "applied": True,
                                                                       "held": True}


def test_idle_time_is_nobodys_and_anything_else_is_someone_elses():
    # DUT CPU: 0.5 s idle, 0.2 s the DUT's thread: 0.3 s someone else's; generator: 0.1 s steal
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0), dut={7: (0, 0)})
    b = snap(1.0, (0.9, 0, 0, 0.1), (0.5, 0.5, 0, 0), dut={7: (200_000_000, 0)}, own=900_000_000)
    h = figures(a, b)
    assert h["dut"]["others_s"] == pytest.approx(0.3) and h["dut"]["others_ratio"] == pytest.approx(0.3)
    assert h["generator"]["others_s"] == 0 and h["generator"]["steal_ratio"] == pytest.approx(0.1)
    assert h["disturbed"]
    assert any("60%" not in r and "30% of the DUT CPUs' time" in r for r in h["reasons"]), h["reasons"]
    assert any("hypervisor took 10.0% of the generator" in r for r in h["reasons"]), h["reasons"]


@pytest.mark.parametrize("key, dut, gen, what", [
    ("dut_others_ratio", (0.0, 0.94, 0, 0), (1.0, 0, 0, 0), "of the DUT CPUs' time"),
    ("generator_others_ratio", (0.0, 1.0, 0, 0), (1.0, 0, 0, 0), "of the generator CPUs' time"),
    ("steal_ratio", (0.0, 0.97, 0, 0.03), (1.0, 0, 0, 0), "hypervisor took"),
])
def test_each_threshold_is_where_it_says(key, dut, gen, what):
    """Just above a threshold the trial is disturbed for that reason; at the threshold it is not."""
    base_own = {"generator_others_ratio": 0.9}.get(key, 1.0)
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0))
    b = snap(1.0, gen, dut, own=int(base_own * 1e9))
    h = figures(a, b)
    assert h["disturbed"] and any(what in r for r in h["reasons"]), (key, h)
    th = dict(THRESHOLDS, **{key: 0.2})
    h2 = HostMonitor(FakeLab(), thresholds=th, top=False).figures(a, b)
    assert not any(what in r for r in h2["reasons"]), (key, h2)


@pytest.mark.parametrize("others, disturbed", [
    (0.011, False),     # the most a quiet trial showed (/proc/stat's 10 ms rounding), 0.5 s trials
    (0.023, True),      # the hog trials 5 % missed: the hog on for 11-60 % of the trial, the DUT's
    (0.029, True),      # real-time threads busy at 2 Mpps leaving it 2.3-2.9 % of the DUT CPU
])
def test_a_hog_beside_busy_real_time_threads_is_flagged_and_rounding_is_not(others, disturbed):
    """The DUT CPUs' "others" threshold, on the figures of docs/benchmarks.md's quiet-host
    repeatability run: a 0.6 s trial (0.5 s of traffic), every other figure clean."""
    wall = 0.6
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0), dut={7: (0, 0)})
    run = int((1.0 - others) * wall * 1e9)
    b = snap(wall, (wall, 0, 0, 0), (wall, 0, 0, 0), dut={7: (run, 0)}, own=int(wall * 1e9))
    h = figures(a, b)
    assert h["dut"]["others_ratio"] == pytest.approx(others, abs=1e-4)
    assert h["disturbed"] is disturbed, h["reasons"]


def test_run_queue_wait_of_the_dut_threads():
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0), dut={7: (0, 0)})
    b = snap(1.0, (1.0, 0, 0, 0), (0.1, 0.9, 0, 0), dut={7: (100_000_000, 60_000_000)}, own=10**9)
    h = figures(a, b)
    assert h["dut"]["wait_s"] == 0.06 and h["disturbed"]
    assert any("waited 60.0 ms runnable" in r for r in h["reasons"]), h["reasons"]


def test_idle_tuning_that_stopped_holding_disturbs_and_one_never_applied_does_not():
    a = snap(0.0, (0, 0, 0, 0), (0, 1, 0, 0))
    b = snap(1.0, (1.0, 0, 0, 0), (0, 2, 0, 0), own=10**9, held=(False, "the spinner of CPU(s) 1 is gone"))
    h = figures(a, b)
    assert h["disturbed"] and h["awake"]["held"] is False
    assert any("stopped holding: the spinner of CPU(s) 1 is gone" in r for r in h["reasons"]), h["reasons"]
    # nothing applied (asked none, or the host allows nothing): said in the layout, not per trial
    h = figures(a, b, awake={"method": "none", "applied": False})
    assert not h["disturbed"] and h["awake"]["applied"] is False


def test_case_summary_and_notes():
    shared = [{"lab": "other", "pid": 42, "cpus": [1], "shared": True}]
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0))
    quiet = figures(a, snap(1.0, (1.0, 0, 0, 0), (0, 1.0, 0, 0), own=10**9))
    busy = figures(a, snap(1.0, (1.0, 0, 0, 0), (0.5, 0.5, 0, 0), own=10**9), shared=shared)
    s = hostmod.summary([{"host": quiet}, {"host": busy}, {"host": busy}, {}])
    assert s["trials"] == 3 and s["disturbed"] == 2 and s["dut_others_ratio_max"] == 0.5
    assert len(s["reasons"]) == 1 and s["shared_with"] == shared
    n = hostmod.notes(s)
    assert n[0].startswith("2 of 3 trial(s) disturbed by the host") and "lab other (pid 42)" in n[1]
    assert hostmod.summary([{}]) == {} and hostmod.notes({}) == []


def test_layout_notes_say_what_was_not_applied():
    assert "NOT kept out of halt: no cpuidle states" in hostmod.layout_notes(
        {"awake": {"method": "none", "applied": False, "notes": ["no cpuidle states on CPU(s) 1"]}})[0]
    assert "SCHED_IDLE spinner" in hostmod.layout_notes({"awake": {"method": "spinner", "applied": True}})[0]
    assert hostmod.layout_notes({"awake": {"method": "cpuidle", "applied": True}}) == []
    assert hostmod.layout_notes(None) == []


def test_proc_stat_is_read_per_cpu(tmp_path):
    p = tmp_path / "stat"
    p.write_text("cpu  10 0 10 100 0 0 0 5 0 0\ncpu0 100 0 50 1000 10 0 50 20 0 0\n"
                 "cpu1 0 0 0 500 0 0 0 0 0 0\nintr 1 2\n")
    t = cpu_times(str(p))
    assert set(t) == {0, 1}
    assert t[0].busy == pytest.approx(2.0) and t[0].idle == pytest.approx(10.0)
    assert t[0].iowait == pytest.approx(0.1) and t[0].steal == pytest.approx(0.2)


def test_another_labs_idle_spinner_is_not_someone_elses_time(monkeypatch):
    """A task at SCHED_IDLE pinned to the DUT CPU (another lab's spinner, gtplab.lab.awake) takes only
    idle time: not "others", so two labs sharing CPUs do not flag each other's every trial for it.
    The same task at SCHED_OTHER is someone else's, and one not pinned within a side stays counted."""
    import os
    policy = {50: os.SCHED_IDLE, 51: os.SCHED_OTHER, 52: os.SCHED_IDLE}
    aff = {50: [1], 51: [1], 52: [0, 1]}
    monkeypatch.setattr(hostmod, "_policy", lambda t: policy.get(t))
    monkeypatch.setattr(hostmod, "_affinity", lambda t: aff.get(t))
    # DUT CPU fully busy for 1 s: its thread 0.3 s, task 50 0.5 s, task 51 0.1 s, task 52 0.1 s
    a = snap(0.0, (0, 0, 0, 0), (0, 0, 0, 0), dut={7: (0, 0)})
    b = snap(1.0, (0.0, 1.0, 0, 0), (1.0, 0, 0, 0), dut={7: (300_000_000, 0)})
    a.tasks = {50: 0, 51: 0, 52: 0}
    b.tasks = {50: 500_000_000, 51: 100_000_000, 52: 100_000_000}
    h = HostMonitor(FakeLab(), top=True).figures(a, b)
    assert h["dut"]["idle_policy_s"] == pytest.approx(0.5)
    assert h["dut"]["others_s"] == pytest.approx(0.2) and h["disturbed"]
    # the spinner alone beside the DUT's thread: a quiet trial
    b.tasks = {50: 700_000_000, 51: 0, 52: 0}
    h = HostMonitor(FakeLab(), top=True).figures(a, b)
    assert h["dut"]["others_s"] == 0 and not h["disturbed"], h["reasons"]
