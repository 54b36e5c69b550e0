"""The traffic generators, behind one client interface (backend.py chooses one): engine/ is the
embedded engine (TRex STL profiles run by BPF in the kernel), trex/ drives a real TRex server.

Keep this file free of imports: `python -m gtplab.traffic.trex.worker` and
`python -m gtplab.traffic.engine.stream_loader` run below it in processes that must not load Scapy 2.8.
"""
