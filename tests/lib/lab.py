"""The namespace lab in tests: what a lab left on the machine, and polling with a deadline (no fixed
sleeps). Used by tests/lab/test_lab.py, tests/engine/test_backend.py, tests/dataplane/test_reassembly.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from gtplab.lab.topology import STATE_DIR


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
