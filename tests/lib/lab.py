"""The namespace lab in tests: what a lab left on the machine, polling with a deadline (no fixed
sleeps), and the harness functions on a gtplab.lab.topology.Lab that only tests and bench/ use
(bearers of the addressing contract). Used by tests/lab/, tests/engine/test_backend.py,
tests/dataplane/, tests/measure/, tests/pfcp/, tests/lib/correctness.py and bench/.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from gtplab.lab.topology import STATE_DIR, Addressing, Lab


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


def load_bearers(lab: Lab, n: int, sgws: int | None = None) -> None:
    """Install bearers 0..n-1 of the addressing contract in one `pgwu session load` (all or
    nothing). sgws: how many SGWs they spread over (default: the addressing's, 64); give the
    profile's --sgws when downlink packets must go to the SGW addresses the profile assumes."""
    a = lab.addressing if sgws is None else Addressing(**{**asdict(lab.addressing), "sgws": sgws})
    with tempfile.NamedTemporaryFile("w", prefix=f"gtplab-{lab.name}-", suffix=".bearers") as f:
        f.write(f"# lab {lab.name}: bearers 0..{n - 1}\n")
        for i in range(n):
            f.write(f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x}\n")
        f.flush()
        lab.pgwu("session", "load", f.name, timeout=600)
