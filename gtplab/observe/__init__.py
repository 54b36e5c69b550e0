"""Watching a run while it happens: monitor.py is the local Prometheus + Grafana stack (`gtplab
monitor`), flamegraph.py records perf on the DUT's CPUs per case (`gtplab sweep --flamegraph`).
"""
