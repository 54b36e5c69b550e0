"""PFCP: the PGW-U's agent (`pgwu pfcp`), its decoder's fuzzer, and gtplab as a control plane."""
