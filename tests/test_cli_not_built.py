"""Every `gtplab` command that builds a lab, on a tree where one file ./setup.sh builds is missing: one
line naming the file and how to build it, exit 2 (gtplab.errors.NotBuilt, a UserError like TRex's
missing runtime), no traceback, and nothing begun: no lab reserved (the run directory has no labs/ at
all), no results directory, no namespace, bpffs pin or process of the lab.

tests/test_cli_bad_input.py walks the parser for bad option values; this is the other axis, a
component missing from the tree, so its cases are a table: each file with the commands that need it.
The real command line runs in a subprocess from a copy of the tree (gtplab/ copied, every other top
folder and dataplane/'s files linked) without that one file: the shared tree, where other runs use the
objects, is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lib import REPO
from tests.lib.lab import leftovers

DEADLINE_S = 120        # a refusal takes a few seconds; the old behaviour built (part of) a lab first

ENGINE = "gtplab/traffic/engine/bpf/trafficgen.bpf.o"
FWD = "gtplab/dut/fwd.bpf.o"
TC_DROP = "gtplab/dut/tc_drop_dst.bpf.o"
SOCKDROP = "gtplab/dut/sockdrop.bpf.o"
PGWU = "dataplane/pgwu"

SWEEP = ["sweep", "--no-scale", "--sizes", "128", "--directions", "uplink", "--flow-modes", "single",
         "--checksum", "off", "--rate-mode", "fixed", "--rate", "1000", "--duration", "1", "--no-latency",
         "--pcap-limit", "0", "--out", "{tmp}/out", "--share-cpus"]
LAB_UP = ["lab", "up", "--name", "{lab}", "--share-cpus"]
CONFORMANCE = ["conformance", "-o", "{tmp}/out", "--cases", "echo"]
UPFTEST = ["upftest", "policing", "-o", "{tmp}/out", "--share-cpus"]
GRO_CONFIG = "backend: local\ndut:\n  mode: socket\n  socket: {gro: true}\n"

# (missing file, argv): each command that builds a lab, with a DUT mode that needs the file
CASES = [
    (ENGINE, SWEEP + ["--dut", "fwd"]),
    (ENGINE, CONFORMANCE + ["--lab-config", "embedded"]),
    (ENGINE, UPFTEST),
    (FWD, SWEEP + ["--dut", "fwd"]),
    (FWD, LAB_UP + ["--dut", "fwd"]),
    (TC_DROP, SWEEP + ["--dut", "socket"]),
    (TC_DROP, LAB_UP + ["--dut", "socket"]),
    (SOCKDROP, SWEEP + ["--dut", "socket", "--lab-config", "{tmp}/gro.yaml"]),
    (SOCKDROP, LAB_UP + ["--dut", "socket", "--socket", "gro=on"]),
    (SOCKDROP, CONFORMANCE + ["--lab-config", "{tmp}/gro.yaml"]),
    (PGWU, SWEEP + ["--dut", "pgwu"]),
    (PGWU, SWEEP + ["--dut", "socket"]),
    (PGWU, LAB_UP + ["--dut", "pgwu"]),
    (PGWU, LAB_UP + ["--dut", "socket"]),
    (PGWU, CONFORMANCE + ["--lab-config", "embedded"]),
    (PGWU, UPFTEST),
]


def tree_without(missing: str, top: Path) -> Path:
    """A copy of the repository at top/tree-<name> without the file missing (relative to the top)."""
    dst = top / f"tree-{Path(missing).name}"
    if dst.exists():
        return dst
    dst.mkdir()
    for e in REPO.iterdir():
        if e.name == ".git":
            continue
        if e.name == "gtplab":
            shutil.copytree(e, dst / e.name, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
        elif e.name == "dataplane":
            (dst / e.name).mkdir()
            for f in e.iterdir():
                os.symlink(f, dst / e.name / f.name)
        else:
            os.symlink(e, dst / e.name)
    (dst / missing).unlink()
    return dst


def _tree_procs(tree: Path) -> list[str]:
    """The processes started from the copy (their command line names it)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(tree) in cmd and d.name != str(os.getpid()):
                found.append(f"{d.name}: {cmd}")
    return found


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    return tmp_path_factory.mktemp("not-built")


@pytest.mark.lab            # the old behaviour built a lab before it failed
@pytest.mark.parametrize("missing,argv", CASES, ids=[f"{Path(m).name}: {' '.join(a[:2] if a[0] in ('lab', 'upftest') else a[:1])}"
                                                    f"{' --dut ' + a[a.index('--dut') + 1] if '--dut' in a else ''}"
                                                    f"{' gro' if 'gro' in ' '.join(a) else ''}"
                                                    for m, a in CASES])
def test_missing_build_artefact(missing, argv, trees, tmp_path):
    tree = tree_without(missing, trees)
    (tmp_path / "gro.yaml").write_text(GRO_CONFIG)
    lab = "tdy" + os.urandom(3).hex()
    argv = [a.format(tmp=tmp_path, lab=lab) for a in argv]
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTPLAB_") and k != "TREX_SERVER"}
    env.update(GTPLAB_SHARE_CPUS="1", GTPLAB_RUN_DIR=str(run_dir), PYTHONPATH=str(tree))
    try:
        cp = subprocess.run([sys.executable, "-m", "gtplab", *argv], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
    finally:
        labs = sorted(p.stem for p in (run_dir / "labs").glob("*.json")) if (run_dir / "labs").is_dir() else []
        for name in labs:           # what a failing case left: removed, then the case fails below
            subprocess.run([sys.executable, "-m", "gtplab", "lab", "down", "--name", name, "--force"],
                           cwd=tmp_path, env=env, capture_output=True, timeout=120)
    shown = f"gtplab {' '.join(argv)} (without {missing})\n--- rc {cp.returncode}, stderr:\n{cp.stderr}"
    path = tree / missing
    want = f"{path} is not built: run ./setup.sh (or make -C {path.parent})"
    assert "Traceback" not in cp.stderr, shown
    assert cp.returncode == 2, shown
    assert cp.stderr.strip().splitlines() == [f"gtplab {argv[0]}: {want}"], shown
    assert not (run_dir / "labs").exists(), f"a lab was reserved ({labs}): {shown}"
    assert not (tmp_path / "out").exists(), f"a results directory was begun: {shown}"
    assert not leftovers(lab), shown
    assert not _tree_procs(tree), shown


@pytest.mark.lab
def test_pgwu_object_not_needed_at_run_time(trees, tmp_path):
    """dataplane/pgwu.bpf.o is in dataplane/pgwu (a skeleton): a tree without it builds a PGW-U lab
    (the check above must not refuse it), which is then taken down."""
    tree = tree_without("dataplane/pgwu.bpf.o", trees)
    lab = "tdy" + os.urandom(3).hex()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTPLAB_") and k != "TREX_SERVER"}
    env.update(GTPLAB_SHARE_CPUS="1", GTPLAB_RUN_DIR=str(tmp_path / "run"), PYTHONPATH=str(tree))
    gtplab = [sys.executable, "-m", "gtplab"]
    try:
        cp = subprocess.run(gtplab + ["lab", "up", "--name", lab, "--dut", "pgwu", "--share-cpus"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=DEADLINE_S, stdin=subprocess.DEVNULL)
        assert cp.returncode == 0, cp.stderr
    finally:
        subprocess.run(gtplab + ["lab", "down", "--name", lab, "--force"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)
    assert not leftovers(lab)
