"""Issue 15, "runs and tables that never lose anything": the checks of the sweep's clean-up path,
results directory errors, torn result files and interrupted-run reports that had no test of their
own. Unit tests (no lab) except where marked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gtplab import errors
from gtplab.measure import sweep
from gtplab.results import report
from gtplab.results import store as results
from gtplab.results.push import Pusher
from tests.lib.synthetic_results import sweep_cases, write_results
from tests.lib import REPO

GTPLAB = [sys.executable, "-m", "gtplab"]


def _tear(d: Path) -> int:
    """Cut the last line of cases.jsonl in the middle, as a run killed while writing it leaves it."""
    text = (d / "cases.jsonl").read_text()
    lines = text.splitlines(keepends=True)
    (d / "cases.jsonl").write_text("".join(lines) + lines[-1][: len(lines[-1]) // 2])
    return len(lines) + 1


# ---- torn last line of cases.jsonl ----------------------------------------------------------------

def test_torn_last_line_is_left_out_and_named(tmp_path):
    cases = sweep_cases()
    d = write_results(tmp_path / "r", cases)
    torn = _tear(d)
    assert results.torn_last_line(d) == torn
    assert [c["case_id"] for c in results.read_cases(d)] == [c["case_id"] for c in cases]
    # only the last line may be torn: a bad line before it is still an error
    text = (d / "cases.jsonl").read_text().splitlines(keepends=True)
    (d / "cases.jsonl").write_text("".join(text[:2]) + "{bad\n" + "".join(text[2:]))
    with pytest.raises(results.ResultsError, match="cases.jsonl:3"):
        results.read_cases(d)


def test_report_of_a_torn_and_interrupted_run_says_so_at_the_top(tmp_path):
    cases = sweep_cases()
    d = write_results(tmp_path / "r", cases)
    run = json.loads((d / "run.json").read_text())
    run.update(cases_planned=len(cases) + 3,
               interrupted={"signal": "SIGTERM", "case": "downlink-1518-1000-on", "at": "2026-01-02T03:05:00+00:00"})
    (d / "run.json").write_text(json.dumps(run))
    torn = _tear(d)
    index = report.build_report(d)
    html = Path(index).read_text()
    top = html[: html.index("<h2 id='measurement'>")]  # before the first section
    assert "this run was interrupted</b> (SIGTERM during case downlink-1518-1000-on)" in top
    assert f"{len(cases)} of {len(cases) + 3} cases finished" in top
    assert f"line {torn} of cases.jsonl is torn" in top


def test_report_of_a_stopped_run_says_why(tmp_path):
    d = write_results(tmp_path / "r", sweep_cases())
    run = json.loads((d / "run.json").read_text())
    run["stopped"] = {"why": "Couldn't write case x: No space left on device", "case": "x"}
    (d / "run.json").write_text(json.dumps(run))
    html = Path(report.build_report(d)).read_text()
    assert "this run stopped early" in html[: html.index("<h2 id='measurement'>")]
    assert "No space left on device" in html


# ---- the clean-up path ----------------------------------------------------------------------------

def test_pusher_never_raises_whatever_the_url():
    run = {"uuid": "u-1", "backend": "local"}
    case = {"case_id": "c", "direction": "uplink", "frame_size": 64, "flows": 1, "checksum": "on"}
    for url in ("http://[::1", "http://127.0.0.1:notaport", "ftp://x", "http://127.0.0.1:9"):
        p = Pusher(url, run, timeout=0.5, warn=lambda m: None)
        assert p.case_started(case) is False
        assert p.push(dict(case, loss_ratio=0.0)) is False
        assert p.finish() is False  # held, never raised


class _Boom:
    def __init__(self):
        self.closed = False

    def finish(self):
        raise ValueError("Invalid IPv6 URL")

    def terminate(self):
        raise ProcessLookupError("gone")

    def close(self):
        self.closed = True


def test_cleanup_steps_that_fail_never_skip_the_teardown(tmp_path, capsys):
    """The pusher's finish() and the exporter's stop raising, the lab is still torn down and run.json
    still says how the run ended."""
    rdir = tmp_path / "r"
    rdir.mkdir()
    run = {"uuid": "u-2", "backend": "local", "started": "2026-01-02T03:04:05+00:00", "lab": "embedded",
           "host": "h"}
    results.write_run(rdir, run)
    boom = _Boom()
    sweep._finally_steps(boom, boom, boom, rdir, run, {"stopped": "ValueError: x"}, {"case": "c1"}, 1, 0,
                         time.monotonic())
    assert boom.closed
    err = capsys.readouterr().err
    assert "the last push failed: Invalid IPv6 URL" in err and "stopping pgwu metrics failed" in err
    saved = json.loads((rdir / "run.json").read_text())
    assert saved["stopped"]["why"] == "ValueError: x" and saved["stopped"]["case"] == "c1"
    assert saved["cases_done"] == 1 and "finished" not in saved


# ---- results directory errors: one line, exit 3, before any lab is built --------------------------

def _labs_of(pid: int) -> list[str]:
    """Labs (state files) whose creator is pid: what that process built and left."""
    out = []
    for f in Path("/run/gtplab/labs").glob("*.json"):
        try:
            if json.loads(f.read_text()).get("pid") == pid:
                out.append(f.stem)
        except (OSError, ValueError):
            pass
    return out


@pytest.mark.lab
def test_results_dir_not_a_directory_or_read_only_builds_nothing(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "gtplab-test-ro", str(ro)], check=True)
    try:
        for out, msg in ((f, "exists and is not a directory"), (ro / "run", "Read-only file system")):
            p = subprocess.Popen(GTPLAB + ["sweep", "--no-scale", "--sizes", "128", "--directions", "uplink", "--out", str(out)],
                                 cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            _, err = p.communicate(timeout=120)
            assert p.returncode == 3, err
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and msg in lines[0] and "Traceback" not in err, err
            assert _labs_of(p.pid) == []  # and the one line above: nothing was started
    finally:
        subprocess.run(["umount", str(ro)], check=False)
    assert not list(tmp_path.glob("**/.gtplab-write-test-*"))


def test_exit_codes_tell_a_write_error_from_a_conservation_failure():
    assert errors.ResultsWriteError.exit_code == 3 and errors.UserError.exit_code == 2


def test_interrupted_run_keeps_its_partial_pcap_and_says_where_it_stopped(tmp_path):
    """SIGTERM (or Ctrl-C) mid-case: the case's capture is kept under a name that says partial,
    and run.json says interrupted, by which signal, in which case (not finished)."""
    rdir = tmp_path / "r"
    (rdir / "pcaps").mkdir(parents=True)
    run = {"uuid": "u-3", "backend": "local", "started": "2026-01-02T03:04:05+00:00", "lab": "embedded",
           "host": "h"}
    results.write_run(rdir, run)
    pcap = rdir / "pcaps" / "case-uplink-128-port1.pcap"
    pcap.write_bytes(b"\xd4\xc3\xb2\xa1")
    boom = _Boom()
    sweep._finally_steps(boom, None, None, rdir, run, {"interrupted": True, "signal": "SIGTERM"},
                         {"case": "uplink-128", "pcap": str(pcap)}, 0, 0, time.monotonic())
    assert boom.closed and not pcap.exists()
    assert (rdir / "pcaps" / "case-uplink-128-port1.partial.pcap").read_bytes() == b"\xd4\xc3\xb2\xa1"
    saved = json.loads((rdir / "run.json").read_text())
    assert saved["interrupted"]["signal"] == "SIGTERM" and saved["interrupted"]["case"] == "uplink-128"
    assert "finished" not in saved and saved["cases_done"] == 0
