"""Search goals (RFC 9971 section 4.6, Goal Terms): what a search is for, as a small frozen record.

A SearchGoal holds the six goal attributes of RFC 9971:

    loss_ratio              Goal Loss Ratio (4.6.3): a trial losing more than this is high-loss
    exceed_ratio            Goal Exceed Ratio (4.6.4): the share of trial seconds that may be high-loss
                            at a Lower Bound
    final_trial_duration    Goal Final Trial Duration (4.6.1), seconds: a Lower Bound needs trials this long
    duration_sum            Goal Duration Sum (4.6.2), seconds: full-length trial seconds that classify
                            a load for sure
    width                   Goal Width (4.6.5), relative: (upper - lower) / upper at which the search
                            stops
    initial_trial_duration  Goal Initial Trial Duration (4.6.6), seconds: the shortest trials the
                            controller runs for this goal

The defaults, and why (docs/mlrsearch.md has the measurements):

    final_trial_duration 0.5 s, duration_sum 1 s, exceed_ratio 0.5 (RFC 9971's recommended value):
        a load is a Lower Bound after one low-loss 0.5 s trial; after a high-loss one it is measured
        again, and it is an Upper Bound only when the second loses too. One bad trial (a host
        stall, a disturbed trial) no longer moves the result: that is what the exceed ratio buys,
        for a second trial per Upper Bound. A sum of two trials is the least that tolerates one bad
        trial (RFC 9971 4.10.3's TST009 goal, scaled from 60 s to 0.5 s). 0.5 s rather than the old
        search's 1 s because of that second trial: two goals with 1 s trials took ~20 s per case on
        simulated noisy DUTs, with 0.5 s trials ~7 s (bench/mlrsearch_sim.py), and the default
        sweep has 20 cases to run in 5 minutes. Shorter trials are also less likely to catch a rare host stall (RFC 9971 2.4).
    width 0.02: the search stops when the bounds are within 2 % of the upper one, relative (the
        old search's 2 % was of the top rate, coarser). RFC 9971 4.6.5 recommends a relative width
        no lower than the largest goal loss ratio (0.5 % for the PDR), so that the PDR's conditional
        throughput cannot fall below the NDR's (5.6.2); 1 % cost ~0.6 s a case more for a
        precision the lab's run-to-run spread does not have.
    initial_trial_duration 0.5 s, the final one (RFC 9971 4.6.6's typical default): every trial of
        the default search is 0.5 s long, as RFC 9971 5.5 recommends for explainability. Shorter
        trials only pay where a short high-loss trial decides a load (exceed ratio 0, the RFC 2544
        preset: 1 s trials find where the 60 s ones go).

Each goal has a code, a short label for result lines, CSV columns and Pushgateway labels:

    NDR        loss 0, and the default exceed ratio, final duration and duration sum
    PDR0.5     loss 0.5 % (the number is the percentage), same defaults
    RFC2544    loss 0, exceed 0, final 60 s, duration sum 60 s: RFC 2544 throughput (RFC 9971 4.10.2)
    otherwise  RFC 9971 appendix C's dense code: <final>f<sum>d<loss %>l<exceed %>e, e.g. 60f120d0l50e
               for the TST009 goal

The code names what the number means (how loss is judged and over how long), not how precisely or
how quickly it was found: width and initial trial duration are left out of it, and every result
record carries the whole goal beside its code. One search takes each code once.

A short name hides what it stands for: "NDR" alone reads as RFC 2544's 60 s throughput, while the
default NDR is 0.5 s trials summed to 1 s with one in two allowed to lose. So every place a result
is named (result lines, CSV columns, the report, Pushgateway labels) carries the dense code beside
the short name: `label` is 'NDR [0.5f1d0l50e]', `rfc_code` the dense code alone (for every goal,
the named ones too), and dense_code() computes it from a result record's goal attributes (results
written before the code was stored).

Precision. The search claims that a goal's value lies within the goal width of its bounds, so a
Lower Bound must have been offered (nearly) the load it is reported at: a measurer may forgive a
generator's shortfall (count what it sent, not what it was asked to send) only up to
shortfall_allowance(goals), half the narrowest goal width; the controller counts any larger one as
loss (docs/mlrsearch.md, "Generator shortfall").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping

from gtplab.errors import UserError
from gtplab.goalcode import dense as _dense, dense_code, label, pct as _pct  # noqa: F401  (dense_code, label: here too)

DEFAULT_LOSS_RATIO = 0.0
DEFAULT_EXCEED_RATIO = 0.5
DEFAULT_FINAL_TRIAL_DURATION = 0.5
DEFAULT_DURATION_SUM = 1.0
DEFAULT_WIDTH = 0.02
DEFAULT_INITIAL_TRIAL_DURATION = 0.5
PDR_LOSS_RATIO = 0.005        # the PDR of FD.io CSIT and of issue 26: 0.5 %
# the generator shortfall a measurer may forgive with the default goals (shortfall_allowance): half
# their width, 1 %, what the lab's generator keeps to when it can reach the load (runner.py)
DEFAULT_SHORTFALL = DEFAULT_WIDTH / 2


class GoalError(UserError, ValueError):
    """A search goal (or a set of goals) that RFC 9971 does not allow, or that one search cannot take."""


@dataclass(frozen=True)
class SearchGoal:
    """One Search Goal (RFC 9971 section 4.6.7). Ratios are fractions (0.005 is 0.5 %), durations
    seconds, width relative to the upper bound. Checked when built: GoalError on a bad value."""

    loss_ratio: float = DEFAULT_LOSS_RATIO
    exceed_ratio: float = DEFAULT_EXCEED_RATIO
    final_trial_duration: float = DEFAULT_FINAL_TRIAL_DURATION
    duration_sum: float = DEFAULT_DURATION_SUM
    width: float = DEFAULT_WIDTH
    initial_trial_duration: float = DEFAULT_INITIAL_TRIAL_DURATION

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise GoalError(f"search goal: {f.name} must be a finite number, got {v!r}")
            object.__setattr__(self, f.name, float(v))
        # the MUSTs of RFC 9971 section 4.6
        if not 0.0 <= self.loss_ratio < 1.0:
            raise GoalError(f"search goal: loss_ratio must be >= 0 and < 1 (4.6.3), got {self.loss_ratio!r}")
        if not 0.0 <= self.exceed_ratio < 1.0:
            raise GoalError(f"search goal: exceed_ratio must be >= 0 and < 1 (4.6.4), got {self.exceed_ratio!r}")
        for name in ("final_trial_duration", "duration_sum", "initial_trial_duration"):
            if getattr(self, name) <= 0:
                raise GoalError(f"search goal: {name} must be positive seconds, got {getattr(self, name)!r}")
        # a relative width of 1 or more would let the lower bound be 0 or below
        if not 0.0 < self.width < 1.0:
            raise GoalError(f"search goal: width is relative to the upper bound and must be > 0 and < 1, "
                            f"got {self.width!r}")
        if self.initial_trial_duration > self.final_trial_duration:
            raise GoalError(f"search goal: initial_trial_duration ({self.initial_trial_duration:g} s) is longer "
                            f"than final_trial_duration ({self.final_trial_duration:g} s)")

    @property
    def rfc_code(self) -> str:
        """RFC 9971 appendix C's dense code of the four required attributes: '1f2d0.5l50e'."""
        return _dense(self.final_trial_duration, self.duration_sum, self.loss_ratio, self.exceed_ratio)

    @property
    def label(self) -> str:
        """The code with the dense code beside it, how results name the goal: 'NDR [0.5f1d0l50e]'."""
        return label(self.code, self.rfc_code)

    @property
    def code(self) -> str:
        """The label of the goal's results (module docstring): NDR, PDR0.5, RFC2544 or the dense code."""
        if (self.loss_ratio, self.exceed_ratio, self.final_trial_duration, self.duration_sum) == (0, 0, 60, 60):
            return "RFC2544"
        if (self.exceed_ratio, self.final_trial_duration, self.duration_sum) == (
                DEFAULT_EXCEED_RATIO, DEFAULT_FINAL_TRIAL_DURATION, DEFAULT_DURATION_SUM):
            return "NDR" if self.loss_ratio == 0 else f"PDR{_pct(self.loss_ratio)}"
        return self.rfc_code

    def as_dict(self) -> dict[str, Any]:
        """Every attribute (RFC 9971 4.9.3: the report states all goal attributes), the code and the
        dense code."""
        return {"code": self.code, "rfc_code": self.rfc_code, **asdict(self)}

    def __str__(self) -> str:
        return (f"{self.label} (loss {_pct(self.loss_ratio)} %, exceed {_pct(self.exceed_ratio)} %, "
                f"final {self.final_trial_duration:g} s, sum {self.duration_sum:g} s, "
                f"width {_pct(self.width)} %, initial {self.initial_trial_duration:g} s)")


