"""tshark's own checksum validation of a capture: an independent check of every IPv4/UDP/TCP checksum
(tests/trex/test_trex.py, tests/trex/test_trex_lab.py).
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path


def tshark_checksums(pcap: Path) -> Counter:
    """tshark's own checksum validation of every IPv4/UDP/TCP header of every frame: Counter of
    (field, status) with status good/bad/none (not present, e.g. outer UDP checksum 0)."""
    cp = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
         "-o", "tcp.check_checksum:TRUE", "-T", "fields", "-E", "occurrence=a",
         "-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "tcp.checksum.status"],
        capture_output=True, text=True, timeout=60, check=True)
    names = {"0": "bad", "1": "good", "2": "unverified", "3": "none"}
    out = Counter()
    for line in cp.stdout.splitlines():
        for field, col in zip(("ip", "udp", "tcp"), line.split("\t")):
            for st in filter(None, col.split(",")):
                out[(field, names.get(st, st))] += 1
    return out
