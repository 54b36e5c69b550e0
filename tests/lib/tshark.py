"""tshark as an independent reader: its checksum validation of a capture, every IPv4/UDP/TCP checksum
(tests/trex/test_trex.py, tests/trex/test_trex_lab.py), and its PFCP dissector's verdict on the
messages gtplab builds (tests/pfcp/test_pfcp_rules.py, test_pfcp_rules_v6.py).
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


PFCP_BAD = ("Malformed", "Expert Info", "not dissected", "Reserved (", "Unknown (")


def pfcp_decoded_cleanly(pcap: Path, names: list[str]) -> list[str]:
    """tshark's verbose decode of a pcap of PFCP messages, one text per frame (in the order of names,
    which name the frames in failures), asserting that none is malformed, none has an expert
    error or warning, and none shows a reserved or unknown value."""
    verbose = subprocess.run(["tshark", "-r", str(pcap), "-V", "-Y", "pfcp"], capture_output=True, text=True,
                             check=True, timeout=120).stdout
    frames = verbose.split("\nFrame ")
    assert len(frames) == len(names)
    for n, text in zip(names, frames):
        for bad in PFCP_BAD:
            assert bad not in text, f"{n}: tshark says {bad!r}:\n" + text[max(0, text.find(bad) - 1500):
                                                                          text.find(bad) + 200]
    return frames
