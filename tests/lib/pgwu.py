"""`pgwu`, the PGW-U's own tool, run by the tests outside a lab (a lab runs it with Lab.pgwu): the one
runner, with the binary from gtplab.dut.dataplane.pgwu_binary() ($GTPLAB_PGWU honoured).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from gtplab.dut.dataplane import pgwu_binary


def pgwu(pin_dir: str | None, *args: str, check: bool = True, timeout: float = 120,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """`pgwu [-d PIN_DIR] ARGS...` (gtplab.dut.dataplane.pgwu_binary()), output captured. Fails the
    test when pgwu is not built, and with check when it exits non-zero (its stderr in the message)."""
    binary = pgwu_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is not built: run `make -C {binary.parent}` first")
    cmd = [str(binary)] + (["-d", pin_dir] if pin_dir else []) + [str(a) for a in args]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and cp.returncode != 0:
        pytest.fail(f"pgwu {' '.join(cmd[1:])} failed ({cp.returncode}): {cp.stderr.strip()}")
    return cp