# ------------------------------------------------------------------------------------------ presets

def ndr(**attrs: float) -> SearchGoal:
    """Non-drop rate: zero loss, the module defaults otherwise (code NDR)."""
    return SearchGoal(**{"loss_ratio": 0.0, **attrs})


def pdr(loss_ratio: float = PDR_LOSS_RATIO, **attrs: float) -> SearchGoal:
    """Partial drop rate: loss up to loss_ratio (default 0.5 %), module defaults otherwise (PDR0.5)."""
    return SearchGoal(loss_ratio=loss_ratio, **attrs)


def rfc2544(**attrs: float) -> SearchGoal:
    """RFC 2544 throughput, strict (RFC 9971 section 4.10.2): 60 s final trials, no loss, none of
    them may exceed, one 60 s trial decides a load. Shorter trials (from 1 s) only find where to run
    the 60 s ones, as RFC 2544 section 24 allows; a short trial that loses makes its load an Upper
    Bound at once (exceed ratio 0). Width and initial trial duration can be overridden."""
    return SearchGoal(**{"loss_ratio": 0.0, "exceed_ratio": 0.0, "final_trial_duration": 60.0,
                         "duration_sum": 60.0, "initial_trial_duration": 1.0, **attrs})


PRESETS = {"ndr": ndr, "pdr": pdr, "rfc2544": rfc2544}
DEFAULT_GOALS: tuple[SearchGoal, ...] = (ndr(), pdr())

