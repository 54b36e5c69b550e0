"""What the scheduler says about CPUs and threads, from /proc: per-CPU times (/proc/stat), a thread's
run time, run-queue wait and time slices (/proc/TID/schedstat), the threads of a process.

How precise each figure is, on a kernel with tick-based CPU accounting (CONFIG_TICK_CPU_ACCOUNTING,
the default, and this VM's: HZ 250, no IRQ time accounting):
- a CPU's idle and iowait time are measured at every idle entry and exit (NO_HZ), to the microsecond;
- its user/system/irq/softirq time is sampled at each tick (4 ms at HZ 250): whatever runs when
  the tick fires is charged the whole tick;
- its steal time (a VM's: time the hypervisor ran something else on this vCPU) comes from the
  hypervisor's steal clock, added at each tick;
- a thread's schedstat run time and wait time are the scheduler's own clock, to the nanosecond
  (CONFIG_SCHED_INFO; /proc/schedstat with per-CPU run-queue totals needs CONFIG_SCHEDSTATS, which
  this kernel does not have, so nothing here relies on it).
So a CPU's busy time is best taken as wall - idle - iowait - steal, and the lab's own share of it
from its threads' schedstat run time (gtplab.observe.host does both).

Used by gtplab.observe.host (a trial's disturbance), gtplab.lab.awake, gtplab.results.gateway (whether a
sweep's owner still runs) and bench/.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

USER_HZ = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """Seconds since boot one CPU spent: busy (user nice system irq softirq guest), idle, iowait, steal."""
    busy: float
    idle: float
    iowait: float
    steal: float

    def __sub__(self, o: "CpuTimes") -> "CpuTimes":
        return CpuTimes(self.busy - o.busy, self.idle - o.idle, self.iowait - o.iowait, self.steal - o.steal)


def cpu_times(path: str = "/proc/stat") -> dict[int, CpuTimes]:
    """{cpu: CpuTimes} for every CPU /proc/stat lists."""
    out = {}
    with open(path) as f:
        for line in f:
            name, *vals = line.split()
            if not name.startswith("cpu"):
                break
            if not name[3:].isdigit():
                continue
            v = [int(x) for x in vals] + [0] * 10
            # user nice system idle iowait irq softirq steal guest guest_nice; guest time is also in user
            out[int(name[3:])] = CpuTimes(busy=(v[0] + v[1] + v[2] + v[5] + v[6]) / USER_HZ,
                                          idle=v[3] / USER_HZ, iowait=v[4] / USER_HZ, steal=v[7] / USER_HZ)
    return out


@dataclass(frozen=True)
class SchedStat:
    """A thread's /proc/TID/schedstat: ns run on a CPU, ns waited on a run queue, time slices."""
    run_ns: int
    wait_ns: int
    slices: int


def schedstat(tid: int) -> SchedStat | None:
    """A thread's schedstat (any thread id: /proc/TID works for threads too); None when it is gone."""
    try:
        with open(f"/proc/{tid}/schedstat") as f:
            a, b, c = f.read().split()[:3]
        return SchedStat(int(a), int(b), int(c))
    except (OSError, ValueError):
        return None


def threads_of(pid: int) -> list[int]:
    """The thread ids of process pid ([] when it is gone)."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def comm(tid: int) -> str | None:
    try:
        with open(f"/proc/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat (or /proc/TID/stat) gtplab reads, by their proc(5) numbers."""
    comm: str           # 2, without its parentheses (it may hold spaces and ')')
    state: str          # 3: R S D Z X ...
    ppid: int           # 4
    pgrp: int           # 5
    utime: int          # 14: clock ticks in user mode
    stime: int          # 15: clock ticks in kernel mode
    start_ticks: int    # 22: clock ticks since boot; with the pid it names one process for the uptime
    cpu: int            # 39: the CPU it last ran on

    @property
    def exited(self) -> bool:
        """A zombie or dead task (its exit status not yet reaped): it runs nothing any more."""
        return self.state in ("Z", "X")

    @property
    def cpu_s(self) -> float:
        """Seconds of CPU it has used (user + system), to the clock tick."""
        return (self.utime + self.stime) / USER_HZ


def proc_stat(pid: int) -> ProcStat | None:
    """/proc/PID/stat of a process or thread, None when it is gone (the one parser of that file)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        head, _, tail = s.rpartition(")")           # the comm may hold ") ", the last ")" ends it
        rest = tail.split()
        return ProcStat(comm=head[head.index("(") + 1:], state=rest[0], ppid=int(rest[1]),
                        pgrp=int(rest[2]), utime=int(rest[11]), stime=int(rest[12]), start_ticks=int(rest[19]), cpu=int(rest[36]))
    except (OSError, ValueError, IndexError):
        return None


def live_stat(pid: int) -> ProcStat | None:
    """proc_stat() of a process that still runs: None also for a zombie, unless only its main thread
    has exited while other threads still run (then it is not one yet)."""
    st = proc_stat(pid)
    if st is None or not st.exited:
        return st
    try:
        return st if len(os.listdir(f"/proc/{pid}/task")) > 1 else None
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat field 22): with the pid, it names
    the process even after the pid is reused. None when it is gone (a zombie still has one)."""
    st = proc_stat(pid)
    return st.start_ticks if st else None


def alive(pid: int, started: int | None = None) -> bool:
    """Process pid exists (and, given `started`, is the one that started then, not a reused pid)."""
    st = start_time(pid)
    return st is not None and (started is None or st == started)


def boot_id() -> str:
    """This boot's id (/proc/sys/kernel/random/boot_id): with a pid and its start time, it names a
    process across reboots. "" when it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""
