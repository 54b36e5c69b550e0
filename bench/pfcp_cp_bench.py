#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Session establishments (and deletions) per second that gtplab's PFCP control plane
(gtplab/pfcp/) drives, against the fake UPF of the tests and against `pgwu pfcp`. Prints ONE table.

    sudo .venv/bin/python bench/pfcp_cp_bench.py [--sessions 20000] [--windows 64,256,1024]
                                                [--targets fake,agent] [--markdown]

Each row: --sessions establishments through gtplab.pfcp.sessions.Sessions with a window of N
requests in flight (each session: uplink PDR with a CHOOSE F-TEID + FAR, downlink PDR + FAR with
outer header creation; every answer's Cause, SEID and F-TEID checked), then their deletions.
Requests come from templates built once by Scapy and patched per session (gtplab/pfcp/messages.py);
before timing, 200 rendered requests are decoded by Scapy and compared with what was asked.

Targets, each a separate process on 127.0.0.1:
  fake   tests/lib/fake_upf.py in fast mode (answers from templates, no Scapy per message): what the
         control plane alone does here
  agent  dataplane/pgwu's `pfcp --listen` on a PGW-U loaded in a unique pin dir (removed after)

Columns: "/s" = sessions / wall time; "cp us" and "upf us" = CPU microseconds per session that
gtplab's process and the UPF's process used (getrusage; /proc/PID/stat), so 1e6 / "cp us" is what
the control plane would drive with a CPU of its own. On a shared machine the wall rate is set by
scheduling as much as by either side: the CPU columns say which side costs what.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gtplab.dut.dataplane import pgwu_binary  # noqa: E402
from gtplab.dut.pfcp import EmbeddedAgent  # noqa: E402
from gtplab.errors import UserError  # noqa: E402
from gtplab.pfcp import messages as m  # noqa: E402
from gtplab.pfcp.node import Node, Timers  # noqa: E402
from gtplab.pfcp.sessions import Sessions  # noqa: E402
from gtplab.kernel.sched import proc_stat  # noqa: E402

PGWU = pgwu_binary()
UE0, SGW0, SGWTEID0 = 0x0A400001, 0x0AC90010, 0x80000000


def cpu_of(pid: int) -> float:
    return proc_stat(pid).cpu_s


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Fake:
    """tests/lib/fake_upf.py (fast) in a process of its own."""
    name = "fake UPF (tests/lib/fake_upf.py, fast)"

    def __init__(self, sessions: int):
        code = ("import time; from tests.lib.fake_upf import FakeUpf; "
                "f = FakeUpf(fast=True); print('listening on %s:%d' % f.addr, flush=True); time.sleep(3600)")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        mt = re.search(r"listening on ([\d.]+):(\d+)", self.proc.stdout.readline())
        if not mt:
            self.close()
            raise SystemExit("the fake UPF did not start")
        self.addr = (mt.group(1), int(mt.group(2)))

    def close(self):
        self.proc.kill()
        self.proc.wait()


class Agent:
    """`pgwu pfcp --listen 127.0.0.1:0` on a PGW-U in a unique pin dir."""
    name = "pgwu pfcp (dataplane/, C agent)"

    def __init__(self, sessions: int):
        self.pin = f"/sys/fs/bpf/gtplab-pfcpcp-bench-{secrets.token_hex(4)}"
        p = subprocess.run([str(PGWU), "-d", self.pin, "load", "--max-bearers", str(max(sessions, 64)),
                            "--local-addr", "10.201.0.1", "--ue-pool", "10.64.0.0/12", "--no-fib-cache"],
                           capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"pgwu load: {p.stderr.strip()}")
        try:
            self.agent = EmbeddedAgent(self.pin)
        except UserError as e:
            subprocess.run([str(PGWU), "-d", self.pin, "unload"], capture_output=True)
            raise SystemExit(f"pfcp_cp_bench: {e}") from None
        self.addr = self.agent.addr
        self.proc = self.agent.proc

    def close(self):
        self.agent.close()
        subprocess.run([str(PGWU), "-d", self.pin, "unload"], capture_output=True)
        shutil.rmtree(self.pin, ignore_errors=True)


def check_templates(opts: m.SessionOptions, n: int = 200) -> None:
    """Rendered requests, decoded by Scapy, carry the values they were rendered with."""
    t = m.establishment_template("127.0.0.1", "127.0.0.1", opts)
    rnd = random.Random(1)
    for _ in range(n):
        v = dict(seq=rnd.randrange(1, 1 << 24), cp_seid=rnd.randrange(1, 1 << 64), ue=rnd.randrange(1 << 32),
                 sgw=rnd.randrange(1 << 32), sgw_teid=rnd.randrange(1, 1 << 32), teid=0)
        p = m.decode(t.render(**v))
        ies = p.payload.IE_list
        fseid = next(i for i in ies if i.ietype == m.IE_FSEID)
        ues = [x.ipv4 for pdr in ies if pdr.ietype == 1 for x in pdr.IE_list[2].IE_list if x.ietype == 93]
        far = next(x for x in ies if x.ietype == 3 and x.IE_list[0].id == m.FAR_DL)
        ohc = far.IE_list[2].IE_list[-1]
        assert (p.seq, fseid.seid, ues, ohc.ipv4, ohc.TEID) == \
            (v["seq"], v["cp_seid"], [m.ip(v["ue"])] * 2, m.ip(v["sgw"]), v["sgw_teid"]), v


def run(target, sessions: int, window: int, base: int) -> dict:
    node = Node(target.addr, port=0, timers=Timers(t1=2.0, n1=3, heartbeat=0))
    try:
        node.associate()
        sm = Sessions(node, m.SessionOptions(choose=True, n3_addr="10.201.0.1"), window=window)
        bs = [m.Bearer(i, UE0 + base + i, SGW0 + i % 4, SGWTEID0 + i) for i in range(sessions)]
        out = {}
        for phase in ("establish", "delete"):
            c0, u0, t0 = self_cpu(), cpu_of(target.proc.pid), time.perf_counter()
            if phase == "establish":
                got = sm.establish(bs)
                assert len({s.teid for s in got}) == sessions
            else:
                sm.delete()
                assert not sm.sessions
            dt = time.perf_counter() - t0
            out[phase] = (sessions / dt, (self_cpu() - c0) / sessions * 1e6,
                          (cpu_of(target.proc.pid) - u0) / sessions * 1e6)
        out["retransmitted"] = node.counters["retransmitted"]
        node.release()
        return out
    finally:
        node.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20000)
    ap.add_argument("--windows", default="64,256,1024")
    ap.add_argument("--targets", default="fake,agent")
    ap.add_argument("--markdown", action="store_true", help="a markdown table (docs/pfcp.md)")
    a = ap.parse_args()
    windows = [int(x) for x in a.windows.split(",")]
    check_templates(m.SessionOptions(choose=True))
    check_templates(m.SessionOptions(n3_addr="10.201.0.1", urr=True, mbr_kbps=(1, 2)))
    rows = []
    for name in a.targets.split(","):
        if name == "agent" and not os.access(PGWU, os.X_OK):
            raise SystemExit(f"{PGWU} is not built: make -C dataplane (or --targets fake)")
        target = {"fake": Fake, "agent": Agent}[name](a.sessions)
        try:
            for k, w in enumerate(windows):
                r = run(target, a.sessions, w, base=k * a.sessions)
                rows.append((target.name, w, r))
        finally:
            target.close()
    head = ("UPF", "window", "establish /s", "cp us", "upf us", "delete /s", "cp us", "upf us", "retx")
    lines = []
    for name, w, r in rows:
        e, d = r["establish"], r["delete"]
        lines.append((name, str(w), f"{e[0]:,.0f}", f"{e[1]:.1f}", f"{e[2]:.1f}",
                      f"{d[0]:,.0f}", f"{d[1]:.1f}", f"{d[2]:.1f}", str(r["retransmitted"])))
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
    else:
        wid = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
        for ln in [head] + lines:
            print("  ".join(x.rjust(wid[i]) if i else x.ljust(wid[i]) for i, x in enumerate(ln)))
    print(f"\n{a.sessions} sessions per row (CHOOSE F-TEID, no URR/QER); {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
