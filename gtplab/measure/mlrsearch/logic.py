"""The normative part of RFC 9971: trials, Load Classification, relevant bounds, conditional throughput.

Everything here is a pure function of trial results and a SearchGoal; the controller
(controller.py) only chooses which trials to run. Two implementations that classify the same trials
the same way give comparable results whatever loads they chose (RFC 9971 section 5.5), so this file
follows the RFC's text and appendices A and B literally:

    classify(trials, goal)            Load Classification (section 6.1, appendix A): Lower Bound,
                                      Upper Bound or Undecided, from the trial-seconds at one load
    conditional_throughput(...)       appendix B: the forwarding rate at the exceed-ratio quantile
                                      of the full-length trials at a load
    relevant_bounds(by_load, goal)    sections 4.8.1, 4.8.2: the smallest Upper Bound and the largest
                                      Lower Bound below it (loss inversion: the upper bound wins)

Only comparisons of durations are guarded against float rounding (sums of trial durations such as
0.1 s are not exact): `a <= b` is taken as a <= b + 1e-9 * max(1, |b|). Loss ratios are compared
exactly. Nothing else deviates from the RFC.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from gtplab.measure.mlrsearch.goal import DEFAULT_SHORTFALL, SearchGoal

EPS = 1e-9


def _le(a: float, b: float) -> bool:
    return a <= b + EPS * max(1.0, abs(b))


@dataclass(frozen=True)
class TrialInput:
    """Trial Input (RFC 9971 4.5.3): what the controller asks the measurer for. Nothing else may be
    added to it (4.5.3: no optional attributes)."""
    load: float              # Trial Load (4.5.2): intended load per interface, e.g. frames/s
    duration: float          # Trial Duration (4.5.1): intended seconds of traffic


@dataclass(frozen=True)
class TrialOutput:
    """Trial Output (RFC 9971 4.5.9): what the measurer returns for one trial.

    loss_ratio          Trial Loss Ratio (4.5.6), 0..1
    effective_duration  Trial Effective Duration (4.5.8), seconds; None: the trial duration
    forwarding_rate     Trial Forwarding Rate (4.5.7); None: load x (1 - loss_ratio). Informative:
                        the RFC computes conditional throughput from the load and the loss ratio
    offered_load        what the generator achieved (informative: RFC 2285 3.5.2; not used here)
    shortfall           the share of the intended frames (Trial Load x Trial Duration) the generator
                        did not send and loss_ratio leaves out (from_counts: a shortfall it forgave).
                        The controller counts a shortfall above goal.shortfall_allowance (half the
                        narrowest goal width) as loss: with_shortfall_counted()
    disturbed           the measurer saw the host disturb the trial (issue 26 item 2: CPU time taken
                        from the DUT or generator, steal, run-queue wait beyond a threshold). The
                        controller keeps the trial and reports it, and by default does not classify
                        with it: the load is measured again (controller.DISTURBED_POLICIES)
    info                anything the measurer wants back in the result (its own trial record);
                        ignored by the search (4.5.9: unknown optional attributes are ignored)
    """
    loss_ratio: float
    effective_duration: float | None = None
    forwarding_rate: float | None = None
    offered_load: float | None = None
    disturbed: bool = False
    info: Any = field(default=None, compare=False)
    shortfall: float = 0.0

    def __post_init__(self) -> None:
        lr = self.loss_ratio
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0.0 <= lr <= 1.0:
            raise ValueError(f"trial output: loss_ratio must be within 0..1 (RFC 9971 4.5.5, 4.5.6), got {lr!r}")
        sf = self.shortfall
        if isinstance(sf, bool) or not isinstance(sf, (int, float)) or not 0.0 <= sf <= 1.0:
            raise ValueError(f"trial output: shortfall must be within 0..1, got {sf!r}")
        ed = self.effective_duration
        if ed is not None and (isinstance(ed, bool) or not isinstance(ed, (int, float)) or not ed > 0):
            raise ValueError(f"trial output: effective_duration must be positive seconds, got {ed!r}")

    @classmethod
    def from_counts(cls, sent: int, received: int, *, intended: float | None = None,
                    shortfall: float = DEFAULT_SHORTFALL, **kw: Any) -> "TrialOutput":
        """A trial output from packet counts: loss = (expected - received) / expected.

        expected is what the generator sent; but when the generator sent less than (1 - shortfall) of
        the `intended` count (Trial Load x Trial Duration), the intended count is expected instead, so
        a generator that cannot keep up shows as loss, as RFC 9971 4.9.1 recommends ("turn any severe
        deviation between the Intended Load and the Offered Load into the increased Trial Loss
        Ratio"). A smaller shortfall is forgiven and said in the output's `shortfall`. `shortfall`
        should be goal.shortfall_allowance(goals) (the default: that of the default goals, 1 %); the
        controller counts any larger forgiven shortfall as loss anyway. Received beyond expected
        (duplicates) counts as no loss."""
        if sent < 0 or received < 0:
            raise ValueError(f"trial output: negative packet counts (sent {sent}, received {received})")
        expected = float(sent)
        forgiven = 0.0
        if intended is not None and intended > 0:
            if sent < (1.0 - shortfall) * intended:
                expected = float(intended)
            else:
                forgiven = max(0.0, 1.0 - sent / intended)
        if expected <= 0:
            raise ValueError("trial output: no packets expected (a load that sends no frame in the trial "
                             "has no loss ratio: RFC 9971 4.6.8.2 asks for a min load that sends some)")
        loss = min(1.0, max(0.0, (expected - received) / expected))
        return cls(loss_ratio=loss, shortfall=forgiven, **kw)

    def with_shortfall_counted(self, allowance: float) -> "TrialOutput":
        """This output, its shortfall counted as loss when it is above `allowance`: the loss ratio of
        what was received against the intended count, 1 - (1 - loss) x (1 - shortfall) (RFC 9971
        4.5.5: the frames "expected to be forwarded" are by default those intended). A forwarding
        rate the measurer gave is the frames received either way and is kept."""
        if self.shortfall <= allowance * (1 + 1e-9):
            return self
        loss = min(1.0, 1.0 - (1.0 - self.loss_ratio) * (1.0 - self.shortfall))
        return replace(self, loss_ratio=loss, shortfall=0.0)


@dataclass(frozen=True)
class Trial:
    """Trial Result (RFC 9971 4.5.10): a Trial Input with its Trial Output, as the controller keeps it."""
    load: float
    duration: float
    loss_ratio: float
    effective_duration: float
    forwarding_rate: float
    disturbed: bool = False
    offered_load: float | None = None
    info: Any = field(default=None, compare=False, repr=False)
    shortfall: float = 0.0           # the generator shortfall the loss ratio leaves out (forgiven)

    @classmethod
    def of(cls, ti: TrialInput, out: TrialOutput) -> "Trial":
        return cls(load=ti.load, duration=ti.duration, loss_ratio=float(out.loss_ratio),
                   effective_duration=float(out.effective_duration or ti.duration),
                   forwarding_rate=(float(out.forwarding_rate) if out.forwarding_rate is not None
                                    else ti.load * (1.0 - out.loss_ratio)),
                   disturbed=bool(out.disturbed), offered_load=out.offered_load, info=out.info,
                   shortfall=float(out.shortfall))

    def high_loss(self, goal: SearchGoal) -> bool:
        """High-Loss Trial (4.7.1.1): loss above the goal loss ratio (exactly: a ratio of packet
        counts, where a single packet lost in a zero-loss goal's trial must count)."""
        return self.loss_ratio > goal.loss_ratio

    def full_length(self, goal: SearchGoal) -> bool:
        """Full-Length Trial (4.7.1.4): not shorter than the goal final trial duration."""
        return _le(goal.final_trial_duration, self.duration)

    def as_dict(self) -> dict[str, Any]:
        return {"load": self.load, "duration": self.duration, "loss_ratio": self.loss_ratio,
                "effective_duration": self.effective_duration, "forwarding_rate": self.forwarding_rate,
                "offered_load": self.offered_load, "disturbed": self.disturbed, "shortfall": self.shortfall}


class Bound(enum.Enum):
    """Load Classification (RFC 9971 4.7.2)."""
    LOWER = "lower bound"
    UPPER = "upper bound"
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class LoadStats:
    """Every value of RFC 9971 section 6.1's Load Classification Logic, for one load and one goal
    (the rows of the tables in appendix C.3)."""
    full_high: float           # full-length high-loss sum
    full_low: float            # full-length low-loss sum
    short_high: float          # short high-loss sum
    short_low: float           # short low-loss sum
    balancing: float           # short low-loss sum x exceed coefficient
    excess: float              # short high-loss sum - balancing sum
    effective_high: float      # full-length high-loss sum + max(0, excess)
    effective_full: float      # effective high-loss sum + full-length low-loss sum
    effective_whole: float     # max(effective full sum, goal duration sum)
    missing: float             # effective whole sum - effective full sum
    pessimistic_high: float    # effective high-loss sum + missing sum
    optimistic_exceed_ratio: float
    pessimistic_exceed_ratio: float
    bound: Bound

    @property
    def positive_excess(self) -> float:
        return max(0.0, self.excess)


def load_stats(trials: Iterable[Trial], goal: SearchGoal) -> LoadStats:
    """Section 6.1 step by step, over the trials measured at one load (all of them: the caller
    leaves out what it does not count, e.g. disturbed trials)."""
    fh = fl = sh = sl = 0.0
    for t in trials:
        if t.full_length(goal):
            if t.high_loss(goal):
                fh += t.effective_duration
            else:
                fl += t.effective_duration
        elif t.high_loss(goal):
            sh += t.effective_duration
        else:
            sl += t.effective_duration
    er = goal.exceed_ratio
    coefficient = er / (1.0 - er)               # exceed ratio / subceed ratio
    balancing = sl * coefficient
    excess = sh - balancing
    eff_high = fh + max(0.0, excess)
    eff_full = eff_high + fl
    eff_whole = max(eff_full, goal.duration_sum)
    missing = eff_whole - eff_full
    pess_high = eff_high + missing
    optimistic = eff_high / eff_whole
    pessimistic = pess_high / eff_whole
    # appendix A compares sums (x <= whole x exceed ratio) rather than ratios: the same, without
    # dividing; the guard is for float rounding only
    quantile = eff_whole * er
    if not _le(eff_high, quantile):
        bound = Bound.UPPER
    elif _le(pess_high, quantile):
        bound = Bound.LOWER
    else:
        bound = Bound.UNDECIDED
    return LoadStats(fh, fl, sh, sl, balancing, excess, eff_high, eff_full, eff_whole, missing,
                     pess_high, optimistic, pessimistic, bound)


def classify(trials: Iterable[Trial], goal: SearchGoal) -> Bound:
    """Load Classification (RFC 9971 appendix A) of the trials at one load for one goal. No trials:
    Undecided (4.7.2.3)."""
    return load_stats(trials, goal).bound


def conditional_throughput(trials: Iterable[Trial], goal: SearchGoal, load: float) -> float:
    """RFC 9971 appendix B: the Trial Forwarding Rate at the Goal Exceed Ratio's quantile of the
    full-length trials at `load`, sorted by loss ratio. Missing full-length seconds count as 100 %
    loss, so a load without enough full-length trials gets 0."""
    full = sorted((t for t in trials if t.full_length(goal)), key=lambda t: t.loss_ratio)
    full_s = sum(t.effective_duration for t in full)
    remaining = max(goal.duration_sum, full_s) * (1.0 - goal.exceed_ratio)
    quantile_loss: float | None = None
    for t in full:
        if quantile_loss is None or remaining > EPS:
            quantile_loss = t.loss_ratio
            remaining -= t.effective_duration
        else:
            break
    else:
        if remaining > EPS:
            quantile_loss = 1.0
    return load * (1.0 - quantile_loss)


def by_load(trials: Iterable[Trial]) -> dict[float, list[Trial]]:
    """Trials grouped by Trial Load (the controller reuses the exact float of a load it re-measures)."""
    out: dict[float, list[Trial]] = defaultdict(list)
    for t in trials:
        out[t.load].append(t)
    return dict(out)


@dataclass(frozen=True)
class Bounds:
    """The relevant bounds of one goal over a set of trials, and every load's classification."""
    lower: float | None          # Relevant Lower Bound (4.8.2); without an upper bound: the largest
                                 # Lower Bound (an irregular result's "effective" one, 4.8.4.2)
    upper: float | None          # Relevant Upper Bound (4.8.1): the smallest Upper Bound
    classes: Mapping[float, Bound]

    def width(self) -> float | None:
        """(upper - lower) / upper, the relative distance the Goal Width is compared with."""
        if self.lower is None or self.upper is None:
            return None
        return (self.upper - self.lower) / self.upper

    def inversions(self) -> list[tuple[float, float]]:
        """Loss inversion (5.3.2): (upper bound, larger lower bound) pairs."""
        up = [l for l, b in self.classes.items() if b is Bound.UPPER]
        lo = [l for l, b in self.classes.items() if b is Bound.LOWER]
        return sorted((u, l) for u in up for l in lo if l > u)


def relevant_bounds(trials_by_load: Mapping[float, Sequence[Trial]], goal: SearchGoal) -> Bounds:
    """The Relevant Upper Bound is the smallest load classified Upper Bound; the Relevant Lower Bound
    the largest Lower Bound smaller than it (RFC 9971 4.8.1, 4.8.2). A Lower Bound above a smaller
    Upper Bound (loss inversion) is taken for a fluke (5.3.3)."""
    classes = {load: classify(ts, goal) for load, ts in trials_by_load.items()}
    uppers = [load for load, b in classes.items() if b is Bound.UPPER]
    upper = min(uppers) if uppers else None
    lowers = [load for load, b in classes.items() if b is Bound.LOWER and (upper is None or load < upper)]
    return Bounds(max(lowers) if lowers else None, upper, classes)
