"""The lab measures its own disturbance: what the host took from a trial, and whether that is enough
to stop the trial being evidence about the DUT (issue 26 item 2; docs/lab.md, "Disturbance").

    mon = HostMonitor(lab)
    a = mon.snapshot()            # right before the traffic starts
    ...                           # the trial's traffic
    b = mon.snapshot()            # right after it stopped
    host = mon.figures(a, b)      # {"disturbed": bool, "reasons": [str], ...figures}

For the DUT's CPUs and for the generator's, over the trial's wall time:
- others_s / others_ratio: CPU time anything but the lab's own threads ran there: the CPUs' busy
  time (wall - idle - iowait - steal, /proc/stat) minus the run time of the lab's threads pinned
  there (/proc/TID/schedstat): on the DUT's CPUs its receive NAPI kthreads and the spinner that keeps
  them awake (gtplab.lab.awake), on the generator's its receive NAPI kthreads and this process (the
  engine's sending threads and the runner; getrusage counts the threads that ended too) or the lab's
  TRex server; and minus other tasks at SCHED_IDLE pinned there (idle_policy_s: another lab's
  spinner takes only idle time, and any task preempts it at once). /proc/stat counts in 10 ms units (USER_HZ 100): a CPU's figure is exact to about
  +-20 ms per trial, 2 % of a 1 s trial;
- steal_s / steal_ratio: time the hypervisor ran something else on these vCPUs (/proc/stat steal);
- on the DUT's CPUs, wait_s / wait_ratio: how long the DUT's receive threads were runnable but not
  running (their schedstat run-queue wait): behind another real-time task, in a non-preemptible
  section of another task's kernel code, or waiting for a halted vCPU to wake;
- awake: whether the DUT CPUs were kept out of halt during the trial, and how (gtplab.lab.awake);
- top: the tasks outside the lab that ran most on these CPUs (tid, comm, ms), a hint of who it was.

A trial is disturbed when one of these is beyond its threshold (THRESHOLDS; chosen from a quiet host
and one with a CPU hog on the DUT CPU, docs/benchmarks.md "Repeatability"), or when the idle-state
tuning that applied at the start no longer holds. The search does not take a disturbed trial as
evidence about the DUT (gtplab.measure.mlrsearch: excluded and the load measured again) and a case
whose trials were mostly disturbed says "host busy".

Used by gtplab.measure.runner.Runner.trial (the trial's "host" record) and bench/repeatability.py.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from gtplab.kernel.sched import CpuTimes, cpu_times, schedstat, threads_of
from gtplab.kernel.threads import napi_threads
from gtplab.lab import awake, external

# Beyond these a trial is disturbed (fractions of the trial's wall time, per CPU of the side; the
# comparisons are strict: "steal_ratio": 0.0 flags any steal). Why each, measured on the 2-vCPU VM
# (docs/benchmarks.md, "Repeatability": bench/repeatability.py prints these figures per trial):
# - others on the DUT CPUs: 2 %. /proc/stat counts in 10 ms units; on a quiet host the quiet trials'
#   figure was at most 1.1 % (130 trials of 0.5 s). A CPU hog (SCHED_OTHER) beside the DUT's real-time
#   receive threads takes 11-26 % of the DUT CPU when it runs a whole trial, but only 2.3-2.9 % when
#   the threads are busy at 2 Mpps (what real-time throttling leaves it): still 14 ms without the
#   DUT's thread, far more than its 256-frame ring lasts. 5 % missed those (38 of 41 hog trials
#   flagged), 2 % flags all 41 and none of the quiet ones (docs/benchmarks.md, "Repeatability");
# - others on the generator CPUs: 5 %, above the rounding and far below what another busy task
#   takes (other developers' test suites on this machine: a median 35 %);
# - steal: any. A vCPU the hypervisor takes away for 10 ms stops the DUT's receive thread for 10 ms,
#   and its 256-frame ring lasts 0.25 ms at 1 Mpps: that trial's loss is the host's;
# - the DUT threads' run-queue wait: 1 % (10 ms per second). Measured with the spinner, its median is
#   0 and its p95 0.1-0.2 % even on a loaded host; the threads are real-time, so waiting at all means
#   another real-time task, a non-preemptible section of another task (this kernel: preempt none) or
#   waking a halted CPU held them up.
THRESHOLDS = {
    "dut_others_ratio": 0.02,
    "generator_others_ratio": 0.05,
    "steal_ratio": 0.0,
    "dut_wait_ratio": 0.01,
}
TOP_MIN_NS = 2_000_000              # a task in `top` ran at least 2 ms during the trial


@dataclass
class Snapshot:
    t: float
    cpus: dict[int, CpuTimes]
    dut: dict[int, tuple[int, int]]             # DUT receive thread: (run ns, wait ns)
    lab: dict[int, int]                         # other lab threads (not this process): run ns
    lab_cpus: dict[int, list[int] | None]       # their affinity
    own_ns: int                                 # this process's CPU time, ended threads included
    own_off_gen_ns: int                         # of it, threads now allowed off the generator CPUs
    awake: tuple[bool, str]
    tasks: dict[int, int] = field(default_factory=dict)   # every task: run ns (for `top`)


class HostMonitor:
    """Snapshots of what the host ran on a lab's CPUs; figures() turns two into a trial's record."""

    def __init__(self, lab, thresholds: dict[str, float] | None = None, top: bool = True):
        self.lab = lab
        self.gen = list(lab.cpus.generator) if lab.cpus else []
        self.dut = list(lab.cpus.dut) if lab.cpus else []
        self.th = dict(THRESHOLDS, **(thresholds or {}))
        self.top = top

    # ------------------------------------------------------------------ snapshots

    def _lab_threads(self) -> tuple[list[int], list[int]]:
        """(DUT receive threads, the lab's other threads outside this process: the generator's receive
        threads, the spinners, the lab's TRex server, the socket path's workers and main thread).
        The socket path's threads are the DUT's own work on the DUT CPUs (counted there by their
        affinity), but not among the receive threads whose run-queue wait is judged: on one CPU
        they wait for its NAPI threads, the DUT's own contention, not the host's."""
        lab = self.lab
        dut = lab.dut_threads()
        other = [t for p in lab.ports for t in napi_threads(p.ifname)]
        other += lab.awake_threads()
        sock = lab.socket_pid() if getattr(lab, "dut_mode", None) == "socket" else None
        if sock:
            other += threads_of(sock)
        if getattr(lab, "dut_mode", None) == "external":
            # an external UPF's process (a socket/TUN UPF forwards in it): the DUT's own work, as the
            # socket path's threads are
            for pid in external.upf_pids(getattr(lab, "external", None), lab.dut_ns):
                other += threads_of(pid)
        trex = lab.trex_pid() if hasattr(lab, "trex_pid") else None
        if trex:
            other += threads_of(trex)
        return dut, other

    def snapshot(self) -> Snapshot:
        dut, other = self._lab_threads()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        own = int((ru.ru_utime + ru.ru_stime) * 1e9)
        gen = set(self.gen)
        off = 0
        for t in threads_of(os.getpid()):
            aff = _affinity(t)
            if aff is not None and not set(aff) <= gen:
                s = schedstat(t)
                off += s.run_ns if s else 0
        lab, lab_cpus = {}, {}
        for t in other:
            s = schedstat(t)
            if s:
                lab[t], lab_cpus[t] = s.run_ns, _affinity(t)
        d = {}
        for t in dut:
            s = schedstat(t)
            if s:
                d[t] = (s.run_ns, s.wait_ns)
        snap = Snapshot(time.monotonic(), cpu_times(), d, lab, lab_cpus, own, off,
                        awake.held(self.lab.state.get("awake")))
        if self.top:
            snap.tasks = _all_tasks()
        return snap

    # ------------------------------------------------------------------ figures

    def figures(self, a: Snapshot, b: Snapshot) -> dict[str, Any]:
        wall = max(b.t - a.t, 1e-9)
        rec: dict[str, Any] = {"wall_s": round(wall, 6), "window": [round(a.t, 4), round(b.t, 4)],
                               "dut_cpus": self.dut, "generator_cpus": self.gen}
        # the lab's own run time on each side
        dut_run = sum(b.dut[t][0] - a.dut[t][0] for t in b.dut if t in a.dut)
        dut_wait = sum(b.dut[t][1] - a.dut[t][1] for t in b.dut if t in a.dut)
        on_dut = on_gen = 0
        for t, run in b.lab.items():
            if t not in a.lab:
                continue
            aff = set(b.lab_cpus.get(t) or [])
            if aff and aff <= set(self.dut):
                on_dut += run - a.lab[t]
            elif aff and aff <= set(self.gen):
                on_gen += run - a.lab[t]
        own = max(0, (b.own_ns - a.own_ns) - (b.own_off_gen_ns - a.own_off_gen_ns))
        idle_dut, idle_gen = self._idle_policy_ns(a, b)
        for side, cpus, lab_ns, idle_ns in (("dut", self.dut, dut_run + on_dut, idle_dut),
                                            ("generator", self.gen, on_gen + own, idle_gen)):
            if not cpus:
                continue
            d = _sum(b.cpus, cpus) - _sum(a.cpus, cpus)
            cap = wall * len(cpus)
            busy = max(0.0, cap - d.idle - d.iowait - d.steal)
            others = max(0.0, busy - lab_ns / 1e9 - idle_ns / 1e9)
            rec[side] = {"busy_s": round(busy, 4), "lab_s": round(lab_ns / 1e9, 4), "others_s": round(others, 4),
                         "others_ratio": round(others / cap, 4), "steal_s": round(d.steal, 4),
                         "steal_ratio": round(d.steal / cap, 4), "idle_policy_s": round(idle_ns / 1e9, 4)}
        if "dut" in rec:
            rec["dut"].update(threads_run_s=round(dut_run / 1e9, 6), wait_s=round(dut_wait / 1e9, 6),
                              wait_ratio=round(dut_wait / 1e9 / wall, 4))
        aw = self.lab.state.get("awake") or {}
        rec["awake"] = {"method": aw.get("method", "none"), "applied": bool(aw.get("applied")),
                        "held": a.awake[0] and b.awake[0],
                        **({"why": b.awake[1] or a.awake[1]} if not (a.awake[0] and b.awake[0]) else {})}
        if self.top and a.tasks:
            rec["top"] = self._top(a, b)
        # other labs holding these CPUs (asked to share, gtplab.lab.claims): what they ran is in
        # others_s; the record names them, whether or not they ran anything
        rec["shared_with"] = self.lab.shared_with() if hasattr(self.lab, "shared_with") else []
        rec["disturbed"], rec["reasons"] = self.judge(rec)
        return rec

    def judge(self, rec: dict) -> tuple[bool, list[str]]:
        """Whether a trial's figures are beyond the thresholds, and in words why."""
        th, reasons = self.th, []
        d, g = rec.get("dut") or {}, rec.get("generator") or {}
        if d.get("others_ratio", 0) > th["dut_others_ratio"]:
            reasons.append(f"other tasks ran {d['others_ratio']:.0%} of the DUT CPUs' time "
                           f"({d['others_s'] * 1e3:.0f} ms; threshold {th['dut_others_ratio']:.0%})")
        if g.get("others_ratio", 0) > th["generator_others_ratio"]:
            reasons.append(f"other tasks ran {g['others_ratio']:.0%} of the generator CPUs' time "
                           f"({g['others_s'] * 1e3:.0f} ms; threshold {th['generator_others_ratio']:.0%})")
        for side, x in (("DUT", d), ("generator", g)):
            if x.get("steal_ratio", 0) > th["steal_ratio"]:
                reasons.append(f"the hypervisor took {x['steal_ratio']:.1%} of the {side} CPUs' time (steal "
                               f"{x['steal_s'] * 1e3:.0f} ms; " + ("any counts" if not th["steal_ratio"] else
                                                                   f"threshold {th['steal_ratio']:.0%}") + ")")
        if d.get("wait_ratio", 0) > th["dut_wait_ratio"]:
            reasons.append(f"the DUT's receive threads waited {d['wait_s'] * 1e3:.1f} ms runnable "
                           f"({d['wait_ratio']:.1%} of the trial; threshold {th['dut_wait_ratio']:.0%})")
        aw = rec.get("awake") or {}
        if aw.get("applied") and not aw.get("held"):
            reasons.append(f"the DUT CPUs' idle tuning ({aw.get('method')}) stopped holding: {aw.get('why')}")
        if reasons and rec.get("top"):
            reasons.append("most CPU outside the lab: " + ", ".join(
                f"{t['comm']} ({t['tid']}) {t['ms']:.0f} ms" for t in rec["top"][:3]))
        return bool(reasons), reasons

    def _idle_policy_ns(self, a: Snapshot, b: Snapshot) -> tuple[int, int]:
        """Run time of other tasks at SCHED_IDLE pinned within the DUT's CPUs, and within the generator's,
        during the trial: another lab's spinner (gtplab.lab.awake) on the same CPUs. Such a task runs
        only when nothing else wants the CPU and is preempted at once by any task (the lab's
        receive threads are real-time): it takes the CPU's idle time, not the lab's, so it is not in
        "others" (what it did cost shows in the DUT threads' run-queue wait). Needs the snapshots'
        task list (top=True); 0 without it."""
        if not (a.tasks and b.tasks):
            return 0, 0
        mine = set(a.dut) | set(b.dut) | set(a.lab) | set(b.lab) | set(threads_of(os.getpid()))
        dut, gen = set(self.dut), set(self.gen)
        on_dut = on_gen = 0
        for t, run in b.tasks.items():
            dt = run - a.tasks.get(t, run)          # a task born during the trial: not counted
            if dt <= 0 or t in mine or _policy(t) != os.SCHED_IDLE:
                continue
            aff = set(_affinity(t) or ())
            if aff and aff <= dut:
                on_dut += dt
            elif aff and aff <= gen:
                on_gen += dt
        return on_dut, on_gen

    def _top(self, a: Snapshot, b: Snapshot) -> list[dict]:
        """The tasks outside the lab that ran most during the trial and may run on the lab's CPUs."""
        mine = set(a.dut) | set(b.dut) | set(a.lab) | set(b.lab) | set(threads_of(os.getpid()))
        cpus = set(self.dut) | set(self.gen)
        out = []
        for t, run in b.tasks.items():
            dt = run - a.tasks.get(t, 0)       # a task born during the trial: all of it
            if t in mine or dt < TOP_MIN_NS:
                continue
            aff = _affinity(t)
            if aff is not None and not set(aff) & cpus:
                continue
            out.append({"tid": t, "comm": _comm(t), "ms": round(dt / 1e6, 1)})
        return sorted(out, key=lambda x: -x["ms"])[:5]


