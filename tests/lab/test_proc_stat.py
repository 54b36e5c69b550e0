"""The one reader of /proc/PID/stat (gtplab.kernel.sched.proc_stat): a command name holding ") "
and field-like words does not shift the fields after it, and a zombie is not a live process."""

import os
import shutil
import subprocess

from gtplab.kernel.sched import live_stat, proc_stat, start_time
from tests.lib.lab import wait_for


def test_a_comm_with_parentheses_and_spaces_keeps_the_fields_after_it(tmp_path):
    exe = tmp_path / "a) Z 1 (b"                  # comm is the executable's name, 15 bytes at most
    shutil.copy("/bin/sleep", exe)
    p = subprocess.Popen([str(exe), "30"])
    try:
        # asleep in its 30 s: its state, CPU and ticks no longer change between two reads (read
        # while it was still starting, they did: the final run of 2026-11-29 failed on that)
        st = wait_for(lambda: (x := proc_stat(p.pid)) is not None and x.state == "S" and x, what="the child asleep")
        assert st.comm == "a) Z 1 (b"
        assert st.ppid == os.getpid() and st.pgrp == os.getpgrp()
        assert st.start_ticks == start_time(p.pid) >= proc_stat(os.getpid()).start_ticks
        live = live_stat(p.pid)
        assert 0 <= st.cpu < os.cpu_count() and live is not None
        assert (live.comm, live.ppid, live.pgrp, live.start_ticks) == (st.comm, st.ppid, st.pgrp, st.start_ticks)
    finally:
        p.kill()
        p.wait()


def test_a_zombie_is_stat_but_not_live():
    p = subprocess.Popen(["true"])
    wait_for(lambda: (st := proc_stat(p.pid)) is not None and st.state == "Z", what="the child to exit")
    try:
        st_ticks = proc_stat(p.pid).start_ticks
        assert proc_stat(p.pid).exited and live_stat(p.pid) is None
    finally:
        p.wait()
    assert proc_stat(p.pid) is None or proc_stat(p.pid).start_ticks != st_ticks
