"""One sweep writes one results directory (issue 26 item 4): the directory's claim
(gtplab.results.store.claim: an flock on a file in it, held for the run, released on exit and when
the owner dies), the second sweep's clear error naming the owner, and the run id on every line of
cases.jsonl that the readers (report, push, the sweep's own CSV) check against run.json. No lab.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gtplab import cli
from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.measure import plan, sweep
from gtplab.results import analysis, push, report
from gtplab.results import store as results
from tests.lib import REPO
from tests.lib.fake_runner import FakeRunner
from tests.lib.synthetic_results import make_case, write_results

OWNER = {"run_uuid": "run-a", "pid": os.getpid(), "host": "here", "started": "2026-01-01T00:00:00+00:00"}

HOLDER = """
import sys, time
from gtplab.results import store
c = store.claim(sys.argv[1], {"run_uuid": sys.argv[2], "pid": __import__("os").getpid(), "host": "h",
                              "started": "now"})
print("claimed", flush=True)
time.sleep(float(sys.argv[3]))
c.release()
print("released", flush=True)
"""


def holder(d: Path, uuid: str, hold: float) -> subprocess.Popen:
    """A process that claims d, says so, holds it for `hold` s and releases it."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(d), uuid, str(hold)], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line == "claimed", p.stderr.read()
    return p


def test_a_claimed_directory_is_refused_with_its_owner_named(tmp_path):
    d = tmp_path / "out"
    c = results.claim(d, OWNER)
    assert (d / results.LOCK_FILE).is_file() and json.loads((d / results.LOCK_FILE).read_text()) == OWNER
    assert results.contents(d) == []                        # the lock file does not make it "not empty"
    with pytest.raises(results.ClaimError, match=rf"results directory {d} is being written by sweep run-a "
                                                 rf"\(pid {os.getpid()} on here, since 2026-01-01"):
        results.claim(d, {**OWNER, "run_uuid": "run-b"})
    assert json.loads((d / results.LOCK_FILE).read_text()) == OWNER        # the owner's record untouched
    c.release()
    assert not (d / results.LOCK_FILE).exists()
    c.release()                                             # twice: harmless
    with results.claim(d, {**OWNER, "run_uuid": "run-b"}):
        assert json.loads((d / results.LOCK_FILE).read_text())["run_uuid"] == "run-b"
    assert list(d.iterdir()) == []


def test_a_claim_dies_with_its_owner(tmp_path):
    d = tmp_path / "out"
    p = holder(d, "run-dead", 600)
    try:
        with pytest.raises(results.ClaimError, match=rf"sweep run-dead \(pid {p.pid} on h"):
            results.claim(d, OWNER)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert (d / results.LOCK_FILE).exists()             # SIGKILL: the file stays, the lock does not
    with results.claim(d, OWNER):
        assert json.loads((d / results.LOCK_FILE).read_text()) == OWNER