def summary(trials: list[dict]) -> dict[str, Any]:
    """A case's host figures over its trials: how many were disturbed, the worst of each figure,
    the reasons of the disturbed ones (once each)."""
    hosts = [t["host"] for t in trials if t.get("host")]
    if not hosts:
        return {}
    worst = {}
    for side in ("dut", "generator"):
        for k in ("others_ratio", "steal_ratio", "wait_ratio"):
            vals = [h[side][k] for h in hosts if k in (h.get(side) or {})]
            if vals:
                worst[f"{side}_{k}_max"] = max(vals)
    reasons = []
    for h in hosts:
        for r in h.get("reasons", []):
            key = r.split("(")[0].strip()
            if key not in {x.split("(")[0].strip() for x in reasons}:
                reasons.append(r)
    shared: dict[str, dict] = {}
    for h in hosts:
        for x in h.get("shared_with") or []:
            shared.setdefault(x["lab"], x)
    return {"trials": len(hosts), "disturbed": sum(bool(h.get("disturbed")) for h in hosts),
            "awake": hosts[-1].get("awake"), **worst, "reasons": reasons, "shared_with": list(shared.values())}


def notes(s: dict) -> list[str]:
    """What a case's record notes of its host figures (summary()): disturbed trials, shared CPUs."""
    out = []
    if s.get("disturbed"):
        out.append(f"{s['disturbed']} of {s['trials']} trial(s) disturbed by the host, not evidence about "
                   "the DUT: " + "; ".join(s.get("reasons") or []))
    for x in s.get("shared_with") or []:
        out.append(f"CPU(s) {','.join(map(str, x['cpus']))} shared with lab {x['lab']} (pid {x['pid']}) "
                   "during this case (asked to share): what it ran is in these numbers")
    return out


