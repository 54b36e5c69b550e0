"""The suite's own rules (docs/testing.md): fixtures live in conftest.py files and helpers in tests/lib/,
so no test module imports another; and the lock that gives a `timing` test the machine's CPUs
(tests/lib/cpus.py) excludes what it must and lets the rest share."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

from tests.lib import REPO
from tests.lib.cpus import SuiteCpus

TESTS = REPO / "tests"

# Imports between test modules that remain, each to be replaced by a helper in tests/lib/; an edge
# here that no longer exists fails too, so the list only shrinks.
KNOWN: dict[tuple[str, str], str] = {}


def _imported_test_modules(path: Path, root: Path) -> set[str]:
    """The test modules (test_*.py under root) that the module at path imports, as dotted names."""
    pkg = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[:len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out |= {n for n in names if n.split(".")[0] == root.name and n.split(".")[-1].startswith("test_")}
    return out


def import_edges(root: Path) -> set[tuple[str, str]]:
    """(importing file relative to the repository, imported test module) for every test module under root."""
    return {(str(p.relative_to(root.parent)), m) for p in sorted(root.rglob("test_*.py"))
            for m in _imported_test_modules(p, root)}


def test_no_test_module_imports_another():
    edges = import_edges(TESTS)
    new = sorted(edges - set(KNOWN))
    assert not new, ("test modules importing test modules (move what they share to tests/lib/, fixtures to a "
                     f"conftest.py): {new}")
    gone = sorted(set(KNOWN) - edges)
    assert not gone, f"remove from KNOWN, they no longer import: {gone}"


def test_the_import_rule_sees_every_form(tmp_path):
    """Absolute, from-package and relative imports of a test module are all found; tests.lib is not."""
    root = tmp_path / "tests"
    (root / "a").mkdir(parents=True)
    (root / "a" / "test_one.py").write_text(
        "import tests.b.test_two\nfrom tests.b.test_three import x\nfrom tests.b import test_four\n"
        "from .test_five import y\nfrom . import test_six\nfrom tests.lib.pgwu import pgwu\n")
    assert {m for _, m in import_edges(root)} == {
        "tests.b.test_two", "tests.b.test_three", "tests.b.test_four", "tests.a.test_five", "tests.a.test_six"}


# ---- the CPU lock of timing tests (tests/lib/cpus.py) ------------------------------------------------

@pytest.fixture
def lock_path(tmp_path):
    return tmp_path / "suite.lock"


def test_shares_coexist_and_exclude_a_timing_test(lock_path):
    a, b, t = SuiteCpus(lock_path), SuiteCpus(lock_path), SuiteCpus(lock_path)
    try:
        assert a.shared(1) is not None and b.shared(1) is not None       # two runs' lab modules at once
        assert t.exclusive(0.3) is None and t.mode is None               # a timing test waits for both
        a.release()
        assert t.exclusive(0.3) is None
        b.release()
        assert t.exclusive(1) is not None and t.mode == "exclusive"
        assert a.shared(0.3) is None and a.mode is None                  # and nobody shares with it
        assert b.exclusive(0.3) is None
        t.release()
        assert a.shared(1) is not None
    finally:
        for x in (a, b, t):
            x.close()


def test_a_waiting_timing_test_is_not_overtaken_by_new_shares(lock_path):
    """While a timing test waits for the shares held, a new share waits behind it (the turnstile): the
    lab modules of several overlapping runs cannot starve it."""
    old, late, t = SuiteCpus(lock_path), SuiteCpus(lock_path), SuiteCpus(lock_path)
    got = {}
    try:
        assert old.shared(1) is not None
        waiter = threading.Thread(target=lambda: got.setdefault("t", t.exclusive(5)))
        waiter.start()
        time.sleep(0.3)                                   # the timing test is waiting now
        assert late.shared(0.3) is None, "a new share overtook the waiting timing test"
        old.release()
        waiter.join()
        assert got["t"] is not None and t.mode == "exclusive"
        t.release()
        assert late.shared(1) is not None
    finally:
        for x in (old, late, t):
            x.close()


def test_the_runs_using_the_lock_are_named_while_they_live(lock_path):
    """participants(): the processes holding the lock's .members file (a timing test does not wait for
    their labs, which the lock already keeps idle); a process gone is gone from it."""
    import subprocess
    import sys
    from tests.lib.cpus import participants
    p = subprocess.Popen([sys.executable, "-c", "import sys, time; from tests.lib.cpus import SuiteCpus; "
                          f"SuiteCpus({str(lock_path)!r}).shared(5); print('in', flush=True); time.sleep(60)"],
                         cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "in\n"
        assert p.pid in participants(lock_path)
    finally:
        p.kill()
        p.wait()
    assert p.pid not in participants(lock_path)


def test_the_lock_file_is_made_for_every_user(lock_path):
    s = SuiteCpus(lock_path)
    try:
        assert s.shared(1) is not None
        assert lock_path.stat().st_mode & 0o777 == 0o644
        assert Path(str(lock_path) + ".turnstile").stat().st_mode & 0o777 == 0o644
    finally:
        s.close()


# ---- the suite's time table (tools/junit_times.py) ----------------------------------------------------

def test_time_table_per_file_from_a_junit_report(tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("junit_times", REPO / "tools" / "junit_times.py")
    junit_times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(junit_times)
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest" tests="4" time="9.5" timestamp="2026-11-28T17:16:41+01:00">'
        '<testcase classname="tests.engine.test_gtpu_walk" name="test_a" file="tests/engine/test_gtpu_walk.py"'
        ' time="1.5"/>'
        '<testcase classname="tests.lab.test_eupf" name="test_b" time="6.0">'
        '<skipped message="undecided: 2 of 4 cases: host busy"/></testcase>'
        '<testcase classname="tests.lab.test_eupf" name="test_c" time="1.0"><skipped message="no runtime"/></testcase>'
        '<testcase classname="tests.engine.test_gtpu_walk" name="test_d" time="1.0"><failure message="x"/></testcase>'
        '</testsuite></testsuites>')
    t = junit_times.table(report).splitlines()
    assert t[0].startswith("From junit.xml of a run started 2026-11-28 16:16 UTC: 4 tests")
    assert t[4] == "| [test_eupf.py](../tests/lab/test_eupf.py) | 2 | 2 (1) | 0 | 7 s | 6 s `test_b` |"
    assert t[5] == "| [test_gtpu_walk.py](../tests/engine/test_gtpu_walk.py) | 2 | 0 (0) | 1 | 2 s | 2 s `test_a` |"
    md = tmp_path / "t.md"
    md.write_text(f"a\n{junit_times.BEGIN}\nold\n{junit_times.END}\nb\n")
    assert junit_times.main([str(report), "--write", str(md)]) == 0
    assert md.read_text() == f"a\n{junit_times.BEGIN}\n" + "\n".join(t) + f"\n{junit_times.END}\nb\n"
