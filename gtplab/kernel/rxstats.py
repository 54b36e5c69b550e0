"""The kernel's receive-path counters, read from /proc and /sys: what a host's receive path did with
the packets it got, and where it dropped them.

- softnet(): /proc/net/softnet_stat, per CPU: packets processed by the CPU's NAPI polls (threaded
  NAPI included), dropped because the CPU's backlog was full (netif_rx, RPS), and time squeezes
  (a poll that ran out of budget or time with work left). One line per possible CPU, the CPU in the
  13th column (kernels 5.10+). Per host: every network namespace reads the same file.
- snmp(text): /proc/net/snmp (Ip, Icmp, Tcp, Udp ...), per network namespace: read it through a
  process of that namespace (/proc/PID/net/snmp) or inside it. Udp RcvbufErrors: datagrams dropped
  because a socket's receive buffer was full; InErrors counts them too, with MemErrors and
  InCsumErrors; NoPorts: no socket.
- link_stats(ns): `ip -s -j link` of a namespace: per interface rx/tx packets and drops (a veth
  counts in tx_dropped what its peer's ring refused from the stack).
- task(tid): a thread's name, the CPU it last ran on (/proc/TID/stat field 39) and its run time
  (/proc/TID/schedstat).

Used by gtplab.dut.local (the embedded lab's DUT side) and the socket path's lab; the deltas and what
they mean are gtplab.measure.rxpath.
"""

from __future__ import annotations

import json
import subprocess

from gtplab.kernel.sched import proc_stat

SOFTNET_FIELDS = ("processed", "dropped", "time_squeeze")


def softnet(text: str | None = None) -> dict[int, tuple[int, int, int]]:
    """{cpu: (processed, dropped, time_squeeze)} from /proc/net/softnet_stat (or its text)."""
    if text is None:
        with open("/proc/net/softnet_stat") as f:
            text = f.read()
    out = {}
    for i, line in enumerate(text.splitlines()):
        v = [int(x, 16) for x in line.split()]
        if len(v) < 3:
            continue
        cpu = v[12] if len(v) >= 13 else i
        out[cpu] = (v[0], v[1], v[2])
    return out


def snmp(text: str) -> dict[str, dict[str, int]]:
    """The text of /proc/net/snmp as {"Udp": {"RcvbufErrors": n, ...}, "Ip": {...}, ...}."""
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for head, vals in zip(lines[::2], lines[1::2]):
        h, v = head.split(), vals.split()
        if h and v and h[0] == v[0]:
            out[h[0].rstrip(":")] = {k: int(x) for k, x in zip(h[1:], v[1:]) if x.lstrip("-").isdigit()}
    return out


def snmp_of_netns(ns: str, pid: int | None = None) -> dict[str, dict[str, int]]:
    """Network namespace ns's /proc/net/snmp: through /proc/PID/net of a process known to be in it
    (nothing started), else read by a `cat` inside it."""
    if pid:
        try:
            with open(f"/proc/{pid}/net/snmp") as f:
                return snmp(f.read())
        except OSError:
            pass
    p = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "cat", "/proc/net/snmp"],
                       capture_output=True, text=True, timeout=30, check=True)
    return snmp(p.stdout)


def snmp6_of_netns(ns: str, pid: int | None = None) -> str:
    """Network namespace ns's /proc/net/snmp6 text, as snmp_of_netns reads /proc/net/snmp; "" when the
    kernel has no IPv6."""
    if pid:
        try:
            with open(f"/proc/{pid}/net/snmp6") as f:
                return f.read()
        except OSError:
            pass
    p = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "cat", "/proc/net/snmp6"],
                       capture_output=True, text=True, timeout=30)
    return p.stdout if p.returncode == 0 else ""


def net_dev(text: str) -> dict[str, dict[str, int]]:
    """The text of /proc/net/dev as {ifname: {rx_packets, rx_dropped, tx_packets, tx_dropped}}: the
    kernel's rtnl_link_stats64 of each device of the reader's namespace (rx drop there is
    rx_dropped + rx_missed_errors, tx drop is tx_dropped)."""
    out = {}
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        v = rest.split()
        if len(v) >= 12:
            out[name.strip()] = {"rx_packets": int(v[1]), "rx_dropped": int(v[3]),
                                 "tx_packets": int(v[9]), "tx_dropped": int(v[11])}
    return out


def udp_sockets(text: str, port: int) -> list[dict[str, int]]:
    """The UDP sockets bound to local port `port` in the text of /proc/net/udp: [{"rx_queue" (bytes
    queued), "drops" (the socket's sk_drops: a full receive buffer, a bad checksum at read, a
    filter)}]."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 13 and ":" in f[1] and int(f[1].rsplit(":", 1)[1], 16) == port:
            out.append({"rx_queue": int(f[4].split(":")[1], 16), "drops": int(f[12])})
    return out


OPTIONAL_FILES = ("snmp6", "udp6")   # absent on a kernel booted with IPv6 off: left out, not an error


def read_own_netns(files: tuple[str, ...] = ("snmp", "netstat", "dev", "udp")) -> dict[str, str]:
    """The texts of /proc/net/FILE as the calling thread's network namespace shows them
    (/proc/thread-self/net: /proc/net is the process's, whichever namespace a thread joined); for
    a gtplab.kernel.netns.Worker's call, so a snapshot costs no process."""
    out = {}
    for name in files:
        try:
            with open(f"/proc/thread-self/net/{name}") as f:
                out[name] = f.read()
        except FileNotFoundError:
            if name not in OPTIONAL_FILES:
                raise
    return out


def snmp6(text: str, table: str = "Ip6") -> dict[str, int]:
    """The text of /proc/net/snmp6 (one `Ip6InReceives  123` per line) as {"InReceives": 123, ...}
    for its lines of table (Ip6, Udp6, Icmp6, ...)."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        v = v.strip()
        if k.startswith(table) and v.isdigit():
            out[k[len(table):]] = int(v)
    return out


def link_stats(ns: str) -> dict[str, dict[str, int]]:
    """{ifname: {rx_packets, rx_dropped, rx_missed, tx_packets, tx_dropped, ...}} of namespace ns."""
    p = subprocess.run(["ip", "-n", ns, "-s", "-j", "link"], capture_output=True, text=True, timeout=30)
    out = {}
    for link in json.loads(p.stdout or "[]"):
        s = link.get("stats64") or link.get("stats") or {}
        rx, tx = s.get("rx", {}), s.get("tx", {})
        out[link["ifname"]] = {"rx_packets": rx.get("packets", 0), "rx_dropped": rx.get("dropped", 0),
                               "rx_missed": rx.get("missed", 0), "rx_errors": rx.get("errors", 0),
                               "tx_packets": tx.get("packets", 0), "tx_dropped": tx.get("dropped", 0),
                               "tx_errors": tx.get("errors", 0)}
    return out


def task(tid: int) -> dict | None:
    """{"name", "cpu" (the CPU it last ran on), "run_ns"} of a thread, None when it is gone."""
    st = proc_stat(tid)
    try:
        with open(f"/proc/{tid}/schedstat") as f:
            run_ns = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if st is None:
        return None
    return {"name": st.comm, "cpu": st.cpu, "run_ns": run_ns}
