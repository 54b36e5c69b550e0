#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""How many PFCP session establishments (and deletions) per second `pgwu pfcp` serves. Prints ONE table.

    sudo .venv/bin/python bench/pfcp_agent_bench.py [--sessions 20000] [--windows 1,8,32,128] [--markdown]
        [--pgwu PATH] [--json]

A PGW-U is loaded in a unique pin dir (removed afterwards), the agent runs on 127.0.0.1 pinned to
--agent-cpu, the client on --client-cpu. The client keeps a window of N requests in flight: it sends
until N are outstanding, then one more for each answer. Requests are pre-built byte templates
(tests/lib/pfcp_msgs.py, built once by Scapy) in which only the sequence number, the CP SEID and the UE
address are patched with struct.pack_into, so the client costs a few microseconds a message; every
answer's Cause is checked (a reject fails the run). Each row: --sessions establishments (each a
bearer with a CHOOSE F-TEID), then their deletions, the tables empty afterwards.

Each row also runs the same number of Heartbeat Requests with the same window: the same sockets,
the same decode/encode path, no table work: the reference for what this box's scheduling and
loopback allow the pair (the machine is shared; ratios to it mean more than absolute rates).

Columns: "/s" = messages / wall time; "x hb" = that rate / the heartbeat rate of the same row;
"agent us" and "client us" = CPU microseconds each process spent per message (/proc/PID/schedstat
over the phase), so 1e6 / "agent us" is what the agent would serve on a CPU of
its own. The client is not the limit when its us/message is below the agent's and both are far
below the wall time per message (the rest is waiting to be scheduled). Speed targets live here
and in docs/pfcp.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.lib import pfcp_msgs as M  # noqa: E402
from tests.lib import pfcp_smf_msgs as S  # noqa: E402
from gtplab.dut.dataplane import pgwu_binary  # noqa: E402

PGWU = str(pgwu_binary())