def layout_notes(lay: dict | None) -> list[str]:
    """What run.json notes of how the DUT CPUs were kept awake (gtplab.lab.awake's record in the layout)."""
    aw = (lay or {}).get("awake")
    if not aw:
        return []
    if not aw.get("applied"):
        return ["the DUT CPUs were NOT kept out of halt: " + "; ".join(aw.get("notes") or ["nothing applied"])
                + ". Waking a halted CPU is in the DUT receive threads' run-queue wait (host.dut.wait_ratio)"]
    if aw.get("method") == "spinner":
        return ["the DUT CPUs were kept out of halt by a SCHED_IDLE spinner (no cpuidle states on this host); "
                "its CPU time is the lab's own, left out of the DUT's costs"]
    return []


def _sum(cpus: dict[int, CpuTimes], which: list[int]) -> CpuTimes:
    z = CpuTimes(0.0, 0.0, 0.0, 0.0)
    for c in which:
        t = cpus.get(c)
        if t:
            z = CpuTimes(z.busy + t.busy, z.idle + t.idle, z.iowait + t.iowait, z.steal + t.steal)
    return z


def _affinity(tid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(tid))
    except OSError:
        return None


def _policy(tid: int) -> int | None:
    try:
        return os.sched_getscheduler(tid)
    except OSError:
        return None


def _comm(tid: int) -> str:
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _all_tasks() -> dict[int, int]:
    """Every task on the machine: run ns so far (schedstat). ~3 ms for ~150 tasks here."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    out[int(t)] = int(f.read().split(None, 1)[0])
            except (OSError, ValueError):
                continue
    return out
