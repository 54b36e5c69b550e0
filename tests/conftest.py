"""Shared pytest fixtures. Each block belongs to one area; add yours as a separate block."""

from __future__ import annotations

import os
import secrets
import shutil
import time

import pytest

from gtplab.dut.dataplane import Dataplane
from tests.lib import UNDECIDED
from tests.lib.cpus import SuiteCpus, others_on_cpus
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


# ---- CPU claims (gtplab/lab/claims.py) and timing tests (tests/lib/cpus.py) ------------------------
# Several developers run this suite at once on one machine, and every lab test builds its lab on the
# same CPUs (0 and 1 on two CPUs): the suite's labs ask to share CPUs with other labs rather than be
# refused (a lab that shares says so in its layout and in every trial). Sharing changes no result of
# a test that times nothing. A test that times, rates or periods something is marked `timing`
# (docs/testing.md) and has the CPUs to itself: it takes the suite lock alone, waiting for the
# other runs' lab and bpf modules (which hold it shared, from their first lab or bpf test to the
# module's end: their labs, PGW-Us and agents keep CPUs busy) and
# for the labs made outside the suite's runs (their CPU claims), and its own labs claim their CPUs
# without sharing.
# A wait longer than TIMING_WAIT_S skips the test as undecided, with whom it waited for.
# tests/lab/test_claims.py tests the refusal with a claims directory of its own. Set
# GTPLAB_SHARE_CPUS=0 to have every lab of the suite refuse instead.
os.environ.setdefault("GTPLAB_SHARE_CPUS", "1")

TIMING_WAIT_S = float(os.environ.get("GTPLAB_TIMING_WAIT_S", "300"))
_suite_cpus = SuiteCpus()
_share_env = pytest.StashKey[str | None]()


def _cpu_mode(item) -> str | None:
    if item.get_closest_marker("timing"):
        return "exclusive"
    return "shared" if item.get_closest_marker("lab") or item.get_closest_marker("bpf") else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    mode = _cpu_mode(item)
    if mode is None or _suite_cpus.mode == mode:
        return
    t0 = time.monotonic()
    if getattr(_suite_cpus, mode)(TIMING_WAIT_S) is None:
        pytest.skip(f"{UNDECIDED} {item.name}: the suite lock {_suite_cpus.path} was not free for "
                    f"{TIMING_WAIT_S:.0f} s " + ("(other runs' lab and bpf modules held it)" if mode == "exclusive" else
                       "(another run's timing test held it)"))
    if mode == "shared":
        return
    others = others_on_cpus()
    while others and time.monotonic() - t0 < TIMING_WAIT_S:
        time.sleep(1)
        others = others_on_cpus()
    if others:
        _suite_cpus.release()
        from gtplab.lab.claims import holder_text
        pytest.skip(f"{UNDECIDED} {item.name}: other labs held this machine's CPUs for {TIMING_WAIT_S:.0f} s: "
                    + "; ".join(map(holder_text, others)))
    item.stash[_share_env] = os.environ.get("GTPLAB_SHARE_CPUS")
    os.environ["GTPLAB_SHARE_CPUS"] = "0"             # the labs it builds claim their CPUs alone
    item.user_properties.append(("cpus", f"alone (waited {time.monotonic() - t0:.1f} s)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:            # after the item's fixtures, the module's too when it was the module's last
        if _share_env in item.stash:
            old = item.stash[_share_env]
            if old is None:
                os.environ.pop("GTPLAB_SHARE_CPUS", None)
            else:
                os.environ["GTPLAB_SHARE_CPUS"] = old
        module_ends = nextitem is None or getattr(nextitem, "module", None) is not item.module
        if _suite_cpus.mode == "exclusive" or (_suite_cpus.mode == "shared" and module_ends):
            _suite_cpus.release()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """The tests that could not decide (skips whose reason begins with UNDECIDED), counted on a line
    of their own right above the final line (after -ra's short summary, which gives each reason)."""
    try:
        return (yield)
    finally:
        def reason(r):
            lr = r.longrepr
            return (lr[2] if isinstance(lr, tuple) else str(lr)).removeprefix("Skipped: ")
        n = sum(reason(r).startswith(UNDECIDED) for r in terminalreporter.stats.get("skipped", []))
        terminalreporter.write_line(f"undecided: {n} (tests skipped because this host could not decide "
                                    f"their property; reasons above, in the skips)")


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
