"""The device under test's side of the lab that is not the PGW-U itself: the reference forwarder
(`dut.mode: fwd`, fwd.bpf.c + fwd.py), built by this folder's Makefile."""
