"""The namespace lab in tests: what a lab left on the machine, polling with a deadline (no fixed
sleeps), and the harness on a gtplab.lab.topology.Lab that only tests and bench/ use, as functions
that take the lab: bearers of the addressing contract (add_bearer, load_bearers; bearer_lines, the
bearer-file lines of any bearers), a function run in one of its namespaces (run_in), AF_PACKET frames
on its generator ports (packet_socket, send_frames; af_packet_socket on any interface),
the DUT's counters (dut_counters) and the pid of its `pgwu reassemble` (reassembler_pid).
Used by tests/lab/, tests/engine/test_backend.py, tests/dataplane/, tests/measure/, tests/pfcp/,
tests/lib/correctness.py and bench/.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from gtplab.dut.dataplane import REASONS
from gtplab.kernel import bpf
from gtplab.kernel.netns import run_in as run_in_netns
from gtplab.lab.topology import STATE_DIR, Addressing, Lab

ETH_P_ALL = 0x0003      # every protocol, for an AF_PACKET socket (linux/if_ether.h)


def leftovers(name: str) -> list[str]:
    """Everything of lab `name` still on the machine: namespaces, host links, bpffs paths, state."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found += [ln.split()[0] for ln in netns.splitlines() if f"gtplab-{name}-" in ln]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    found += [ln for ln in links.splitlines() if f"g{name}p" in ln or f"d{name}p" in ln]
    found += [str(p) for p in Path("/sys/fs/bpf").glob(f"gtplab-{name}*")]
    found += [str(p) for p in STATE_DIR.glob(f"{name}.*")]
    return found


def wait_for(cond, timeout=5.0, what="condition"):
    """Poll cond() until it returns something true, with a deadline (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------- the lab's harness (tests and bench/)

def add_bearer(lab: Lab, i: int, **overrides) -> dict:
    """Install bearer i of the addressing contract; returns its fields."""
    b = {**lab.addressing.bearer(i), **overrides}
    lab.pgwu("session", "add", "--teid", str(b["teid"]), "--ue", b["ue"], "--sgw", b["sgw"],
             "--sgw-teid", str(b["sgw_teid"]))
    return b


def bearer_lines(a: Addressing, indices: Iterable[int]) -> Iterator[str]:
    """The lines of bearers `indices` of addressing a in the PGW-U's bearer-file format, as
    `pgwu session load` reads them: `TEID UE_ADDR SGW_ADDR SGW_TEID`, TEIDs in hex (the tests' one
    writer of that format). The addresses are a.ue(i) and a.sgw(i), computed as integers: a million
    lines in a few seconds."""
    ue1 = int(ipaddress.ip_network(a.ue_pool).network_address) + 1
    sgws = [a.sgw(k) for k in range(a.sgws)]
    for i in indices:
        yield (f"{a.local_teid(i):#x} {socket.inet_ntoa((ue1 + i).to_bytes(4, 'big'))} {sgws[i % a.sgws]} "
               f"{a.sgw_teid(i):#x}\n")


def load_bearers(lab: Lab, n: int, sgws: int | None = None) -> None:
    """Install bearers 0..n-1 of the addressing contract in one `pgwu session load` (all or
    nothing). sgws: how many SGWs they spread over (default: the addressing's, 64); give the
    profile's --sgws when downlink packets must go to the SGW addresses the profile assumes."""
    a = lab.addressing if sgws is None else Addressing(**{**asdict(lab.addressing), "sgws": sgws})
    with tempfile.NamedTemporaryFile("w", prefix=f"gtplab-{lab.name}-", suffix=".bearers") as f:
        f.write(f"# lab {lab.name}: bearers 0..{n - 1}\n")
        f.writelines(bearer_lines(a, range(n)))
        f.flush()
        lab.pgwu("session", "load", f.name, timeout=600)


def run_in(lab: Lab, where: str, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """fn(*args, **kwargs) inside the lab's "gen" or "dut" namespace (gtplab.kernel.netns.run_in)."""
    return run_in_netns(lab.gen_ns if where == "gen" else lab.dut_ns, fn, *args, **kwargs)


def af_packet_socket(ifname: str, timeout: float | None = 1.0) -> socket.socket:
    """A raw AF_PACKET socket of every protocol (ETH_P_ALL) bound to ifname, made in the calling
    thread's netns: call it in the namespace (run_in, a gtplab.kernel.netns.Worker); a socket keeps
    its netns, so it can be used from any thread afterwards. timeout None: blocking."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, ETH_P_ALL))
    s.settimeout(timeout)
    return s


def packet_socket(lab: Lab, port_id: int, timeout: float = 1.0) -> socket.socket:
    """A raw AF_PACKET socket bound to generator port port_id (af_packet_socket, made inside the
    generator netns)."""
    return run_in(lab, "gen", af_packet_socket, lab.ports[port_id].ifname, timeout)


def send_frames(lab: Lab, port_id: int, frames: list[bytes]) -> None:
    """Send frames (bytes without FCS) out of generator port port_id with AF_PACKET: slow, for
    functional tests; the engine is the way to send many."""
    with packet_socket(lab, port_id) as s:
        for f in frames:
            s.send(bytes(f))


def dut_counters(lab: Lab) -> dict[str, int]:
    """Packets per "<REASON>/<verdict>" summed over CPUs, read from the pinned stats map (the
    contract: index reason * 5 + verdict, value struct pgwu_counter {packets, bytes} per CPU)."""
    names = [r.upper() for r in REASONS]
    out: dict[str, int] = {}
    with bpf.Map.pinned(os.path.join(lab.pin_dir, "stats")) as m:
        for k, per_cpu in m.items():
            idx = bpf.u32(k)
            pkts = sum(bpf.u64(v) for v in per_cpu)
            if pkts:
                r, v = divmod(idx, len(bpf.XDP_VERDICTS))
                rname = names[r] if r < len(names) else str(r)
                out[f"{rname}/{bpf.XDP_VERDICTS[v]}"] = pkts
    return out


def reassembler_pid(lab: Lab) -> int | None:
    """The pid of the lab's `pgwu reassemble` (started with a pgwu lab), as its state file has it."""
    return (lab.state.get("reassembler") or {}).get("pid")
