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


# ---- a run cut short says so (issue 35, item 6) ---------------------------------------------------

def _planned(d: Path, planned: int, **end) -> None:
    run = json.loads((d / "run.json").read_text())
    run.update(cases_planned=planned, **end)
    (d / "run.json").write_text(json.dumps(run))


def _top(index) -> str:
    page = Path(index).read_text()
    return page[: page.index("<h2 id='measurement'>")]


def test_a_killed_run_reads_cut_short_in_the_report_and_in_gtplab_report(tmp_path):
    """A sweep killed by SIGKILL (or the OOM killer, or a reboot) writes no end record: its run.json
    says only what it planned. ending() counts what finished in cases.jsonl; the report's top and
    `gtplab report` say "cut short: N of M cases" (before: "cases 3", no word that it was cut)."""
    cases = sweep_cases()[:3]
    d = write_results(tmp_path / "r", cases)
    _planned(d, 14)
    top = _top(report.build_report(d))
    assert "A: cut short: 3 of 14 cases; this run ended without saying how</b> (killed" in top
    assert "<td>3 <b>(cut short: 3 of 14 cases)</b></td>" in top
    p = subprocess.run(GTPLAB + ["report", str(d), "-o", str(tmp_path / "rep")], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"gtplab report: {d}: cut short: 3 of 14 cases (the run was killed)" in p.stderr.splitlines()
    end = results.ending(d)
    assert end == {"how": "killed", "done": 3, "planned": 14, "cut_short": "cut short: 3 of 14 cases"}
    # a torn last line is not a finished case: 3 still
    _tear(d)
    assert results.ending(d)["cut_short"] == "cut short: 3 of 14 cases"


@pytest.mark.parametrize("end, how, cut", [
    ({"finished": "2026-01-02T03:09:00+00:00"}, "finished", None),
    ({"interrupted": {"signal": "SIGINT", "case": "x"}}, "interrupted", "cut short: 3 of 14 cases"),
    ({"stopped": {"why": "Couldn't write case x: No space left on device", "case": "x"}}, "stopped",
     "cut short: 3 of 14 cases"),
])
def test_every_ending_but_a_normal_one_reads_cut_short(tmp_path, end, how, cut):
    d = write_results(tmp_path / "r", sweep_cases()[:3])
    _planned(d, 14, **end)
    top = _top(report.build_report(d))
    assert ("cut short" in top) == (cut is not None) and (cut is None or f"A: {cut}; this run" in top)
    assert results.ending(d) == {"how": how, "done": 3, "planned": 14, "cut_short": cut}


def test_a_run_still_being_written_or_of_an_older_format_is_not_called_cut(tmp_path):
    d = write_results(tmp_path / "r", sweep_cases()[:3])
    assert "cut short" not in _top(report.build_report(d))
    assert results.ending(d)["how"] == "unknown"          # no cases_planned: nothing to say it against
    _planned(d, 14)
    with results.claim(d, {"pid": os.getpid(), "run_uuid": "x"}):
        assert "A: still running</b>: 3 of 14 cases so far" in _top(report.build_report(d))
        assert results.ending(d) == {"how": "running", "done": 3, "planned": 14, "cut_short": None}
    assert results.ending(d)["how"] == "killed"            # the claim's owner is gone


def test_results_files_are_read_with_bounded_memory(tmp_path):
    """Issue 35 item 5: run.json and cases.jsonl are read a bounded piece at a time, whatever they
    are: /dev/zero in their place is one error naming the file (and the line), not all the memory."""
    import resource
    d = write_results(tmp_path / "r", sweep_cases()[:2])
    (d / "cases.jsonl").rename(d / "cases.ok")
    (d / "cases.jsonl").symlink_to("/dev/zero")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(results.ResultsError, match=r"cases.jsonl:1: a line longer than 16 MiB: read no further"):
        results.read_cases(d)
    assert results.torn_last_line(d) is None
    (d / "run.json").rename(d / "run.ok")
    (d / "run.json").symlink_to("/dev/zero")
    with pytest.raises(results.ResultsError, match=r"run.json: larger than 16 MiB: not a run.json"):
        results.read_run(d)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 128 * 1024     # kB
    # the same files, whole again, read as before (the torn-line and run-id checks are above)
    for name in ("cases.jsonl", "run.json"):
        (d / name).unlink()
    (d / "cases.ok").rename(d / "cases.jsonl")
    (d / "run.ok").rename(d / "run.json")
    assert len(results.read_cases(d)) == 2 and results.read_run(d)["lab"] == "veth-lab"
