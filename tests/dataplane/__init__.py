"""The PGW-U: its XDP programs run in place (BPF_PROG_TEST_RUN), `pgwu`, and its path through a lab."""
