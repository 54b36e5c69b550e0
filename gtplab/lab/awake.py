"""Keeping the DUT's CPUs out of halt while the lab measures, by whatever this host allows, and saying
which (docs/lab.md, "Idle").

    rec = keep_awake(cpus, "auto", save)    # save(rec) is called before anything is changed
    held(rec)                               # (True, "") while it still holds, else (False, why)
    restore(rec)                            # gives back what keep_awake changed; safe to repeat

Methods, in the order "auto" tries them:
- cpuidle: turn off every idle state but polling (/sys/devices/system/cpu/cpuN/cpuidle/stateK/disable),
  as on a UPF host tuned with C-states off. Needs a cpuidle driver (the AMD CI host has one).
- spinner: a process per DUT CPU, pinned there, at SCHED_IDLE, that never sleeps: the CPU always has
  something to run, so it never halts, and any other task (the DUT's SCHED_FIFO receive threads
  first) preempts it at once. Its CPU time is the lab's own and is left out of every DUT cost
  (gtplab.dut.local, gtplab.observe.host). It exits when the process that started it does.
  For a host without a cpuidle driver (this Intel VM: /sys/devices/system/cpu/cpu1/cpuidle is absent),
  where nothing else works at run time, measured on kernel 6.18:
    * PM QoS (/dev/cpu_dma_latency, cpuN/power/pm_qos_resume_latency_us) is read only by cpuidle
      governors; without a driver do_idle() -> cpuidle_idle_call() goes straight to
      default_idle_call() (HLT) and neither changes anything (wake-up latency unchanged);
    * threaded NAPI busy polling (`threaded` = 2) arrived after 6.18: writing 2 fails with EIO;
    * the haltpoll cpuidle driver is built in but did not register (no KVM hint); it only loads
      with `cpuidle_haltpoll.force=1` on the kernel command line.
- none: nothing (asked for, or nothing worked): the record says so and why.

A record (kept in the lab's state file, so teardown gives everything back after a crash too):
    {"method", "asked", "cpus", "applied": bool, "notes": [..], "states": [the idle states kept off],
     "saved": {path: value it had, for those this lab turned off}, "spinners": [{"pid", "cpu", "start"}]}

Used by gtplab.lab.topology (Lab.keep_cpus_awake, restore_cpu_idle, teardown) and
gtplab.observe.host (whether the tuning held during a trial).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from gtplab.errors import LabError
from gtplab.kernel.sched import alive, start_time

METHODS = ("auto", "cpuidle", "spinner", "none")
SPINNER_TAG = "gtplab-awake"
_CHILDREN: dict[int, subprocess.Popen] = {}     # spinners this process started, to wait for
CPU_SYS = Path("/sys/devices/system/cpu")

# The spinner: pinned, SCHED_IDLE, spins until its parent (the lab's owner) is gone. No `pause` in
# the loop: in a VM a tight PAUSE loop can make the hypervisor take the vCPU away (pause-loop exiting).
_SPIN = """
import os, sys
cpu, owner = int(sys.argv[2]), int(sys.argv[3])
try:
    with open("/proc/self/comm", "w") as f:
        f.write(("gtplab-awake%d" % cpu)[:15])
except OSError:
    pass
os.sched_setaffinity(0, [cpu])
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
sys.stdout.write("ready\\n")
sys.stdout.flush()
while os.getppid() == owner:
    for _ in range(100000):
        pass