def test_of_two_processes_racing_for_a_new_directory_one_wins(tmp_path):
    d = tmp_path / "new" / "out"
    code = ("import sys, time\nfrom gtplab.results import store\n"
            "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
            "try:\n    c = store.claim(sys.argv[1], {'run_uuid': sys.argv[3]})\n"
            "except store.ClaimError as e:\n    print('refused', e); sys.exit(1)\n"
            "time.sleep(1.5); c.release(); print('won')\n")
    for attempt in range(5):
        start = time.time() + 1.0
        ps = [subprocess.Popen([sys.executable, "-c", code, str(d), str(start), f"r{i}"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        outs = [p.communicate(timeout=60) for p in ps]
        rcs = sorted(p.returncode for p in ps)
        if rcs == [0, 1]:
            refused = next(o for o, _ in outs if o.startswith("refused"))
            assert "is being written by sweep r" in refused
            return
        assert rcs == [0, 0], outs          # both lost: impossible; both won one after the other: retry
    pytest.fail("the two processes never overlapped in 5 attempts (a very busy host?)")


def test_a_second_sweep_into_a_claimed_out_fails_before_building_anything(tmp_path, monkeypatch, capsys):
    """`gtplab sweep --out D` while another sweep writes D: exit 2, the owner named, no lab built,
    D as the owner left it."""
    from gtplab.traffic import backend
    d = tmp_path / "out"
    p = holder(d, "run-owner", 600)
    built = []
    monkeypatch.setattr(backend, "choose", lambda *a, **k: SimpleNamespace(
        kind="local", open=lambda: built.append(1)))
    try:
        rc = cli.main(["sweep", "--no-scale", "--sizes", "128", "--directions", "uplink", "--out", str(d)])
        err = capsys.readouterr().err
        assert rc == 2 and built == []
        assert f"results directory {d} is being written by sweep run-owner (pid {p.pid} on h" in err, err
        assert sorted(x.name for x in d.iterdir()) == [results.LOCK_FILE]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # the owner is gone: the directory is claimed by the next sweep (and released when it fails)
    monkeypatch.setattr(backend, "choose", lambda *a, **k: SimpleNamespace(
        kind="local", open=lambda: (_ for _ in ()).throw(UserError("no lab today"))))
    rc = cli.main(["sweep", "--no-scale", "--sizes", "128", "--directions", "uplink", "--out", str(d)])
    assert rc == 2 and "no lab today" in capsys.readouterr().err
    assert not d.exists()                    # nothing written: the claim released, the empty dir removed


def test_the_sweep_holds_its_claim_for_the_run_and_releases_it(tmp_path):
    d, claim = sweep._results_dir(str(tmp_path / "out"), "run-x")
    try:
        with pytest.raises(UserError, match="is being written by sweep run-x"):
            sweep._results_dir(str(d), "run-y")
    finally:
        claim.release()
    assert list(d.iterdir()) == []
    d2, claim2 = sweep._results_dir(str(d), "run-y")
    claim2.release()


# ------------------------------------------------------------------------------------------ run ids

def test_every_case_line_carries_the_run_id(tmp_path):
    cfg = labconfig.load("embedded")
    spec = plan.validate({"frame_sizes": [128, 256], "directions": ["uplink"], "rate_mode": "search",
                           "pcap_limit": 0, "search": {"latency_at": []}})
    cases, _ = plan.plan(spec)
    run = {"uuid": "3f2c9a1e-0000-4000-8000-00000000000a", "started": "2026-01-01T00:00:00+00:00",
           "backend": "local", "lab": "embedded", "host": "h", "cpu_layout": None, "notes": []}
    results.write_run(tmp_path, run)
    sw = sweep._Sweep(SimpleNamespace(), tmp_path, run, time.monotonic())
    sw.run_cases(FakeRunner(), cases, spec, cfg)
    lines = [json.loads(x) for x in (tmp_path / "cases.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and all(c["run_uuid"] == run["uuid"] for c in lines)
    assert len(results.read_cases(tmp_path, run["uuid"])) == 2


def test_a_case_of_another_run_in_cases_jsonl_is_refused_by_every_reader(tmp_path):
    d = write_results(tmp_path / "r", [dict(make_case("uplink", 64), run_uuid="3f2c9a1e-0000-4000-8000-000000000001"),
                                       make_case("uplink", 128)])          # a line from before run ids: read
    run = json.loads((d / "run.json").read_text())
    assert run["uuid"] == "3f2c9a1e-0000-4000-8000-000000000001"
    assert len(analysis.load(d).cases) == 2
    foreign = dict(make_case("downlink", 64), run_uuid="ffffffff-0000-4000-8000-000000000009")
    with open(d / "cases.jsonl", "a") as f:
        f.write(json.dumps(foreign) + "\n")
    msg = (rf"cases.jsonl:3: a case of run ffffffff-0000-4000-8000-000000000009, not of this directory's run "
           rf"{run['uuid']} \(run.json\): two runs wrote this file")
    with pytest.raises(results.ResultsError, match=msg):
        results.read_cases(d, run["uuid"])
    with pytest.raises(results.ResultsError, match=msg):
        report.build_report(d)
    assert not (d / "report").exists()
    with pytest.raises(results.ResultsError, match=msg):
        push.push_results_dir(str(d), "http://127.0.0.1:9")
    # the sweep's own append (cases.csv is rewritten from cases.jsonl) stops at a foreign line
    with pytest.raises(results.ResultsError, match="two runs wrote this file"):
        results.append_case(d, dict(make_case("downlink", 128), run_uuid=run["uuid"]))
    assert len(results.read_cases(d)) == 4              # without a run id to check: every line
