#!/usr/bin/env python3
"""Background frames on the multihost lab's data links, from both ends (issue 34, item 3): run by
`gtplab sweep --on-trial-start` in the middle of each trial (tools/multihost/lab.py).

    python tools/multihost/background.py SPEC.json

SPEC: {"ssh": {host: [ssh argv ...]}, "links": [{"host": "dut"|"trex", "ifname", "src_mac",
"dst_mac", "src_ip", "dst_ip"}, ...]}. On each host, one python3 (the hosts have no Scapy) writes,
through a packet socket on each of its data interfaces, the frames of FRAMES built here: an ARP
request, an IPv6 router and a neighbour solicitation, an LLDPDU, a UDP datagram to the discard port
(tests/measure/test_background.py's, the kinds the generator counts them as). Prints what it sent,
{host: {ifname: {kind: frames}}}, as one JSON line.
"""

from __future__ import annotations

import json
import shlex
import struct
import subprocess
import sys

from scapy.all import ARP, IP, UDP, Ether, IPv6, Raw, raw
from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6ND_RS

SENDER = r"""
import base64, json, socket, sys
out = {}
for ifname, frames in json.load(sys.stdin).items():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((ifname, 0))
    for kind, fs in frames.items():
        for f in fs:
            s.send(base64.b64decode(f))
        out.setdefault(ifname, {})[kind] = len(fs)
    s.close()
print(json.dumps(out))
"""


def lldp(src: str) -> bytes:
    def tlv(t, v):
        return struct.pack("!H", t << 9 | len(v)) + v
    body = (tlv(1, b"\x04" + bytes.fromhex(src.replace(":", ""))) + tlv(2, b"\x05mh34")
            + tlv(3, struct.pack("!H", 120)) + tlv(0, b""))
    return raw(Ether(dst="01:80:c2:00:00:0e", src=src, type=0x88CC) / Raw(body))


def frames(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str) -> dict[str, list[bytes]]:
    return {
        "arp": [raw(Ether(dst="ff:ff:ff:ff:ff:ff", src=src_mac) / ARP(op=1, hwsrc=src_mac, psrc=src_ip, pdst=dst_ip))],
        "nd": [raw(Ether(dst="33:33:00:00:00:02", src=src_mac) / IPv6(src="fe80::a834", dst="ff02::2")
                   / ICMPv6ND_RS()),
               raw(Ether(dst="33:33:ff:00:00:99", src=src_mac) / IPv6(src="fe80::a834", dst="ff02::1:ff00:99")
                   / ICMPv6ND_NS(tgt="fe80::99"))],
        "lldp": [lldp(src_mac)],
        "udp": [raw(Ether(dst=dst_mac, src=src_mac) / IP(src=src_ip, dst=dst_ip) / UDP(sport=40000, dport=9)
                    / Raw(b"mh34 stray datagram"))],
    }


def main() -> int:
    import base64
    spec = json.loads(open(sys.argv[1]).read())
    per_host: dict[str, dict] = {}
    for ln in spec["links"]:
        f = frames(ln["src_mac"], ln["dst_mac"], ln["src_ip"], ln["dst_ip"])
        per_host.setdefault(ln["host"], {})[ln["ifname"]] = {
            k: [base64.b64encode(x).decode() for x in v] for k, v in f.items()}
    procs = {h: subprocess.Popen(spec["ssh"][h] + ["python3 -c " + shlex.quote(SENDER)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for h in per_host}
    sent, rc = {}, 0
    for h, p in procs.items():
        out, err = p.communicate(json.dumps(per_host[h]), timeout=20)
        if p.returncode:
            print(f"background on {h}: exit {p.returncode}: {err.strip()[-300:]}", file=sys.stderr)
            rc = 1
        else:
            sent[h] = json.loads(out)
    print(json.dumps(sent), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
