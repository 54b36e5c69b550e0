"""Any UPF's packet-level correctness from the captures (`gtplab conformance`, docs/conformance.md):
the cases as data (cases.py), the oracle that computes what should come out (oracle.py), the known
departures per UPF (departs.py), the judge (judge.py), the lab run (runner.py), the command (cli.py).
Above lab/, dut/, pfcp/, traffic/, measure/ and gtpu/; nothing but the CLI imports its cli.py."""
