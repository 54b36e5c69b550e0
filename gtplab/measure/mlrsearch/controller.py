"""The Controller (RFC 9971 4.9.2): trial results in, the next Trial Input out; no I/O.

    c = Controller(DEFAULT_GOALS, min_load=10e3, max_load=2e6)
    while (ti := c.next_trial()) is not None:
        c.record(ti, measure(ti.load, ti.duration))       # a TrialOutput
    result = c.result()                                   # one GoalResult per goal

or `search(measure, goals, min_load=..., max_load=...)`, which is that loop. The controller's only
state is the list of trials: the next trial is a function of the goals, the load limits and the
trials so far, so simulated DUTs test it in milliseconds (tests/measure/test_mlrsearch.py).

Load selection is the implementation's freedom (RFC 9971 4.1.3, 5.5); this one:

- Targets. A goal is searched with itself as the target, and a goal with exceed ratio 0 first with
  coarser targets of shorter trials (phases(), which says why only those). A goal works on the
  target after the finest one already satisfied. Every trial counts for every goal and target
  (RFC 9971 4.6.6: short trials are still classified by the goal itself).
- For a target T, with its relevant bounds:
  1. loads already measured but Undecided under T between the bounds are measured again: the
     coarser target's bounds first (confirming them with longer trials), else the one next to the
     bound there is (the largest below the upper bound when there is no lower bound; otherwise
     the smallest, RFC 9971 5.3.4: smaller loads first, so that bounds found earlier are less
     likely to be invalidated). This is how a single high-loss trial gets its second (exceed ratio
     0.5) and how an excluded (disturbed) trial is repeated. Except: while there is no lower
     bound, a load whose every trial was overloaded (lost more than OVERLOAD_LOSS beyond the
     goal's loss ratio, more than a host stall takes) is not measured again yet; the search steps
     down from it (rule 3) and comes back to it once a lower bound is below it.
  2. no Upper Bound: max load. The search's first trial is there (RFC 9971 1.1 item 3).
  3. an Upper Bound and no Lower Bound below it: step down. The first step from max load goes to
     the load its forwarding rate says a hard limit would allow (the forwarding rate at maximum
     offered load, RFC 2285 3.6.2, over 1 - goal loss ratio, RFC 9971 5.6.1), or one width if
     that is higher; after that each step is twice the last one (an exponential search), the
     last one measured from where it aimed (a step to the estimate that lands just above a hard
     limit is followed by a step of one width, not of twice the distance from max load); never
     below min load. Once a load at or below such an estimate was overloaded too, the DUT has no
     hard limit there (the embedded lab at 64 B forwards far more overloaded than it carries
     without loss) and steps double from the load above, without the estimates.
  4. both bounds, farther apart than T's width: bisect, counted in widths, so that the last step
     lands on the width; but when the upper bound's forwarding rate puts a hard limit inside the
     bracket (and no trial refuted such an estimate, rule 3), go to the grid point just above it
     (a DUT with a hard limit: 5 to 8 trials for NDR and PDR together).
  A target is satisfied when its bounds are within its width, or max load is a Lower Bound, or min
  load an Upper Bound (the irregular ends of RFC 9971 4.8.4.2).
- Durations: a target's trials are of its final trial duration; a load measured again whose last
  trial was high-loss is probed at the goal's initial trial duration when a high-loss probe would
  make it an Upper Bound (only for goals whose initial trial duration is shorter than the final).
- Goals share trials. Of the trials the unsatisfied goals want, the one at the smallest load is
  run (5.3.4), at the longest duration any of them wants there.
- Budget: the search stops before a trial that would pass `max_trials` or `time_budget`, seconds
  counted as each trial's effective duration plus `trial_overhead` (the measurer's time between
  trials). Goals left unsatisfied get an irregular result with their current bounds.
- Disturbed trials (TrialOutput.disturbed): kept, counted in the budget and reported; with the
  default policy "exclude" they do not take part in Load Classification, so their load stays
  Undecided and is measured again (rule 1). "count" classifies them like any other trial.
  RFC 9971 knows no disturbed trials: excluding them is a deviation the test report must state
  (RFC 9971 4.4.3: a deviation from the RFC 2544 trial "MUST be described explicitly").
- Generator shortfall (TrialOutput.shortfall): a measurer may leave out of the loss ratio a
  shortfall of up to half the narrowest goal width (goal.shortfall_allowance); the controller counts
  a larger one as loss (TrialOutput.with_shortfall_counted), so no Lower Bound sits more than half
  a width above the load the generator offered there, whatever the measurer forgave.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from gtplab.measure.mlrsearch.goal import (DEFAULT_FINAL_TRIAL_DURATION, DEFAULT_GOALS, GoalError, SearchGoal,
                                           check_goals, scaled, shortfall_allowance)
from gtplab.measure.mlrsearch.logic import (Bound, Bounds, Trial, TrialInput, TrialOutput, by_load, classify,
                                            conditional_throughput, relevant_bounds)

# the search budget per case of the default sweep, seconds: with the max load trial, the latency
# trials and the DUT's cost trials, 20 cases whose searches all run out of it stay under 5 minutes on
# the 2-vCPU VM (docs/sweep.md, measured: 12 s and then, with the cost trials, 10 s took the sweep
# past 5 minutes there)
DEFAULT_TIME_BUDGET = 7.0
# seconds the embedded lab spends per trial besides its traffic (counters, streams, settling): a 1 s
# trial took 1.19 s in `gtplab sweep` (docs/mlrsearch.md)
DEFAULT_TRIAL_OVERHEAD = 0.2
DISTURBED_POLICIES = ("exclude", "count")
MAX_COARSE_WIDTH = 0.5
# a trial that lost more than this beyond its goal's loss ratio is overloaded, not stalled: a host
# stall loses what arrives while it lasts, 2 % of a 0.5 s trial for 10 ms (rule 1 of target_trial)
OVERLOAD_LOSS = 0.05
EXPANSION = 2.0         # each step down without a lower bound is twice the last one

IRREGULAR_MAX_LOAD = "max load is a lower bound"
IRREGULAR_MIN_LOAD = "min load is an upper bound"
IRREGULAR_BUDGET = "the search budget ran out before the bounds were within the goal width"


def default_time_budget(goals: Iterable[SearchGoal]) -> float:
    """DEFAULT_TIME_BUDGET scaled by the goals' longest final trial duration over the default one
    (the RFC 2544 preset's 60 s trials get 120 x 7 s = 14 minutes)."""
    longest = max(g.final_trial_duration for g in goals)
    return DEFAULT_TIME_BUDGET * max(1.0, longest / DEFAULT_FINAL_TRIAL_DURATION)


def phases(goal: SearchGoal) -> tuple[SearchGoal, ...]:
    """The targets a goal is searched with, the goal itself first, then coarser ones.

    Only a goal with exceed ratio 0 gets coarser targets: its trial durations double from the
    initial trial duration up to the final one (60 s final, 1 s initial: 32, 16, 8, 4, 2, 1 s), each
    with a duration sum of one trial and twice the width of the next finer target (at most
    MAX_COARSE_WIDTH). With exceed ratio 0 one short high-loss trial makes a load an Upper Bound of
    the goal itself (RFC 9971 appendix C.3.2, the RFC2544 goal at point 2), so the short phases
    prove upper bounds cheaply and find where the full-length trials go. With a non-zero exceed
    ratio short trials cannot make a Lower Bound and their high-loss seconds are balanced by the
    low-loss ones (appendix A), so coarse phases mostly add trials the goal has to repeat at full
    length: on simulated DUTs they made such searches 40-70 % longer on a hard limit and, on noisy
    DUTs, at best 8 % shorter on average with longer worst cases (bench/mlrsearch_sim.py --coarse,
    docs/mlrsearch.md). Such a goal uses its initial trial duration for probes only
    (_retry_duration)."""
    if goal.exceed_ratio > 0:
        return (goal,)
    durations = []
    d = goal.initial_trial_duration
    while d < goal.final_trial_duration * (1 - 1e-9):
        durations.append(d)
        d *= 2
    out = [goal]
    w = goal.width
    for d in reversed(durations):
        w = min(MAX_COARSE_WIDTH, w * 2)
        out.append(scaled(goal, final_trial_duration=d, duration_sum=d, width=w,
                          initial_trial_duration=min(d, goal.initial_trial_duration)))
    return tuple(out)


# ------------------------------------------------------------------------------------------ per goal

@dataclass(frozen=True)
class PhaseState:
    """One target's view of the trials: its relevant bounds, and whether it is satisfied (and how)."""
    target: SearchGoal
    bounds: Bounds
    satisfied: bool
    irregular: str | None


def phase_state(target: SearchGoal, groups: Mapping[float, Sequence[Trial]], min_load: float,
                max_load: float) -> PhaseState:
    b = relevant_bounds(groups, target)
    if b.upper is None:
        done = b.classes.get(max_load) is Bound.LOWER
        return PhaseState(target, b, done, IRREGULAR_MAX_LOAD if done else IRREGULAR_BUDGET)
    if b.lower is None:
        done = b.upper <= min_load
        return PhaseState(target, b, done, IRREGULAR_MIN_LOAD if done else IRREGULAR_BUDGET)
    done = b.upper - b.lower <= target.width * b.upper * (1 + 1e-9)
    return PhaseState(target, b, done, None if done else IRREGULAR_BUDGET)


def _widths(a: float, b: float, w: float) -> float:
    """How many widths w the load b is below the load a (a >= b): log(a / b) / -log(1 - w)."""
    return math.log(a / b) / -math.log(1.0 - w)


def _retry_duration(goal: SearchGoal, target: SearchGoal, trials: Sequence[Trial]) -> float:
    """The duration to measure an Undecided load at again: the target's trial duration, unless the
    load's last trial was high-loss and a high-loss trial of the goal's initial trial duration would
    make it an Upper Bound of the target (the goal's last phase, exceed ratio 0.5: one full-length
    high-loss trial and any short one); a low-loss answer then costs a short trial more."""
    d = goal.initial_trial_duration
    if not trials or d >= target.final_trial_duration or not trials[-1].high_loss(target):
        return target.final_trial_duration
    probe = Trial(trials[-1].load, d, 1.0, d, 0.0)
    return d if classify([*trials, probe], target) is Bound.UPPER else target.final_trial_duration


def target_trial(goal: SearchGoal, st: PhaseState, coarser: PhaseState | None,
                 groups: Mapping[float, Sequence[Trial]], min_load: float, max_load: float) -> TrialInput:
    """The trial an unsatisfied target of `goal` asks for next (rules 1-4 of the module docstring);
    `coarser` is the state of the next coarser target, if any."""
    target = st.target
    b, w, d = st.bounds, target.width, target.final_trial_duration
    lo, up = b.lower, b.upper

    def between(load: float) -> bool:
        return (lo is None or load > lo) and (up is None or load < up)

    # 1: loads measured but Undecided between the bounds: the coarser phase's bounds first (lower
    # first), then the one next to the bound we have (the smallest above the lower bound, or the
    # largest below the upper one)
    inside = sorted(load for load, c in b.classes.items() if c is Bound.UNDECIDED and between(load))
    # ... except, while there is no Lower Bound, a load overloaded in every counted trial (each lost
    # more than OVERLOAD_LOSS beyond the goal's loss ratio: more than a host stall takes): the search
    # steps down from it first (rule 3) and measures it again once a Lower Bound is below it. On a
    # DUT that forwards more overloaded than it carries without loss (the embedded lab at 64 B:
    # 2.9 Mpps out at 3.8 Mpps offered, zero loss only below ~1.5-2 Mpps; docs/mlrsearch.md) two
    # trials per load on the way down took the whole budget above the NDR
    lossy = [x for x in inside if lo is None and _overloaded(target, groups.get(x, ()))]
    retry = [x for x in inside if x not in lossy]
    if retry:
        hints = [x for x in ((coarser.bounds.lower, coarser.bounds.upper) if coarser else ())
                 if x is not None and x in retry]
        load = hints[0] if hints else retry[-1] if lo is None and up is not None else retry[0]
        return TrialInput(load, _retry_duration(goal, target, groups.get(load, ())))
    if lossy:
        up = min(lossy)                 # where the step down starts (rule 3)
    refuted = _not_a_hard_limit(target, groups)
    if up is None:                                                  # 2
        return TrialInput(max_load, d)
    if lo is None:                                                  # 3
        above = [load for load, c in b.classes.items()
                 if (c is Bound.UPPER or load in lossy) and load > up]
        if above:
            # the last step's length, from where it aimed: the upper bound above, or the hard
            # limit its forwarding rate pointed at when that was what the step went to
            nxt = min(above)
            e = _estimate(target, groups.get(nxt, ()))
            # (not when the DUT is shown not to have a hard limit: the step doubles from the load
            # above)
            aim = e if e is not None and up <= e < nxt * (1.0 - w) and not refuted else nxt
            load = up * (1.0 - w) ** max(1.0, EXPANSION * _widths(aim, up, w))
        else:
            load = up * (1.0 - w)
            estimate = _estimate(target, groups.get(up, ()))
            if estimate is not None:
                load = min(load, estimate)
        return TrialInput(max(min_load, load), d)
    steps = math.ceil(_widths(up, lo, w) - 1e-9)                   # 4
    half = max(1, steps // 2)
    estimate = _estimate(target, groups.get(up, ()))
    if estimate is not None and lo < estimate < up * (1.0 - w) and not refuted:
        # the upper bound's forwarding rate says where a hard limit would be: the grid point just
        # above it (used once: after it, the estimate is at or below a bound)
        half = min(steps - 1, max(1, math.floor(_widths(up, estimate, w) + 1e-9)))
    return TrialInput(up * (1.0 - w) ** half, d)


def _not_a_hard_limit(target: SearchGoal, groups: Mapping[float, Sequence[Trial]]) -> bool:
    """The trials show the DUT has no hard limit where the forwarding rates point: a load at or below
    the estimate from a higher load's forwarding rate (_estimate) was overloaded too. Then the
    estimates only lead the search down one width at a time (each overloaded load's forwarding rate
    a little below it), and rules 3 and 4 step and bisect without them."""
    loads = sorted(groups)
    for i, y in enumerate(loads):
        if not _overloaded(target, groups[y]):
            continue
        for x in loads[i + 1:]:
            e = _estimate(target, groups[x])
            if e is not None and y <= e:
                return True
    return False


def _overloaded(target: SearchGoal, trials: Sequence[Trial]) -> bool:
    """Every trial at a load lost more than OVERLOAD_LOSS beyond the target's loss ratio."""
    return bool(trials) and all(t.loss_ratio > target.loss_ratio + OVERLOAD_LOSS for t in trials)


def _estimate(target: SearchGoal, trials: Sequence[Trial]) -> float | None:
    """Where a DUT with a hard limit would meet the target's loss ratio, from the forwarding rates
    measured at a load (RFC 9971 5.6.1): the largest of them over (1 - goal loss ratio)."""
    rates = [t.forwarding_rate for t in trials if t.forwarding_rate > 0]
    return max(rates) / (1.0 - target.loss_ratio) if rates else None


@dataclass(frozen=True)
class GoalState:
    """Where a goal is: the target it works on and the trial it wants next."""
    goal: SearchGoal
    phase: int                      # index into phases(goal): 0 is the goal itself
    want: TrialInput | None         # None: the goal is satisfied


def goal_state(goal: SearchGoal, targets: Sequence[SearchGoal], groups: Mapping[float, Sequence[Trial]],
               min_load: float, max_load: float) -> GoalState:
    """The goal works on the target after the finest one satisfied (the coarsest if none is)."""
    states = [phase_state(t, groups, min_load, max_load) for t in targets]
    finest = next((k for k, s in enumerate(states) if s.satisfied), None)
    if finest == 0:
        return GoalState(goal, 0, None)
    k = len(targets) - 1 if finest is None else finest - 1
    coarser = states[k + 1] if k + 1 < len(states) else None
    return GoalState(goal, k, target_trial(goal, states[k], coarser, groups, min_load, max_load))


# ------------------------------------------------------------------------------------------ results

@dataclass(frozen=True)
class GoalResult:
    """Goal Result (RFC 9971 4.8.4): regular when both relevant bounds exist within the goal width;
    irregular otherwise, with `irregular` saying why and whatever bounds exist (an irregular result
    with max load as its lower bound is RFC 9971 4.8.4.2's "effective" Relevant Lower Bound)."""
    goal: SearchGoal
    lower: float | None                     # Relevant Lower Bound (4.8.2)
    upper: float | None                     # Relevant Upper Bound (4.8.1)
    conditional_throughput: float | None    # at the lower bound (4.8.3, appendix B)
    irregular: str | None = None

    @property
    def regular(self) -> bool:
        return self.irregular is None

    @property
    def code(self) -> str:
        return self.goal.code

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "regular": self.regular, "irregular": self.irregular,
                "relevant_lower_bound": self.lower, "relevant_upper_bound": self.upper,
                "conditional_throughput": self.conditional_throughput, "goal": self.goal.as_dict()}


def goal_result(st: PhaseState, groups: Mapping[float, Sequence[Trial]]) -> GoalResult:
    b = st.bounds
    ct = conditional_throughput(groups[b.lower], st.target, b.lower) if b.lower is not None else None
    return GoalResult(st.target, b.lower, b.upper, ct, st.irregular)


@dataclass(frozen=True)
class SearchResult:
    """Search Result (RFC 9971 4.8.5) and the rest of the Controller Output (4.8.6): one GoalResult
    per goal in the goals' order, every trial, and why the search stopped."""
    goals: tuple[GoalResult, ...]
    trials: tuple[Trial, ...]
    stop: str                               # "done", "trial budget" or "time budget"
    min_load: float
    max_load: float
    search_time: float                      # sum of effective durations + overhead per trial
    disturbed_policy: str = "exclude"
    shortfall_allowance: float | None = None  # the generator shortfall a trial could leave out of its loss

    def __getitem__(self, key: str | SearchGoal) -> GoalResult:
        for r in self.goals:
            if key == r.goal or key == r.code:
                return r
        raise KeyError(key)

    @property
    def disturbed_trials(self) -> int:
        return sum(t.disturbed for t in self.trials)

    @property
    def disturbed_share(self) -> float:
        """Share of the trial seconds that were disturbed."""
        total = sum(t.effective_duration for t in self.trials)
        return sum(t.effective_duration for t in self.trials if t.disturbed) / total if total else 0.0

    @property
    def host_busy(self) -> bool:
        """Most trial seconds were disturbed (issue 26 item 2: the case says "host busy", not a limit)."""
        return self.disturbed_share > 0.5

    def as_dict(self, trials: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "goals": [r.as_dict() for r in self.goals], "stop": self.stop,
            "min_load": self.min_load, "max_load": self.max_load, "search_time_s": self.search_time,
            "trial_count": len(self.trials), "disturbed_trials": self.disturbed_trials,
            "disturbed_share": self.disturbed_share, "disturbed_policy": self.disturbed_policy,
            "host_busy": self.host_busy, "shortfall_allowance": self.shortfall_allowance}
        if trials:
            d["trials"] = [t.as_dict() for t in self.trials]
        return d


# ------------------------------------------------------------------------------------------ controller

def _check_load(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise GoalError(f"{name} must be a positive finite load, got {v!r}")
    return float(v)


class Controller:
    """RFC 9971's Controller for `goals` between min_load and max_load (module docstring)."""

    def __init__(self, goals: Iterable[SearchGoal] = DEFAULT_GOALS, *, min_load: float, max_load: float,
                 max_trials: int | None = None, time_budget: float | None = None,
                 trial_overhead: float = DEFAULT_TRIAL_OVERHEAD, disturbed: str = "exclude"):
        self.goals = check_goals(goals)
        self.min_load = _check_load("min_load", min_load)
        self.max_load = _check_load("max_load", max_load)
        if self.min_load > self.max_load:
            raise GoalError(f"min_load {min_load:g} is above max_load {max_load:g}")
        if max_trials is not None and (isinstance(max_trials, bool) or not isinstance(max_trials, int)
                                       or max_trials < 1):
            raise GoalError(f"max_trials must be a positive integer or None, got {max_trials!r}")
        self.max_trials = max_trials
        self.time_budget = default_time_budget(self.goals) if time_budget is None else float(time_budget)
        if not self.time_budget > 0:
            raise GoalError(f"time_budget must be positive seconds, got {time_budget!r}")
        if isinstance(trial_overhead, bool) or not isinstance(trial_overhead, (int, float)) or trial_overhead < 0:
            raise GoalError(f"trial_overhead must be seconds >= 0, got {trial_overhead!r}")
        self.trial_overhead = float(trial_overhead)
        if disturbed not in DISTURBED_POLICIES:
            raise GoalError(f"disturbed: one of {', '.join(DISTURBED_POLICIES)}, got {disturbed!r}")
        self.disturbed = disturbed
        self.shortfall_allowance = shortfall_allowance(self.goals)
        self._targets = {g: phases(g) for g in self.goals}
        self.trials: list[Trial] = []
        self.spent = 0.0
        self._pending: TrialInput | None = None
        self._stop: str | None = None

    def groups(self) -> dict[float, list[Trial]]:
        """The trials Load Classification uses, by load; a load measured only by excluded trials is
        there with none (Undecided: measured again)."""
        out: dict[float, list[Trial]] = {t.load: [] for t in self.trials}
        counted = [t for t in self.trials if self.disturbed == "count" or not t.disturbed]
        out.update(by_load(counted))
        return out

    def states(self) -> list[GoalState]:
        groups = self.groups()
        return [goal_state(g, self._targets[g], groups, self.min_load, self.max_load) for g in self.goals]

    def next_trial(self) -> TrialInput | None:
        """The next trial to measure, or None when the search is over (then result()). Asking again
        before record() gives the same trial."""
        if self._pending is not None:
            return self._pending
        if self._stop is not None:
            return None
        wants = [s.want for s in self.states() if s.want is not None]
        if not wants:
            self._stop = "done"
            return None
        load = min(w.load for w in wants)
        ti = TrialInput(load, max(w.duration for w in wants if w.load == load))
        if not self.min_load * (1 - 1e-12) <= ti.load <= self.max_load * (1 + 1e-12):
            raise AssertionError(f"controller chose load {ti.load!r} outside [{self.min_load}, {self.max_load}]")
        if self.max_trials is not None and len(self.trials) >= self.max_trials:
            self._stop = "trial budget"
            return None
        if self.spent + ti.duration + self.trial_overhead > self.time_budget * (1 + 1e-9):
            self._stop = "time budget"
            return None
        self._pending = ti
        return ti

    def record(self, ti: TrialInput, out: TrialOutput) -> Trial:
        """The measurer's answer to the trial next_trial() gave."""
        if ti != self._pending:
            raise ValueError(f"record({ti}): the trial asked for is {self._pending}")
        if not isinstance(out, TrialOutput):
            raise TypeError(f"the measurer must return a TrialOutput, got {type(out).__name__}")
        t = Trial.of(ti, out.with_shortfall_counted(self.shortfall_allowance))
        self.trials.append(t)
        self.spent += t.effective_duration + self.trial_overhead
        self._pending = None
        return t

    @property
    def done(self) -> bool:
        return self._stop is not None

    def result(self) -> SearchResult:
        """The Search Result: meant for after next_trial() returned None; before that, goals not yet
        satisfied are irregular (IRREGULAR_BUDGET)."""
        groups = self.groups()
        results = []
        for g in self.goals:
            st = phase_state(g, groups, self.min_load, self.max_load)
            results.append(goal_result(st, groups))
        return SearchResult(tuple(results), tuple(self.trials), self._stop or "unfinished",
                            self.min_load, self.max_load, self.spent, self.disturbed, self.shortfall_allowance)


def search(measure: Callable[[float, float], TrialOutput], goals: Iterable[SearchGoal] = DEFAULT_GOALS, *,
           min_load: float, max_load: float, max_trials: int | None = None,
           time_budget: float | None = None, trial_overhead: float = DEFAULT_TRIAL_OVERHEAD,
           disturbed: str = "exclude", on_trial: Callable[[Trial], None] | None = None) -> SearchResult:
    """Run a search: measure(load, duration) -> TrialOutput, called until the controller is done.
    time_budget None: default_time_budget(goals). on_trial(trial) after each trial (progress)."""
    c = Controller(goals, min_load=min_load, max_load=max_load, max_trials=max_trials,
                   time_budget=time_budget, trial_overhead=trial_overhead, disturbed=disturbed)
    while (ti := c.next_trial()) is not None:
        t = c.record(ti, measure(ti.load, ti.duration))
        if on_trial is not None:
            on_trial(t)
    return c.result()
