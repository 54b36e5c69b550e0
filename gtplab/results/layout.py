"""The report's layout sentence: what of the lab's measurement model was applied on the host of a run,
what was not, and what that cost, from run.json's cpu_layout (threads pinned, the DUT CPUs kept awake,
the CPU claim) and the cases' host figures (gtplab.observe.host). Used by gtplab.results.html.

    text, notes = layout_text(run, cases)      # plain text; the caller escapes it
"""

from __future__ import annotations

import statistics
from typing import Any

AWAKE = {"cpuidle": "their idle states but polling turned off (cpuidle)",
         "spinner": "a SCHED_IDLE spinner on each (no cpuidle states on this host), its CPU time left out "
                    "of the DUT's costs"}


def _cpus(c: list[int]) -> str:
    return ", ".join(map(str, c))


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def host_figures(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every trial of every case: trials, disturbed, the median share of the trial time the DUT's
    receive threads waited runnable and that other tasks took on the DUT's CPUs, the labs sharing."""
    hosts = [t["host"] for c in cases for t in c.get("trials") or [] if isinstance(t.get("host"), dict)
             and "dut" in t["host"]]
    shared = {}
    for h in hosts:
        for x in h.get("shared_with") or []:
            shared.setdefault(x["lab"], x)
    return {"trials": len(hosts), "disturbed": sum(bool(h.get("disturbed")) for h in hosts),
            "dut_wait": _median([h["dut"].get("wait_ratio", 0.0) for h in hosts]),
            "dut_others": _median([h["dut"].get("others_ratio", 0.0) for h in hosts]),
            "shared_with": list(shared.values())}


def layout_text(run: dict[str, Any], cases: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """(the sentence, notes) for a run with a CPU layout; ("", []) without one."""
    lay = run.get("cpu_layout")
    if not lay:
        return "", []
    applied, missing = [], []
    pinned = (f"the generator (engine threads, its receive NAPI) on CPU(s) {_cpus(lay['generator'])}, the DUT's "
              f"receive NAPI threads, where its XDP programs run, on CPU(s) {_cpus(lay['dut'])}, real-time")
    (applied if lay.get("honoured") else missing).append(pinned)
    aw = lay.get("awake")
    if aw is None:
        applied.append("the DUT CPUs kept out of idle (how was not recorded: a run from before issue 26)")
    elif aw.get("applied"):
        applied.append("the DUT CPUs kept out of halt by " + AWAKE.get(aw.get("method"), str(aw.get("method"))))
    else:
        missing.append("the DUT CPUs kept out of halt (" + "; ".join(aw.get("notes") or ["nothing applied"]) + ")")
    cl = lay.get("claim")
    h = host_figures(cases)
    shared = list((cl or {}).get("shared_with") or []) + [x for x in h["shared_with"]
                                                          if x["lab"] not in {y["lab"] for y in (cl or {}).get("shared_with") or []}]
    if cl and not shared:
        applied.append(f"CPU(s) {_cpus(cl['cpus'])} held by this lab alone")
    elif shared:
        missing.append("CPUs to itself: shared with " + ", ".join(f"lab {x['lab']} (pid {x.get('pid')})" for x in shared)
                       + " (asked to share)")
    parts = []
    if applied:
        parts.append("Applied on this host: " + "; ".join(applied) + ".")
    if missing:
        parts.append("Not applied: " + "; ".join(missing) + ".")
    if h["trials"]:
        cost = (f"Measured in this run over {h['trials']} trials: {h['disturbed']} disturbed by the host "
                f"(not evidence about the DUT); the DUT's receive threads waited runnable a median "
                f"{h['dut_wait']:.1%} of a trial's time")
        if aw is not None and not aw.get("applied"):
            cost += " (waking a halted CPU is part of it)"
        cost += f", other tasks took {h['dut_others']:.1%} of the DUT CPUs."
        parts.append(cost)
    if not lay.get("honoured"):
        parts.append("The layout was NOT honoured: numbers are the chain's.")
    elif not missing and not h["disturbed"]:
        parts.append("The layout was honoured: every rate and CPU cost below is the DUT's.")
    else:
        parts.append("The layout was honoured in part: rates and CPU costs below are the DUT's, with what is "
                     "not applied above in them.")
    return " ".join(parts), list(lay.get("notes") or [])
