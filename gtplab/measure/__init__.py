"""Measuring a DUT: plan.py turns a sweep spec into cases (CaseParams), runner.py runs trials (rates,
loss, DUT counters) on a backend, search.py is the NDR/PDR search over trials, conservation.py checks
that every packet is accounted for, sweep.py is `gtplab sweep` (runs the planned cases and writes
them to a results directory).
"""
