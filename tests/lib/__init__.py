"""What the tests share, imported in one style, `from tests.lib.<module> import ...` (bench/ and
dataplane/fuzz/ put the repository's top on sys.path to do the same):

    oracle.py         an independent model of the PGW-U (expected output frames, the flow hash): on
                      purpose it shares no code with gtplab or the data plane
    pgwu.py           pgwu(): runs the PGW-U's own tool on a pin dir
    lab.py            what a namespace lab left behind; polling with a deadline; the harness on a Lab
                      (bearers, run_in, AF_PACKET frames, the DUT's counters, the reassembler's pid)
    streams.py        named test packets, TRex stream JSON, TRex's field semantics, a tiny profile
    tshark.py         tshark's checksum verdicts on a capture
    synthetic_results.py   results directories written by hand, with a known cost model
    pfcp_msgs.py      PFCP messages built with Scapy (the agent's tests, the fuzz corpus, bench/)
    pfcp_smf_msgs.py  PFCP sessions shaped as SMFs send them (3 QERs, 2 URRs, SDF Filters, a dropping
                      downlink FAR, Update FAR + Update URR), on top of pfcp_msgs.py
    fake_upf.py       a PFCP user plane in Python, for the control plane's tests and bench/
    gtpu_peer.py      a GTP-U peer on a UDP socket (a script, run in a namespace)
    monitor_stack.py  a local Prometheus stack and Pushgateway, for the monitor and dashboard tests
    trex_server.py    a real TRex server in a namespace of its own (the `trex_server` fixture)
    pfcp_agent.py     `pgwu pfcp` on a pin dir and the helpers that read its answers (tests/pfcp/conftest.py's
                      fixtures run it)
    pfcp_smf.py       the harness of test_pfcp_agent_smf.py and test_pfcp_peers.py: CPs at any loopback address,
                      the agent, the readers of its answers, tables and metrics (tests/pfcp/conftest.py's `lab`)
    pgwu_config.py    the PGW-U's config for BPF_PROG_TEST_RUN (static next hops that never send)
    cpus.py           the suite lock that gives a `timing` test the machine's CPUs (tests/conftest.py)
    pairs_lab.py      two TRex servers (one port pair each, a namespace each) into one PGW-U attached to both
                      pairs: tests/trex/test_pairs.py's lab for gtplab.measure.pairs
    correctness.py    the correctness checks through a live lab, as plain functions on (lab, client, dut):
                      test_suite_correctness.py runs them with the engine sending, test_trex_lab.py with TRex

REPO is the repository's top. UNDECIDED begins the reason of a skip that says the test could not decide
its property on this host (the figures follow); tests/conftest.py counts them at the end of a run.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNDECIDED = "undecided:"
