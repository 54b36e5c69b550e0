"""TRex: client.py (TrexClient, in this process) drives worker.py (TRex's client library, in a process
of its own). No imports here: worker.py runs as `python -m gtplab.traffic.trex.worker`.
"""
