"""A minimal GTP-U peer (an SGW's path management) for tests/dataplane/test_gtpu_path.py, run inside the test's
peer namespace: bound to ADDR:2152, it answers Echo Requests with an Echo Response carrying a
Recovery IE (TS 29.281 7.2.2; over IPv6 when ADDR is an IPv6 address), can first send some messages to the gateway, and prints every other
message it receives as one JSON line {"src", "sport", "hex"} until --duration is over.

    python tests/lib/gtpu_peer.py --addr 10.99.0.2 --gw 10.99.0.1 --restart 42 --duration 3 \
        [--send HEX ...]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time


def echo_response(req: bytes, restart: int) -> bytes:
    seq = req[8:10] if req[0] & 0x07 and len(req) >= 12 else b"\0\0"
    return bytes([0x32, 2]) + struct.pack("!HI", 6, 0) + seq + b"\0\0" + bytes([14, restart])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", required=True, help="our address (bound with port 2152)")
    ap.add_argument("--gw", required=True, help="the gateway's GTP-U address (--send goes there)")
    ap.add_argument("--restart", type=int, default=0, help="Recovery IE value in our Echo Responses")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds to run")
    ap.add_argument("--send", action="append", default=[], help="hex of a GTP-U message to send first")
    a = ap.parse_args()
    s = socket.socket(socket.AF_INET6 if ":" in a.addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((a.addr, 2152))
    s.settimeout(0.05)
    print("ready", flush=True)
    for h in a.send:
        s.sendto(bytes.fromhex(h), (a.gw, 2152))
    end = time.monotonic() + a.duration
    while time.monotonic() < end:
        try:
            data, (src, sport, *_) = s.recvfrom(65535)     # IPv6: (addr, port, flowinfo, scope)
        except socket.timeout:
            continue
        if len(data) >= 8 and data[1] == 1:
            s.sendto(echo_response(data, a.restart), (src, sport))
            continue
        print(json.dumps({"src": src, "sport": sport, "hex": data.hex()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
