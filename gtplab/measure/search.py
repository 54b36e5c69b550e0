"""The search as the sweep runs it: RFC 9971 MLRsearch (gtplab.measure.mlrsearch) with the lab's
trials as its Measurer, and what a case may claim from the result.

    trial = lambda load, seconds: runner.trial(prep, load, seconds)     # a trial dict (runner.py)
    top = search.max_load(trial, cfg_max=None, line_rate=None)          # one short trial flat out
    cs = search.run(trial, mlr.DEFAULT_GOALS, min_load=10e3, max_load=top)
    v = search.verdict(cs)             # per goal: bounds, conditional throughput, limit; the case's limit
    lat = search.latency_points(trial, cs, v, (0, 10, 50, 90), duration=0.5, idle=10e3)

The controller (gtplab.measure.mlrsearch) is pure; this module is the part that meets the lab:

- The Measurer. A trial's loss ratio is the generator's (tx - rx) / tx, and a generator that sent
  less than load x duration by more than half the narrowest goal width (mlr.shortfall_allowance:
  1 % with the default goals, whose width is 2 %) has its shortfall counted as loss
  (TrialOutput.from_counts, RFC 9971 4.9.1), so a trial the generator could not send at the load
  asked is never taken as low-loss at that load, and no Lower Bound is more than half the goal
  width above what the generator offered there (docs/mlrsearch.md, "Generator shortfall"). A
  trial is disturbed when the runner says the host disturbed it: its `host` record
  (gtplab.observe.host, measured by Runner.trial around the trial's traffic) has `disturbed` true,
  and that is TrialOutput.disturbed; a runner without a CPU layout (a remote DUT or generator)
  measures nothing and disturbs no trial. Disturbed trials are kept and counted in the
  budget, and by default (`disturbed: exclude`) not classified: their load is measured again.
- Max load (RFC 9971 4.6.8.1): the spec's, else the lab config's max_rate_pps capped at the line
  rate of the frame size, else what the generator reaches flat out in one short trial (the old
  search's first trial). Min load: the spec's, never above max load.
- The limit of a case, per goal and for the case (the first goal's): "dut" when the trials at the
  relevant upper bound lost packets at the DUT; "generator (transmit)" / "generator (receive)"
  when every loss there was the generator's own (it could not send the load, or its receive side
  lost them; trial_side: a trial whose shortfall counted as loss and whose DUT lost no more of what
  it was sent than the goal's loss ratio is high-loss for the goal only through the shortfall, so
  the generator's, e.g. PDR0.5's upper bound at a trial sent 19 % short that lost 0.4 % at the
  DUT's ring), and when max load is a lower bound (the old "generator-bound": the DUT's rate is
  above what the generator offered); "max load" when a max load the spec set is a lower bound;
  and "host busy" when most trial time was disturbed (SearchResult.host_busy): then the case says
  so with the figures and claims nothing, never "limit: DUT". Only a DUT-limited goal has a claim.
- Latency the way FD.io CSIT reports it: one trial each at 0 (idle: a low load), 10, 50 and 90 %
  of the PDR found (the relevant lower bound of the goal with the largest loss ratio, PDR0.5 by
  default), the latency stream's min/avg/p50/p99/max at each.

Used by gtplab.measure.sweep (rate mode search), the throughput tests and bench/.
docs/mlrsearch.md describes the search and docs/sweep.md its spec keys.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from gtplab.errors import UserError
from gtplab.measure import mlrsearch as mlr
from gtplab.rates import wire_rates

# trial(load pps or None for flat out, seconds) -> a trial dict as Runner.trial returns it
TrialFn = Callable[[float | None, float], dict]

PROBE_DURATION = 0.25         # seconds of the one flat-out trial that finds max load
DEFAULT_MIN_LOAD = 10e3       # pps: low enough for any DUT worth measuring, enough packets per trial
LATENCY_AT = (0, 10, 50, 90)  # % of the PDR: FD.io CSIT's latency loads (0: idle)
IDLE_SHARE = 0.05             # the idle load is at most this share of the PDR (below the 10 % point)

GENERATOR_LIMITS = ("generator (transmit)", "generator (receive)")
HOST_BUSY = "host busy"


def is_disturbed(t: dict) -> bool:
    """The runner's word on a trial: its `host` record says the host disturbed it (issue 26 item 2;
    absent: not disturbed)."""
    return bool((t.get("host") or {}).get("disturbed"))


def trial_output(t: dict, load: float, duration: float,
                 shortfall: float = mlr.DEFAULT_SHORTFALL) -> mlr.TrialOutput:
    """RFC 9971's Trial Output of a trial dict measured at `load` pps for `duration` s; a generator
    shortfall above `shortfall` (the search's mlr.shortfall_allowance) counts as loss."""
    return mlr.TrialOutput.from_counts(int(t["tx_packets"]), int(t["rx_packets"]), intended=load * duration,
                                       shortfall=shortfall, offered_load=t.get("offered_pps"),
                                       disturbed=is_disturbed(t), info=t)


def sent_short(t: dict, load: float, duration: float, allowance: float) -> bool:
    """The generator sent less than (1 - allowance) of load x duration: the trial's shortfall is
    counted as loss (trial_output)."""
    intended = load * duration
    return intended > 0 and int(t["tx_packets"]) < (1.0 - allowance) * intended


PROBE_TRIES = 2               # flat-out trials at most, while the host disturbs them (a busy host: ~0.6 s each)


@dataclass(frozen=True)
class MaxLoad:
    pps: float
    source: str                                 # "spec", "lab config", "generator"
    probes: tuple[dict, ...] = ()               # the flat-out trials, when the generator's rate was measured

    @property
    def probe(self) -> dict | None:
        """The flat-out trial max load comes from (the last one)."""
        return self.probes[-1] if self.probes else None

    def describe(self) -> str:
        return {"spec": "the spec's search.max_load", "lab config": "the lab config's max_rate_pps",
                "generator": f"the generator flat out ({PROBE_DURATION:g} s trial)"}[self.source]


def max_load(trial: TrialFn, *, spec_max: float | None = None, cfg_max: float | None = None,
             line_rate: float | None = None, probe_duration: float = PROBE_DURATION) -> MaxLoad:
    """Max load: the spec's, else the lab config's (at most the frame size's line rate), else a
    probe_duration trial as fast as the generator goes (its offered rate); a flat-out trial the host
    disturbed (the generator's CPU taken) is run again, PROBE_TRIES in all."""
    if spec_max:
        return MaxLoad(float(spec_max), "spec")
    if cfg_max:
        return MaxLoad(float(min(cfg_max, line_rate) if line_rate else cfg_max), "lab config")
    probes = []
    while True:
        t = trial(None, probe_duration)
        t["phase"] = "max load"
        probes.append(t)
        if not is_disturbed(t) or len(probes) >= PROBE_TRIES:
            break
    pps = t.get("offered_pps") or 0.0
    if not pps > 0:
        raise UserError(f"the generator sent nothing in a {probe_duration:g} s trial flat out: no max load "
                        "to search under (set search.max_load, or the lab config's max_rate_pps)")
    return MaxLoad(float(pps), "generator", tuple(probes))


@dataclass
class CaseSearch:
    """One case's search: the controller's result, max load, and the runner's trial dicts in the order
    run (each with a `search` record: load, duration, MLRsearch's loss ratio, disturbed, high-loss
    per goal)."""
    result: mlr.SearchResult
    max_load: MaxLoad
    trials: list[dict]

    @property
    def goals(self) -> tuple[mlr.SearchGoal, ...]:
        return tuple(r.goal for r in self.result.goals)

    def counted(self, t: dict) -> bool:
        """Whether Load Classification used the trial (the disturbed policy)."""
        return self.result.disturbed_policy == "count" or not t["search"]["disturbed"]


def run(trial: TrialFn, goals: Iterable[mlr.SearchGoal], *, min_load: float, max_load: MaxLoad,
        time_budget: float | None = None, max_trials: int | None = None, disturbed: str = "exclude",
        on_trial: Callable[[mlr.Trial], None] | None = None) -> CaseSearch:
    """One MLRsearch of `goals` between min_load (at most max load) and max load, each trial run by
    trial(load, duration)."""
    goals = mlr.check_goals(goals)
    allowance = mlr.shortfall_allowance(goals)
    dicts: list[dict] = []

    def measure(load: float, duration: float) -> mlr.TrialOutput:
        t = trial(load, duration)
        t["phase"] = "search"
        dicts.append(t)
        return trial_output(t, load, duration, allowance)

    res = mlr.search(measure, goals, min_load=min(min_load, max_load.pps), max_load=max_load.pps,
                     time_budget=time_budget, max_trials=max_trials, disturbed=disturbed, on_trial=on_trial)
    for t, tr in zip(dicts, res.trials):
        t["search"] = {"load": tr.load, "duration": tr.duration, "loss_ratio": tr.loss_ratio,
                       "disturbed": tr.disturbed, "high_loss": {g.code: tr.high_loss(g) for g in goals},
                       "shortfall_forgiven": tr.shortfall,
                       "short": sent_short(t, tr.load, tr.duration, allowance)}
    return CaseSearch(res, max_load, dicts)


# ------------------------------------------------------------------------------------------ verdict

def trial_side(t: dict, goal: mlr.SearchGoal) -> str:
    """Which side made a high-loss trial high-loss for `goal`: the runner's limit, except that a
    trial whose shortfall was counted as loss (the search's `short`; the runner's generator_bound in
    a record written before it) whose DUT lost no more of what it was sent than the goal's loss ratio
    (tx - rx, less the generator's own receive-ring and transmit-full losses) exceeded the goal only
    by the shortfall: "generator (transmit)"."""
    short = (t.get("search") or {}).get("short", t.get("generator_bound"))
    lim = t.get("limit") or ("generator (transmit)" if short else "dut")
    if lim != "dut" or not short:
        return lim
    tx = t.get("tx_packets") or 0
    gen_rx = (t.get("loss") or {}).get("generator_ingress_ring") or 0
    tx_full = ((t.get("dut") or {}).get("drops_by_reason") or {}).get("drop_tx_full", 0)
    dut_lost = tx - (t.get("rx_packets") or 0) - gen_rx - tx_full
    if tx and dut_lost <= goal.loss_ratio * tx:
        return "generator (transmit)"
    return "dut"


def goal_limit(g: mlr.GoalResult, cs: CaseSearch) -> str | None:
    """Which side set one goal's result (module docstring); None when nothing set it yet (no upper
    bound and max load not a lower bound: the budget ran out)."""
    if g.irregular == mlr.IRREGULAR_MAX_LOAD:
        return "max load" if cs.max_load.source == "spec" else "generator (transmit)"
    if g.upper is None:
        return None
    lossy = [t for t in cs.trials if t["search"]["load"] == g.upper and cs.counted(t)
             and t["search"]["high_loss"][g.code]]
    limits = [trial_side(t, g.goal) for t in lossy]
    if limits and all(lim in GENERATOR_LIMITS for lim in limits):
        return Counter(limits).most_common(1)[0][0]
    return "dut"


def _mpps(pps: float | None) -> str:
    return "none" if pps is None else f"{pps / 1e6:.3f}"


IRREGULAR_SHORT = {mlr.IRREGULAR_MAX_LOAD: "max load is a lower bound", mlr.IRREGULAR_MIN_LOAD:
                   "min load is an upper bound", mlr.IRREGULAR_BUDGET: "the budget ran out"}


def _figures(host: dict) -> dict[str, float]:
    """The numbers of a trial's `host` record, one level of nesting flattened: gtplab.observe.host's
    {"dut": {"others_ratio": 0.4, ...}, "generator": {...}} gives dut_others_ratio, generator_...;
    its wall time and window are the trial's, not the host's."""
    out: dict[str, float] = {}
    for k, v in host.items():
        if k in ("wall_s", "window"):
            continue
        items = [(f"{k}_{k2}", v2) for k2, v2 in v.items()] if isinstance(v, dict) else [(k, v)]
        for name, x in items:
            if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
                out[name] = x
    return out


def disturbance(cs: CaseSearch) -> dict[str, Any]:
    """How much the host disturbed the case's search: trials, disturbed ones, their share of the
    trial time, the policy, host busy, the runner's reasons (counted) and, per figure the runner
    gives in its `host` records (_figures), the largest value over the disturbed trials."""
    res = cs.result
    reasons: Counter = Counter()
    worst: dict[str, float] = {}
    for t in cs.trials:
        if not is_disturbed(t):
            continue
        host = t.get("host") or {}
        reasons.update(str(r) for r in host.get("reasons") or [])
        for k, v in _figures(host).items():
            worst[k] = max(worst.get(k, v), v)
    return {"trials": len(res.trials), "disturbed": res.disturbed_trials,
            "disturbed_share": res.disturbed_share, "policy": res.disturbed_policy, "host_busy": res.host_busy,
            "reasons": dict(reasons.most_common()), "worst": worst}


def shortfall(cs: CaseSearch) -> dict[str, Any]:
    """How often the generator sent less than the load asked by more than the search forgives
    (mlr.shortfall_allowance, `allowance`): such a trial's shortfall is loss (trial_output). The
    trials, the short ones, and the median share of the load the short ones sent."""
    short = [t for t in cs.trials if t["search"].get("short")]
    shares = sorted(t["offered_pps"] / t["search"]["load"] for t in short if t.get("offered_pps") is not None)
    return {"trials": len(cs.trials), "short": len(short), "allowance": cs.result.shortfall_allowance,
            "median_share": shares[len(shares) // 2] if shares else None}


def host_busy_text(d: dict[str, Any]) -> str:
    """The figures of a host-busy case, in words: 'host busy: 9 of 14 trials disturbed (64 % of the
    trial time): <the commonest reasons>'."""
    reasons = list(d.get("reasons") or {})
    why = ("; ".join(f"{r} ({d['reasons'][r]}x)" if d["reasons"][r] > 1 else r for r in reasons[:3])
           + (f"; {len(reasons) - 3} more" if len(reasons) > 3 else "")) if reasons else "no reason given"
    return (f"{HOST_BUSY}: {d['disturbed']} of {d['trials']} trials disturbed "
            f"({d['disturbed_share']:.0%} of the trial time): {why}")


@dataclass
class Verdict:
    """What a searched case says: per goal code its bounds, conditional throughput, regularity,
    limit and claim; the case's limit (its first goal's, or "host busy"), its claim in pps (the first
    goal's relevant lower bound when the DUT set it, the host did not disturb most of it), and a
    status line."""
    goals: dict[str, dict[str, Any]]
    limit: str | None
    claim: float | None
    claim_goal: str
    status: str
    notes: list[str]
    disturbance: dict[str, Any]
    shortfall: dict[str, Any]


def verdict(cs: CaseSearch, frame_size: int | None = None) -> Verdict:
    res = cs.result
    dist = disturbance(cs)
    short = shortfall(cs)
    goals: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for g in res.goals:
        lim = HOST_BUSY if res.host_busy else goal_limit(g, cs)
        claimed = g.lower if lim == "dut" else None
        goals[g.code] = {
            "rfc_code": g.goal.rfc_code, "lower_pps": g.lower, "upper_pps": g.upper,
            "conditional_pps": g.conditional_throughput, "regular": g.regular, "irregular": g.irregular,
            "limit": lim, "claimed_pps": claimed,
            "claimed": wire_rates(claimed, frame_size) if frame_size else None, "goal": g.goal.as_dict()}
        if g.irregular:
            notes.append(f"{g.goal.label}: irregular ({g.irregular}); lower bound {_mpps(g.lower)} Mpps, "
                         f"upper bound {_mpps(g.upper)} Mpps")
    first = res.goals[0]
    lim = goals[first.code]["limit"]
    if res.host_busy:
        notes.append(host_busy_text(dist) + "; no result is claimed (the DUT's limit was not measured)")
    elif lim in GENERATOR_LIMITS or lim == "max load":
        notes.append(f"{first.goal.label}: {lim} set the result: the DUT's is at least "
                     f"{_mpps(first.upper or first.lower)} Mpps, max load {_mpps(cs.max_load.pps)} Mpps "
                     f"({cs.max_load.describe()})")
    if short["short"]:
        notes.append(f"the generator sent less than {1 - short['allowance']:.0%} of the load asked in "
                     f"{short['short']} of {short['trials']} trials (those sent {short['median_share']:.1%} of it, "
                     "median): their shortfall counts as loss (RFC 9971 4.9.1; up to half the goal width is "
                     "forgiven); a generator whose CPU other tasks take falls short")
    if res.disturbed_trials and not res.host_busy:
        why = "; ".join(list(dist["reasons"])[:3])
        notes.append(f"{res.disturbed_trials} of {len(res.trials)} trials disturbed by the host "
                     f"({'excluded from' if res.disturbed_policy == 'exclude' else 'counted in'} the search)"
                     + (f": {why}" if why else ""))
    status = f"MLRsearch {res.stop}: " + ", ".join(
        f"{g.goal.label} "
        + ("regular" if g.regular else f"irregular ({IRREGULAR_SHORT.get(g.irregular, g.irregular)})")
        for g in res.goals)
    return Verdict(goals, lim, goals[first.code]["claimed_pps"], first.code, status, notes, dist, short)


def recorded_trial(cs: CaseSearch) -> dict:
    """The trial a case's contract fields (offered, received, loss, latency, DUT cost) come from: the
    last counted full-length trial at the first goal's relevant lower bound, a low-loss one if there
    is one (a Lower Bound may have a high-loss trial within its exceed ratio); without one, the
    counted trial at the lowest load (else any trial at the lowest load, else the max load probe)."""
    first = cs.result.goals[0]
    if first.lower is not None:
        at = [t for t in cs.trials if t["search"]["load"] == first.lower and cs.counted(t)
              and t["search"]["duration"] >= first.goal.final_trial_duration * (1 - 1e-9)]
        low = [t for t in at if not t["search"]["high_loss"][first.goal.code]]
        if low or at:
            return (low or at)[-1]
    pool = [t for t in cs.trials if cs.counted(t)] or cs.trials
    if pool:
        return min(pool, key=lambda t: t["search"]["load"])
    if cs.max_load.probe is not None:
        return cs.max_load.probe
    raise UserError("the search ran no trial: its budget is smaller than one trial")


# ------------------------------------------------------------------------------------------ latency

def latency_goal(goals: Sequence[mlr.SearchGoal]) -> mlr.SearchGoal:
    """The goal whose lower bound is "the PDR" of the latency loads: the largest loss ratio (the
    first such goal), PDR0.5 of the default goals."""
    return max(goals, key=lambda g: g.loss_ratio)


def latency_loads(pdr: float, percents: Iterable[float], idle: float) -> dict[str, float]:
    """{"0": idle load, "10": 0.1 x pdr, ...}; the idle load is at most IDLE_SHARE of the PDR."""
    out = {}
    for p in percents:
        key = f"{p:g}"
        out[key] = min(idle, IDLE_SHARE * pdr) if p == 0 else pdr * p / 100.0
    return out


def latency_points(trial: TrialFn, cs: CaseSearch, v: Verdict, percents: Iterable[float], *,
                   duration: float, idle: float,
                   on_point: Callable[[str, float], None] | None = None) -> tuple[dict[str, Any], list[dict]]:
    """One trial per load of latency_loads at the PDR found. Returns (the case's latency record, the
    trial dicts); with no PDR (the goal has no lower bound) no trial runs and the record says why."""
    g = latency_goal(cs.goals)
    gv = v.goals[g.code]
    rec: dict[str, Any] = {"goal": g.code, "rfc_code": g.rfc_code, "pdr_pps": gv["lower_pps"],
                           "pdr_regular": gv["regular"], "pdr_limit": gv["limit"], "duration_s": duration,
                           "points": {}, "note": None}
    if gv["lower_pps"] is None:
        rec["note"] = f"no latency loads: {g.label} has no lower bound ({gv['irregular']})"
        return rec, []
    if not gv["regular"] or gv["limit"] != "dut":
        rec["note"] = (f"the loads are shares of {g.label}'s lower bound, which is not a regular DUT-limited "
                       f"result ({gv['irregular'] or gv['limit']})")
    trials = []
    for key, load in latency_loads(gv["lower_pps"], percents, idle).items():
        if on_point:
            on_point(key, load)
        t = trial(load, duration)
        t["phase"] = "latency"
        t["latency_point"] = key
        trials.append(t)
        rec["points"][key] = {"load_pps": load, "offered_pps": t.get("offered_pps"), "rx_pps": t.get("rx_pps"),
                              "loss_ratio": t.get("loss_ratio"), "latency_us": t.get("latency_us"),
                              "disturbed": is_disturbed(t),
                              "conservation_ok": bool((t.get("conservation") or {}).get("ok"))}
    return rec, trials
