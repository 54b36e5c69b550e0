"""Shared pytest fixtures. Each block belongs to one area; add yours as a separate block."""

from __future__ import annotations

import os
import secrets
import shutil

import pytest

from gtplab.dut.dataplane import Dataplane
from tests.lib.pgwu import pgwu as _pgwu
from tests.lib.trex_server import TrexServer, TrexUnavailable


# ---- data plane (tests/dataplane/test_dataplane*.py, tests/dataplane/test_fuzz.py) ----------------------
# A PGW-U loaded once per test module by `dataplane/pgwu -d <unique pin dir> load`, opened as
# gtplab.dut.dataplane.Dataplane. Always unloaded and its pin dir removed afterwards, also on failure.



@pytest.fixture(scope="module")
def pgwu_pin_dir():
    """A unique, freshly loaded pin dir: /sys/fs/bpf/gtplab-t-<id>. Unloaded and removed after the module."""
    pin_dir = f"/sys/fs/bpf/gtplab-t-{secrets.token_hex(4)}"
    try:
        _pgwu(pin_dir, "load", "--max-bearers", "4096")
        yield pin_dir
    finally:
        if os.path.exists(pin_dir):
            _pgwu(pin_dir, "unload", check=False)
        if os.path.isdir(pin_dir):
            # unload should have removed it; remove what is left (only inside our own dir)
            shutil.rmtree(pin_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def dataplane(pgwu_pin_dir):
    """gtplab.dut.dataplane.Dataplane on the module's freshly loaded PGW-U."""
    dp = Dataplane(pgwu_pin_dir)
    try:
        yield dp
    finally:
        dp.close()
# ---- end of data plane block ----------------------------------------------------------------------


# ---- TRex server (tests/trex/test_trex*.py; tests/lib/trex_server.py) ----------------------------------
# A real TRex server (the runtime tarball, docs/trex.md) in a namespace of its own, one per test
# module (TRex busy-polls a core while it runs: it must not outlive the module). Skipped, with the
# reason shown, when there is no tarball. Always stopped and its namespace removed afterwards.

@pytest.fixture(scope="module")
def trex_server():
    try:
        srv = TrexServer.start()
    except TrexUnavailable as e:
        pytest.skip(str(e))
    with srv:
        yield srv
# ---- end of TRex server block ---------------------------------------------------------------------


# ---- CPU claims (gtplab/lab/claims.py) -------------------------------------------------------------
# Several developers run this suite at once on one machine, and every lab test builds its lab on the
# same CPUs (0 and 1 on two CPUs): the suite's labs ask to share CPUs with other labs rather than be
# refused (a lab that shares says so in its layout and in every trial). No test times anything
# (docs/testing.md), so sharing changes no result. tests/lab/test_claims.py tests the refusal with a
# claims directory of its own. Set GTPLAB_SHARE_CPUS=0 to have the suite's labs refuse instead.
os.environ.setdefault("GTPLAB_SHARE_CPUS", "1")
# ---- end of CPU claims block -----------------------------------------------------------------------


# ---- the host the suite ran on ---------------------------------------------------------------------
# Machines of this kind differ (AMD EPYC with cpuidle states, Intel Xeon with no cpuidle driver); the
# session's header says which this one is, so a run's log says what its lab tests ran on.
def pytest_report_header(config):
    from pathlib import Path

    from gtplab.lab import awake
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "unknown CPU")
    drv = awake.cpuidle_driver()
    cpu1 = [p for p in awake.idle_states(1)] if os.cpu_count() and os.cpu_count() > 1 else []
    return (f"host: {model}, {os.cpu_count()} CPU(s), kernel {os.uname().release}; cpuidle driver "
            f"{drv or 'none (the lab keeps DUT CPUs awake with a spinner)'}, {len(cpu1)} idle state(s) on CPU 1")
# ---- end of host block -----------------------------------------------------------------------------
