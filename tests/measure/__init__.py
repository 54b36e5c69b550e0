"""Measuring: the runner and its DUT probes, the search (MLRsearch), sweeps, results directories and reports."""
