"""The one packet model of GTP-U for gtplab's Python side: packets.py builds packets with Scapy
(tests, bench), walk.py finds the headers in raw frame bytes (the engine's checksums), bearers.py
writes the PGW-U's bearer files for a TRex profile's tunables (`gtplab bearers`).

No imports here: the traffic engine imports walk.py in processes that must not load Scapy.
(trex_profiles/gtpu_common.py is separate on purpose: it runs inside TRex, which cannot import gtplab.)
"""