"""


def idle_states(cpu: int) -> list[Path]:
    """The cpuidle states of a CPU other than polling (their directories); [] without a driver."""
    out = []
    for st in sorted((CPU_SYS / f"cpu{cpu}" / "cpuidle").glob("state*")):
        try:
            if (st / "name").read_text().strip() != "POLL":
                out.append(st)
        except OSError:
            continue
    return out


def cpuidle_driver() -> str | None:
    try:
        d = (CPU_SYS / "cpuidle" / "current_driver").read_text().strip()
    except OSError:
        return None
    return None if d in ("", "none") else d


def keep_awake(cpus: list[int], method: str = "auto", save: Callable[[dict], None] | None = None) -> dict:
    """Keep `cpus` out of halt by `method` (METHODS); returns the record (see the module's doc).
    save(record) runs before each change, so a crash leaves a record that restore() can undo."""
    if method not in METHODS:
        raise LabError(f"awake method {method!r}: one of {', '.join(METHODS)}")
    rec: dict = {"asked": method, "cpus": list(cpus), "method": "none", "applied": False, "notes": [],
                 "saved": {}, "spinners": []}
    save = save or (lambda r: None)
    if method == "none":
        rec["notes"].append("idle states left as they are (asked: none)")
        return rec
    states = {c: idle_states(c) for c in cpus}
    if method in ("auto", "cpuidle") and all(states.values()):
        return _cpuidle(rec, states, save)
    if method == "cpuidle" or (method == "auto" and any(states.values())):
        missing = [c for c, s in states.items() if not s]
        rec["notes"].append(f"no cpuidle states on CPU(s) {','.join(map(str, missing))} "
                            f"(cpuidle driver: {cpuidle_driver() or 'none'})")
        if method == "cpuidle":
            return rec
    if method in ("auto", "spinner"):
        if method == "auto":
            rec["notes"].append(f"no cpuidle driver on this host (cpuidle: {cpuidle_driver() or 'none'}): "
                                "PM QoS and busy-polling NAPI do nothing here, a SCHED_IDLE spinner keeps "
                                "the DUT CPUs from halting")
        return _spinners(rec, save)
    return rec


def _cpuidle(rec: dict, states: dict[int, list[Path]], save) -> dict:
    rec["method"] = "cpuidle"
    # every state that must stay off (held() checks them all: another lab may have turned them off
    # first and turn them on again), and the ones this lab turned off (restore() gives back only those)
    rec["states"] = [str(s / "disable") for ss in states.values() for s in ss]
    for st in (s for ss in states.values() for s in ss):
        try:
            if (st / "disable").read_text().strip() == "0":
                rec["saved"][str(st / "disable")] = "0"
        except OSError:
            continue
    save(rec)                  # before the change: teardown undoes it
    failed = []
    for path in rec["saved"]:
        try:
            Path(path).write_text("1")
        except OSError as e:
            failed.append(f"Couldn't turn off idle state {path}: {e.strerror}")
    rec["notes"] += failed
    ok, why = held(rec)
    rec["applied"] = ok and not failed
    if not ok:
        rec["notes"].append(why)
    n = sum(len(s) for s in states.values())
    rec["notes"].insert(0, f"cpuidle ({cpuidle_driver()}): {n} idle state(s) other than polling off on "
                           f"CPU(s) {','.join(map(str, rec['cpus']))}")
    return rec


def _spinners(rec: dict, save) -> dict:
    rec["method"] = "spinner"
    save(rec)
    for cpu in rec["cpus"]:
        p = subprocess.Popen([sys.executable, "-c", _SPIN, SPINNER_TAG, str(cpu),
                              str(os.getpid())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        rec["spinners"].append({"pid": p.pid, "cpu": cpu, "start": start_time(p.pid)})
        save(rec)
        line = p.stdout.readline().strip()
        p.stdout.close()
        if line != "ready":
            err = p.stderr.read().strip().splitlines()
            rec["notes"].append(f"Couldn't start the spinner on CPU {cpu}: {err[-1] if err else 'it exited'}")
        p.stderr.close()
        _CHILDREN[p.pid] = p    # restore() kills and waits for it; this process's exit ends it too
    ok, why = held(rec)
    rec["applied"] = ok
    if not ok:
        rec["notes"].append(why)
    else:
        rec["notes"].insert(0, f"spinner: a SCHED_IDLE process on each of CPU(s) "
                               f"{','.join(map(str, rec['cpus']))} keeps them out of halt; its CPU time is "
                               "the lab's own, left out of the DUT's costs")
    return rec


def spinner_tids(rec: dict | None) -> list[int]:
    """The spinner processes of a record that still run (they are single-threaded)."""
    return [s["pid"] for s in (rec or {}).get("spinners", []) if _is_spinner(s)]


def _is_spinner(s: dict) -> bool:
    if not alive(s["pid"], s.get("start")):
        return False
    try:
        return SPINNER_TAG.encode() in Path(f"/proc/{s['pid']}/cmdline").read_bytes()
    except OSError:
        return False


def held(rec: dict | None) -> tuple[bool, str]:
    """Whether the tuning of a record still holds now: the idle states it turned off are still off,
    its spinners still run on their CPUs. (False, why) otherwise; a record of method none holds
    nothing and says so."""
    if not rec:
        return False, "the DUT CPUs were not kept awake"
    if rec["method"] == "none":
        return False, "idle states not kept off: " + ("; ".join(rec.get("notes") or []) or "nothing applied")
    if rec["method"] == "cpuidle":
        back = []
        for path in rec.get("states") or rec["saved"]:
            try:
                if Path(path).read_text().strip() != "1":
                    back.append(path)
            except OSError:
                back.append(path)
        if back:
            return False, f"{len(back)} idle state(s) turned on again by someone else (e.g. {back[0]})"
        return True, ""
    gone = [s["cpu"] for s in rec["spinners"] if not _is_spinner(s)]
    if not rec["spinners"]:
        return False, "no spinner runs (restored)"
    if gone:
        return False, f"the spinner of CPU(s) {','.join(map(str, gone))} is gone"
    wrong = []
    for s in rec["spinners"]:
        try:
            if sorted(os.sched_getaffinity(s["pid"])) != [s["cpu"]]:
                wrong.append(s["cpu"])
        except OSError:
            wrong.append(s["cpu"])
    if wrong:
        return False, f"the spinner of CPU(s) {','.join(map(str, wrong))} is no longer pinned there"
    return True, ""


def restore(rec: dict | None) -> list[str]:
    """Give back what keep_awake changed; returns what it did. Safe to run again, from any process."""
    if not rec:
        return []
    done = []
    for path, value in (rec.get("saved") or {}).items():
        try:
            Path(path).write_text(value)
            done.append(f"idle state {path} restored")
        except OSError:
            pass
    for s in rec.get("spinners") or []:
        if _is_spinner(s):
            try:
                # a killed task still has to run to exit: at SCHED_IDLE on one CPU that real-time NAPI
                # threads (another lab's) keep busy, that took more than 2 s here; as a normal task on
                # any CPU it exits at once
                os.sched_setscheduler(s["pid"], os.SCHED_OTHER, os.sched_param(0))
                os.sched_setaffinity(s["pid"], range(os.cpu_count() or 1))
            except OSError:
                pass
            try:
                os.kill(s["pid"], signal.SIGKILL)
                done.append(f"spinner pid {s['pid']} on CPU {s['cpu']} stopped")
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    for s in rec.get("spinners") or []:
        p = _CHILDREN.pop(s["pid"], None)
        if p is not None:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                done.append(f"spinner pid {s['pid']} killed, not yet gone")
    while any(_is_spinner(s) for s in rec.get("spinners") or []) and time.monotonic() < deadline:
        time.sleep(0.01)            # another process's spinner: its parent reaps it
    rec["saved"], rec["spinners"], rec["applied"] = {}, [], False
    return done