def cpu_of(pid: int) -> float:
    """CPU seconds the process has run, in nanoseconds' resolution (schedstat, not clock ticks)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9


def self_cpu() -> float:
    return cpu_of(os.getpid())


def marker_offset(b: bytes, value: bytes) -> int:
    i = b.find(value)
    assert i >= 0 and b.find(value, i + 1) < 0, f"marker {value.hex()} not unique"
    return i


class Templates:
    """Establishment / deletion requests as bytes, with the offsets of the fields patched per message.
    shape "bearer": tests/lib/pfcp_msgs.py's one-bearer session; "smf": tests/lib/pfcp_smf_msgs.py's (3 QERs,
    2 URRs, SDF Filters, the downlink FAR dropping with a placeholder outer header)."""

    def __init__(self, shape: str = "bearer"):
        ue_marker, seid_marker = "10.45.171.205", 0x5EED5EED5EED5EED
        build = M.establish if shape == "bearer" else S.establish
        est = bytearray(bytes(build(1, seid_marker, ue_marker)))
        ue_b = socket.inet_aton(ue_marker)
        self.ue_offs = [m.start() for m in re.finditer(re.escape(ue_b), bytes(est))]
        assert len(self.ue_offs) == 2, "the UE address is in the uplink and the downlink PDR"
        self.seid_off = marker_offset(bytes(est), struct.pack("!Q", seid_marker))
        self.est = est
        self.dele = bytearray(bytes(M.delete(1, 0)))

    def establishment(self, seq: int, i: int) -> bytes:
        b = self.est
        struct.pack_into("!I", b, 12, seq << 8)
        struct.pack_into("!Q", b, self.seid_off, 0x1000 + i)
        ue = struct.pack("!I", (10 << 24 | 64 << 16) + 1 + i)
        for o in self.ue_offs:
            b[o:o + 4] = ue
        return bytes(b)

    def deletion(self, seq: int, up_seid: int) -> bytes:
        b = self.dele
        struct.pack_into("!Q", b, 4, up_seid)
        struct.pack_into("!I", b, 12, seq << 8)
        return bytes(b)


# Establishment Response layout of this agent: header 16, Node ID (IPv4) 9, Cause IE 5, F-SEID ...
CAUSE_OFF = 16 + 9 + 4
FSEID_SEID_OFF = 16 + 9 + 5 + 5


def run_window(sock, addr, tpl: Templates, n: int, window: int, agent_pid: int, seq0: int,
               phases=("heartbeat", "establish", "delete"), seids: list[int] | None = None):
    """Heartbeats, then n establishments, then their deletions, window in flight:
    {phase: (messages/s, agent CPU us/message, client CPU us/message)}, the last sequence number.
    seids: filled with the UP SEIDs by "establish", read by "delete"."""
    out = {}
    seids = seids if seids is not None else [0] * n
    hb = bytearray(bytes(M.heartbeat(1)))
    for phase in phases:
        sent = done = 0
        seq = seq0
        inflight = {}
        a0, c0, t0 = cpu_of(agent_pid), self_cpu(), time.perf_counter()
        while done < n:
            while sent < n and len(inflight) < window:
                seq += 1
                if phase == "heartbeat":
                    struct.pack_into("!I", hb, 4, seq << 8)
                    msg = bytes(hb)
                elif phase == "establish":
                    msg = tpl.establishment(seq, sent)
                else:
                    msg = tpl.deletion(seq, seids[sent])
                inflight[seq] = sent
                sock.sendto(msg, addr)
                sent += 1
            r = sock.recv(2048)
            rseq = int.from_bytes(r[4:7] if phase == "heartbeat" else r[12:15], "big")
            i = inflight.pop(rseq)
            c = 1 if phase == "heartbeat" else r[CAUSE_OFF] if phase == "establish" else r[16 + 4]
            if c != 1:
                raise SystemExit(f"{phase} #{i}: cause {c}")
            if phase == "establish":
                seids[i] = int.from_bytes(r[FSEID_SEID_OFF:FSEID_SEID_OFF + 8], "big")
            done += 1
        wall = time.perf_counter() - t0
        out[phase] = (n / wall, (cpu_of(agent_pid) - a0) * 1e6 / n, (self_cpu() - c0) * 1e6 / n)
        seq0 = seq
    return out, seq0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=20000, help="sessions per row (default 20000)")
    ap.add_argument("--windows", default="1,8,32,128", help="requests in flight, one row each (default 1,8,32,128)")
    ap.add_argument("--agent-cpu", type=int, default=0, help="CPU the agent runs on (default 0)")
    ap.add_argument("--client-cpu", type=int, default=1, help="CPU the client runs on (default 1)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON object instead")
    ap.add_argument("--shape", choices=("bearer", "smf"), default="bearer",
                    help="the sessions: bearer (one PDR and FAR per direction, default) or smf (3 QERs, "
                    "2 URRs, SDF Filters, a dropping downlink FAR: what an SMF sends first)")
    ap.add_argument("--pgwu", default=PGWU, help=f"the pgwu binary to measure (default {PGWU}), e.g. another "
                    "build's, to compare two agents run after run")
    a = ap.parse_args()
    pgwu = a.pgwu

    pin = f"/sys/fs/bpf/gtplab-pfcpbench-{secrets.token_hex(4)}"
    agent = None
    try:
        subprocess.run([pgwu, "-d", pin, "load", "--max-bearers", str(max(65536, a.sessions)),
                        "--local-addr", M.GTPU_ADDR, "--no-fib-cache"], check=True, capture_output=True)
        agent = subprocess.Popen(["taskset", "-c", str(a.agent_cpu), pgwu, "-d", pin, "pfcp", "--listen",
                                  "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
        m = re.search(r"listening on ([\d.]+):(\d+)", agent.stdout.readline())
        addr = (m.group(1), int(m.group(2)))
        os.sched_setaffinity(0, {a.client_cpu})
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5)
        sock.sendto(bytes(M.assoc_setup(1)), addr)
        sock.recv(2048)
        tpl = Templates(a.shape)
        rows, seq = [], 10
        for w in [int(x) for x in a.windows.split(",")]:
            res, seq = run_window(sock, addr, tpl, a.sessions, w, agent.pid, seq)
            rows.append((w, res))
        left = subprocess.run([pgwu, "-d", pin, "stats", "--json"], capture_output=True, text=True).stdout
        assert '"uplink": 0, "downlink": 0' in left, "sessions left behind"
    finally:
        if agent:
            agent.terminate()
            agent.wait(10)
        subprocess.run([pgwu, "-d", pin, "unload"], capture_output=True)
        shutil.rmtree(pin, ignore_errors=True)

    if a.json:
        print(json.dumps({"pgwu": pgwu, "shape": a.shape, "sessions": a.sessions, "load": os.getloadavg()[0],
                          "rows": {w: {ph: dict(zip(("per_s", "agent_us", "client_us"), v)) for ph, v in res.items()}
                                   for w, res in rows}}))
        return 0
    hdr = ["window", "heartbeat/s", "establish/s", "x hb", "agent us", "client us", "delete/s", "x hb",
           "agent us", "client us"]
    lines = []
    for w, res in rows:
        h, e, d = res["heartbeat"], res["establish"], res["delete"]
        lines.append([str(w), f"{h[0]:,.0f}", f"{e[0]:,.0f}", f"{e[0] / h[0]:.2f}", f"{e[1]:.1f}", f"{e[2]:.1f}",
                      f"{d[0]:,.0f}", f"{d[0] / h[0]:.2f}", f"{d[1]:.1f}", f"{d[2]:.1f}"])
    print(f"pgwu pfcp, {a.sessions} {a.shape} sessions per row, agent on CPU {a.agent_cpu}, client on CPU {a.client_cpu}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("|" + "---:|" * len(hdr))
        for li in lines:
            print("| " + " | ".join(li) + " |")
    else:
        print("  ".join(f"{h:>11}" for h in hdr))
        for li in lines:
            print("  ".join(f"{x:>11}" for x in li))
    return 0


if __name__ == "__main__":
    sys.exit(main())
