"""A sweep that ends badly still ends cleanly: SIGTERM (a `timeout`, a CI cancel) is handled like
Ctrl-C, a results directory that fills up stops the run with one clear line and its own exit status,
and in every case the lab is torn down and run.json says where and why the run stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.lib import REPO

pytestmark = pytest.mark.lab

GTPLAB = [sys.executable, "-m", "gtplab"]


def cpuidle_state() -> dict[str, str]:
    return {str(p): p.read_text().strip() for p in Path("/sys/devices/system/cpu").glob("cpu*/cpuidle/state*/disable")}


def lab_left(name: str) -> list[str]:
    left = [ns for ns in (f"gtplab-{name}-gen", f"gtplab-{name}-dut") if os.path.exists(f"/run/netns/{ns}")]
    left += [p for p in (f"/sys/fs/bpf/gtplab-{name}", f"/sys/fs/bpf/gtplab-{name}-gen",
                         f"/run/gtplab/labs/{name}.json") if os.path.exists(p)]
    return left


def test_sigterm_mid_sweep_is_handled_like_ctrl_c(tmp_path):
    out = tmp_path / "run"
    idle = cpuidle_state()
    p = subprocess.Popen(GTPLAB + ["sweep", "--no-scale", "--sizes", "128,1424", "--directions", "uplink", "--out", str(out)],
                         cwd=REPO, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            seen.append(line)
            if "trial at" in line:       # the first case is measuring
                break
        else:
            pytest.fail("the sweep never started a trial:\n" + "".join(seen))
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, "".join(seen) + err
    assert "Traceback" not in err and "terminated (SIGTERM)" in err
    run = json.loads((out / "run.json").read_text())
    assert run["interrupted"]["signal"] == "SIGTERM" and run["interrupted"]["case"].startswith("uplink-128")
    assert "finished" not in run and run["cases_done"] == 0
    assert lab_left(run["lab_name"]) == []
    assert cpuidle_state() == idle
    # the interrupted case's capture, if any, is named as partial
    assert not list((out / "pcaps").glob("case-uplink-128*port1.pcap"))
    assert not list(out.glob(".*.tmp*"))


def test_results_dir_filling_up_stops_the_run_cleanly(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "gtplab-test", str(mnt)], check=True)
    try:
        out = mnt / "run"
        p = subprocess.run(GTPLAB + ["sweep", "--no-scale", "--sizes", "1424,3024", "--directions", "downlink",
                                     "--out", str(out), "--pcap-limit", "1000", "--max-trials", "2"],
                           cwd=REPO, capture_output=True, text=True, timeout=300)
        assert p.returncode == 3, p.stderr
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("gtplab sweep: Couldn't write")]
        assert len(errors) == 1 and "No space left on device" in errors[0], p.stderr
        assert "Traceback" not in p.stderr
        assert not list(out.glob(".*.tmp*")) and not (out / ".gtplab-reserve").exists(), list(out.iterdir())
        run = json.loads((out / "run.json").read_text())
        assert "stopped" in run and "No space left" in run["stopped"]["why"], run
        assert lab_left(run["lab_name"]) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_bad_pushgateway_url_builds_nothing(tmp_path):
    p = subprocess.Popen(GTPLAB + ["sweep", "--no-scale", "--sizes", "128", "--out", str(tmp_path / "r"),
                                   "--pushgateway", "http://[::1"], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "pushgateway URL" in err and "Traceback" not in err
    # no lab of this sweep (other users' labs may come and go meanwhile: only its own are counted)
    mine = []
    for f in Path("/run/gtplab/labs").glob("*.json"):
        try:
            if json.loads(f.read_text()).get("pid") == p.pid:
                mine.append(f.name)
        except (OSError, ValueError):
            pass
    assert mine == [] and not (tmp_path / "r").exists()


def test_a_sigkilled_sweep_reads_cut_short(tmp_path):
    """Issue 35 item 6: SIGKILL after the first case (nothing of the sweep runs after it: no end
    record, no teardown). The report and `gtplab report` say "cut short: 1 of N cases", counted from
    cases.jsonl; before, the report said "cases 1" and run.json had no cases_done (it is written after
    each case now)."""
    from gtplab.results import store as results
    out = tmp_path / "run"
    log = open(tmp_path / "sweep.log", "w+")
    p = subprocess.Popen(GTPLAB + ["sweep", "--no-scale", "--sizes", "128,256", "--directions", "uplink",
                                   "--rate-mode", "fixed", "--rate", "20kpps", "--duration", "0.5", "--out", str(out)],
                         cwd=REPO, stderr=log, stdout=log, text=True)
    run = None
    try:
        deadline = time.monotonic() + 300
        jsonl = out / "cases.jsonl"
        # the first case is in cases.jsonl (appended and fsynced as it ends): kill at once
        while time.monotonic() < deadline and p.poll() is None:
            if jsonl.exists() and jsonl.read_text().count("\n") >= 1:
                break
            time.sleep(0.05)
        p.kill()
        p.wait(timeout=30)
        log.seek(0)
        assert jsonl.exists() and jsonl.read_text().count("\n") == 1, log.read()
        run = json.loads((out / "run.json").read_text())
        planned = run["cases_planned"]
        assert planned >= 2 and not {"finished", "interrupted", "stopped"} & set(run), run
        # run.json counts the cases as they finish: 1, or 0 when the kill came between the case's
        # line in cases.jsonl and run.json written again (cases.jsonl is the source of truth)
        assert run["cases_done"] in (0, 1), run
        rep = subprocess.run(GTPLAB + ["report", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert rep.returncode == 0, rep.stderr
        page = (out / "report" / "index.html").read_text()
        assert f"A: cut short: 1 of {planned} cases; this run ended without saying how" in page
        assert f"gtplab report: {out}: cut short: 1 of {planned} cases (the run was killed)" in rep.stderr
        assert results.ending(out) == {"how": "killed", "done": 1, "planned": planned,
                                       "cut_short": f"cut short: 1 of {planned} cases"}
    finally:
        if p.poll() is None:
            p.kill()
        log.close()
        # what the killed sweep could not do itself: its lab down (and the DUT CPUs' idle states back)
        name = (run or {}).get("lab_name")
        if name:
            subprocess.run(GTPLAB + ["lab", "down", "--name", name], cwd=REPO, capture_output=True, timeout=120)
    # (its idle states are the lab's to restore, with other labs on the machine: not compared here)
    assert run and lab_left(run["lab_name"]) == []
