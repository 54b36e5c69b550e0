"""MLRsearch (RFC 9971, Multiple Loss Ratio Search) as a pure module: goals are data, the controller
takes trial results in and gives the next trial out, with no I/O (docs/mlrsearch.md).

    from gtplab.measure import mlrsearch as mlr
    result = mlr.search(measure, mlr.DEFAULT_GOALS, min_load=10e3, max_load=2e6)
    for r in result.goals:            # NDR, PDR0.5
        print(r.code, r.lower, r.conditional_throughput, r.irregular)

goal.py        SearchGoal, its code and dense code, the presets (ndr, pdr, rfc2544), the defaults,
               the generator shortfall a trial may leave out (shortfall_allowance)
logic.py       what RFC 9971 prescribes: trials, Load Classification, relevant bounds, conditional
               throughput
controller.py  what it leaves to the implementation: phases, load selection, budget, disturbed
               trials; Controller and the synchronous driver search()
"""

from gtplab.measure.mlrsearch.goal import (DEFAULT_DURATION_SUM, DEFAULT_EXCEED_RATIO,
                                           DEFAULT_FINAL_TRIAL_DURATION, DEFAULT_GOALS,
                                           DEFAULT_INITIAL_TRIAL_DURATION, DEFAULT_LOSS_RATIO, DEFAULT_SHORTFALL,
                                           DEFAULT_WIDTH, PDR_LOSS_RATIO, PRESETS, GoalError, SearchGoal,
                                           check_goals, dense_code, goal_from_spec, label, ndr, pdr, rfc2544,
                                           shortfall_allowance)
from gtplab.measure.mlrsearch.logic import (Bound, Bounds, LoadStats, Trial, TrialInput, TrialOutput, by_load,
                                            classify, conditional_throughput, load_stats, relevant_bounds)
from gtplab.measure.mlrsearch.controller import (DEFAULT_TIME_BUDGET, DEFAULT_TRIAL_OVERHEAD,
                                                 DISTURBED_POLICIES, IRREGULAR_BUDGET, IRREGULAR_MAX_LOAD,
                                                 IRREGULAR_MIN_LOAD, OVERLOAD_LOSS, Controller, GoalResult, SearchResult,
                                                 default_time_budget, phases, search)

__all__ = [
    "DEFAULT_DURATION_SUM", "DEFAULT_EXCEED_RATIO", "DEFAULT_FINAL_TRIAL_DURATION", "DEFAULT_GOALS",
    "DEFAULT_INITIAL_TRIAL_DURATION", "DEFAULT_LOSS_RATIO", "DEFAULT_SHORTFALL", "DEFAULT_WIDTH", "PDR_LOSS_RATIO",
    "PRESETS", "GoalError", "SearchGoal", "check_goals", "dense_code", "goal_from_spec", "label", "ndr", "pdr",
    "rfc2544", "shortfall_allowance",
    "Bound", "Bounds", "LoadStats", "Trial", "TrialInput", "TrialOutput", "by_load", "classify",
    "conditional_throughput", "load_stats", "relevant_bounds",
    "DEFAULT_TIME_BUDGET", "DEFAULT_TRIAL_OVERHEAD", "DISTURBED_POLICIES", "IRREGULAR_BUDGET",
    "IRREGULAR_MAX_LOAD", "IRREGULAR_MIN_LOAD", "OVERLOAD_LOSS", "Controller", "GoalResult", "SearchResult",
    "default_time_budget", "phases", "search",
]