_KEYS = tuple(f.name for f in fields(SearchGoal))


def goal_from_spec(spec: str | Mapping[str, Any] | SearchGoal) -> SearchGoal:
    """A goal from a sweep spec entry: a preset name ('ndr', 'pdr', 'rfc2544'), or a mapping with an
    optional 'preset' and any SearchGoal attribute overriding it ({'preset': 'pdr', 'loss_ratio':
    0.001}), and optionally its 'rfc_code' (as as_dict() gives it back), which must match the
    attributes. Unknown names and keys are a GoalError."""
    if isinstance(spec, SearchGoal):
        return spec
    if isinstance(spec, str):
        spec = {"preset": spec}
    if not isinstance(spec, Mapping):
        raise GoalError(f"search goal: a preset name or a mapping, got {spec!r}")
    attrs = dict(spec)
    preset = attrs.pop("preset", None)
    rfc_code = attrs.pop("rfc_code", None)
    unknown = sorted(set(attrs) - set(_KEYS))
    if unknown:
        raise GoalError(f"search goal: unknown key(s) {', '.join(map(str, unknown))} "
                        f"(known: preset, rfc_code, {', '.join(_KEYS)})")
    if preset is not None and preset not in PRESETS:
        raise GoalError(f"search goal: unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    goal = SearchGoal(**attrs) if preset is None else PRESETS[preset](**attrs)
    if rfc_code is not None and rfc_code != goal.rfc_code:
        raise GoalError(f"search goal: rfc_code {rfc_code!r} does not match the goal's attributes "
                        f"({goal.rfc_code}: {goal})")
    return goal


def check_goals(goals) -> tuple[SearchGoal, ...]:
    """The goals of one search as a tuple: at least one, all SearchGoals, each code once (a code is
    the key of its result)."""
    goals = tuple(goals)
    if not goals:
        raise GoalError("a search needs at least one goal")
    for g in goals:
        if not isinstance(g, SearchGoal):
            raise GoalError(f"not a SearchGoal: {g!r}")
    seen: dict[str, SearchGoal] = {}
    for g in goals:
        if g.code in seen:
            raise GoalError(f"two goals with the code {g.code} in one search ({seen[g.code]} and {g}); "
                            f"goals that differ only in width or initial trial duration cannot share a search")
        seen[g.code] = g
    return goals


def shortfall_allowance(goals) -> float:
    """The largest generator shortfall (share of Trial Load x Trial Duration not sent) a trial's loss
    ratio may leave out for these goals: half the narrowest goal width. A Lower Bound L was then
    offered at least (1 - width / 2) x L, so the value a search reports is within half its width of
    a load the DUT was shown to carry without exceeding the goal (docs/mlrsearch.md)."""
    return min(g.width for g in check_goals(goals)) / 2.0


def scaled(goal: SearchGoal, **attrs: float) -> SearchGoal:
    """The goal with some attributes replaced (the controller's coarser phase targets)."""
    return replace(goal, **attrs)
