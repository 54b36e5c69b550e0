"""gtplab's tests, one folder per component (docs/testing.md): dataplane/ (the PGW-U: its BPF programs,
its tool, its path through a lab), engine/ (the embedded traffic engine and the backend), pfcp/ (the
PGW-U's PFCP agent and gtplab's control plane), measure/ (trials, the NDR search, sweeps, results,
reports), lab/ (the namespace lab), trex/ (TRex and its profiles), ops/ (ansible, dashboards,
monitoring, the soak); lib/ holds what they share; test_architecture.py checks the package's layers."""
