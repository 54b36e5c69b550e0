"""Kernel threads and what they ran, from /proc: the NAPI kthreads of an interface, a thread's CPU
time, its CPU affinity.

Used by gtplab.lab.topology (pins the lab's NAPI kthreads), gtplab.dut.local (the DUT's CPU time:
its receive kthreads' run time), tests and bench/.
"""

from __future__ import annotations

import os


def napi_threads(ifname: str) -> list[int]:
    """Pids of the threaded-NAPI kthreads of interface ifname (comm "napi/<ifname>-<napi id>")."""
    pref = f"napi/{ifname}-"
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith(pref) and comm[len(pref):].isdigit():
            out.append(int(pid))
    return sorted(out)


def thread_cpu_ns(pid: int) -> int:
    """CPU time a thread has run, in ns (/proc/PID/schedstat; 0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def affinity(pid: int) -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


def process_cpu_ns(pid: int) -> int:
    """Run time of every thread of process pid (/proc/PID/task/*/schedstat), ns; 0 when it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    return sum(thread_cpu_ns(int(t)) for t in tids if t.isdigit())
