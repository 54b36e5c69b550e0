"""libFuzzer + ASan/UBSan on the PFCP decoder (dataplane/fuzz/pfcp_fuzz.c over dataplane/pfcp_msg.c).

The seed corpus is written by dataplane/fuzz/pfcp_seeds.py from the Scapy messages the agent tests
use (tests/lib/pfcp_msgs.py). The short run is part of the unit tests, >= 1,000,000 executions are in the
long tier; any crash, leak or sanitizer report fails the test with the fuzzer's output. A self-test
builds the harness against a decoder with its IE length check removed and requires the fuzzer to
find that within the short run's budget, so a passing run means something.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gtplab.dut.dataplane import PGWU_DIR
from tests.lib import REPO

DP = PGWU_DIR
FUZZ = DP / "fuzz" / "pfcp_fuzz"


def build(extra_cflags: str = "", out: Path = FUZZ, tmp_path: Path | None = None) -> Path:
    """The fuzzer: make's, in dataplane/fuzz/; built by clang at out instead with extra flags, for another
    out, or in tmp_path when the user may not write the tree (not root: the unprivileged run)."""
    args = ["make", "-C", str(DP), "--no-print-directory"]
    if out == FUZZ and tmp_path is not None and not os.access(FUZZ.parent, os.W_OK):
        out = tmp_path / "pfcp_fuzz"
    if extra_cflags or out != FUZZ:
        cmd = ["clang", "-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined",
               *extra_cflags.split(), "-I", str(DP), "-I", str(DP / "include"),
               "-I", str(REPO / "lib" / "include"),
               str(DP / "fuzz" / "pfcp_fuzz.c"), str(DP / "pfcp_msg.c"), "-o", str(out)]
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    else:
        cp = subprocess.run(args + ["fuzz"], capture_output=True, text=True, timeout=300)
    if cp.returncode != 0:
        pytest.fail("Couldn't build the PFCP fuzzer (needs clang and libclang-rt-14-dev, see setup.sh):\n"
                    + cp.stdout[-2000:] + cp.stderr[-2000:])
    return out


def seeds(tmp_path: Path) -> Path:
    d = tmp_path / "seeds"
    cp = subprocess.run([sys.executable, str(DP / "fuzz" / "pfcp_seeds.py"), str(d)], capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert len(os.listdir(d)) >= 10
    return d


def run(binary: Path, tmp_path: Path, *args: str, timeout: float = 600) -> tuple[int, str, int]:
    work = tmp_path / "corpus"
    work.mkdir(exist_ok=True)
    cp = subprocess.run([str(binary), *args, f"-artifact_prefix={tmp_path}/", str(work), str(seeds(tmp_path))],
                        capture_output=True, text=True, timeout=timeout)
    m = re.findall(r"Done (\d+) runs", cp.stderr)
    return cp.returncode, cp.stderr, int(m[-1]) if m else 0


def test_pfcp_fuzz_short(tmp_path):
    rc, log, runs = run(build(tmp_path=tmp_path), tmp_path, "-runs=200000", "-max_len=2048")
    assert rc == 0, log[-4000:]
    assert runs == 200000, log[-2000:]


def test_pfcp_fuzz_finds_a_planted_bug(tmp_path):
    """Without the IE length check the decoder reads past the input: the same run must catch it."""
    b = build("-DPFCP_FUZZ_SELFTEST_BUG", tmp_path / "pfcp_fuzz_broken")
    rc, log, _ = run(b, tmp_path, "-runs=200000", "-max_len=2048")
    assert rc != 0 and ("AddressSanitizer" in log or "runtime error" in log), log[-3000:]


@pytest.mark.long
def test_pfcp_fuzz_one_million(tmp_path):
    rc, log, runs = run(build(tmp_path=tmp_path), tmp_path, "-runs=1500000", "-max_len=4096", timeout=1800)
    assert rc == 0, log[-4000:]
    assert runs >= 1_000_000, log[-2000:]
