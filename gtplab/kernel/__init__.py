"""What gtplab needs from the Linux kernel, with no policy: bpf(2) through ctypes (bpf.py: pinned maps
and programs, BPF_PROG_TEST_RUN), libbpf through ctypes (libbpf.py: load a BPF object, attach XDP),
network namespaces for one thread (netns.py), kernel threads and their CPU time from /proc (threads.py).
Used by the lab, the DUT probes and the traffic engine.
"""
