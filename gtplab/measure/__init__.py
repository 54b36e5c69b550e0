"""Measuring a DUT: plan.py turns a sweep spec into cases, ndr.py runs trials (rates, loss, DUT
counters) and the NDR/PDR search, conservation.py checks that every packet is accounted for,
sweep.py is `gtplab sweep` (runs the planned cases and writes them to a results directory).
"""
