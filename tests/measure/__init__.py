"""Measuring: the runner and its DUT probes, the NDR search, sweeps, results directories and reports."""
