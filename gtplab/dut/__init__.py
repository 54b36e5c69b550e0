"""The device under test, behind one interface the measurement uses (gtplab.measure.runner.Runner):
probe.py's DutProbe (kind, close, counters, layout, link, link_delta, prog_stats, cpu_seconds,
rx_path, bpf_stats, install_bearers), which every probe here has.

- probe.py     DutProbe, the interface as a typing.Protocol, and make_dut(), which picks the probe for
  a lab config
- local.py     LocalDut: the embedded lab's PGW-U (XDP or the socket path) or reference forwarder
  (pinned maps, veth counters, the DUT namespace's receive path)
- sock.py      the socket-path PGW-U (`pgwu socket`): its knobs (SocketKnobs) and its counters (SockStats)
- metrics.py   MetricsDut: a PGW-U on another host (its `pgwu metrics` and node-exporter URLs)
- prometheus.py PrometheusDut / NoCountersDut: any UPF's counters through a metric mapping, or none
  (lab config `dut.counters: prometheus | none`); ScrapedDut: what these and MetricsDut cannot measure
- pfcp.py      PfcpDut: bearers provisioned over PFCP (`dut.provision: pfcp`, gtplab.pfcp), around one
  of the above for the counters
- dataplane.py the Python view of the PGW-U's pinned maps and programs (dataplane/pgwu.bpf.c)
- fwd.bpf.c, fwd.h, fwd.py: the reference forwarder (`dut.mode: fwd`), built by this folder's Makefile
"""

# the XDP program that handles each direction, by its name in dataplane/pgwu.bpf.c (the reference
# forwarder's one program is reported under both)
PROG = {"uplink": "xdp_access", "downlink": "xdp_sgi"}
