"""The NDR/PDR search: the highest rate whose trial loses no more than a tolerance, RFC 2544 style.

    best, trials, status = ndr_search(lambda pps: runner.trial(prep, pps, 0.5), tolerance=0.0)

A pure function of the trials it runs: run_trial(pps) is the only way it touches traffic
(gtplab.measure.runner.Runner.trial in a sweep, a simulated DUT in the unit tests). Used by
gtplab.measure.sweep (rate modes ndr and pdr), the throughput tests and bench/.
"""

from __future__ import annotations

from typing import Callable


def ndr_search(run_trial: Callable[[float | None], dict], tolerance: float, *, max_pps: float | None = None,
               resolution: float = 0.02, max_trials: int = 8) -> tuple[dict | None, list[dict], str]:
    """RFC 2544-style search for the highest rate with loss_ratio <= tolerance.

    run_trial(pps) runs one trial (pps None: as fast as the generator goes) and returns a dict with
    offered_pps (achieved), loss_ratio and, optionally, generator_bound (the generator did not reach
    the rate asked) and limit (which side lost the packets). The first trial is at max_pps (or the
    generator's max); if it loses nothing beyond the tolerance, the search ends "generator-bound": the
    DUT's NDR is above what the generator can offer, and no NDR is claimed. Otherwise the next guess
    is the rate the DUT delivered in that trial, then a binary search between the highest passing and
    the lowest failing rate, until they are within resolution x the top rate or max_trials ran.
    A trial that was generator-bound counts at the rate it achieved, not the one asked.
    Returns (best passing trial or None, every trial in order, status); status starts with
    "generator-bound" when no NDR can be claimed, and names the side that limited otherwise."""
    trials: list[dict] = []

    def run(pps):
        t = run_trial(pps)
        t["passed"] = t.get("loss_ratio") is not None and t["loss_ratio"] <= tolerance
        trials.append(t)
        return t

    first = run(max_pps)
    if first["passed"]:
        return first, trials, (f"generator-bound: no loss at the highest rate the generator reached "
                               f"({first['offered_pps']:.0f} pps); the DUT's NDR is above it")
    top = max_pps or first["offered_pps"]
    lo, hi, best = 0.0, top, None
    guess = first.get("rx_pps") or top / 2
    guess = guess if 0 < guess < top else top / 2
    while len(trials) < max_trials and hi - lo > resolution * top:
        t = run(guess)
        # a generator-bound trial says something about the rate it reached, not the one asked
        at = min(guess, t["offered_pps"]) if t.get("generator_bound") else guess
        if t["passed"]:
            lo, best = at, t
        else:
            hi = at
        guess = (lo + hi) / 2
    if best is None:
        limits = {t.get("limit") or "dut" for t in trials}
        if all(lim.startswith("generator") for lim in limits):
            # every loss was the generator's own (e.g. TRex's receive ring): nothing said of the DUT
            return None, trials, (f"generator-bound: no trial met the loss tolerance {tolerance} (lowest "
                                  f"tried {hi:.0f} pps) and every loss was the generator's "
                                  f"({', '.join(sorted(limits))})")
        return None, trials, f"no trial met the loss tolerance {tolerance} (lowest tried {hi:.0f} pps)"
    failing = [t for t in trials if not t["passed"]]
    above = min(failing, key=lambda t: t.get("offered_pps") or 0)
    limit = above.get("limit") or "dut"
    status = "resolution reached" if hi - lo <= resolution * top else f"stopped after {max_trials} trials"
    if limit.startswith("generator"):
        return best, trials, (f"generator-bound: the loss above {best['offered_pps']:.0f} pps was the "
                              f"generator's ({limit}); {status}")
    return best, trials, f"{status}; limit: {limit}"
