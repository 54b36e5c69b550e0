"""`gtplab upftest` keeps and reports what it measured whatever ends the run (issue 30 item 5, issue 35
items 1-2): run.json written at the start and each case appended as it finishes; SIGINT, SIGTERM
and errors marked in run.json, the lab torn down; an N4 request the UPF never answers recorded with
its exchange; one run per results directory; `upftest table` shows every such run as a row; bad
arguments are one line, before anything is built. The UPF is a fake here (a stand-in lab, or the
real harness on tests/lib/fake_upf.py's PFCP peer): fast, no namespaces."""

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

from gtplab import cli as gcli
from gtplab.pfcp import messages as m
from gtplab.pfcp.node import Node, Timers
from gtplab.results import store
from gtplab.upftests import cli, handover, record
from gtplab.upftests.harness import Cases, Upf
from tests.lib import REPO
from tests.lib.fake_upf import FakeUpf

PLANNED = 7


class _Lab:
    """Upf.open's stand-in: no lab, the cases a fake kind adds, close() recorded (the teardown)."""

    def __init__(self, on_close=None):
        self.shared: list[dict] = []        # the other labs on its CPUs (gtplab.lab.claims.holders)
        self.lab = SimpleNamespace(name="fake-lab", cpus=None, shared_with=lambda: list(self.shared))
        self.on_case = None
        self.closed = False
        self.on_close = on_close

    def cases(self):
        return Cases(self.on_case)

    def close(self):
        if self.on_close:
            self.on_close()
        self.closed = True
        return []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Kind:
    """A test kind that finishes n cases, checking at each what is already on disk, then ends as told:
    "return", "sigint", "sigterm", "error"."""

    def __init__(self, n: int, then: str = "return", out: Path | None = None, verdicts: tuple = ()):
        self.n, self.then, self.out, self.seen, self.verdicts = n, then, out, [], verdicts

    @staticmethod
    def planned(**_):
        return PLANNED

    def run(self, upf, **kw):
        cases = upf.cases()
        for i in range(self.n):
            if self.out is not None:
                run = json.loads((self.out / "run.json").read_text())
                lines = (self.out / "cases.jsonl").read_text().splitlines() if i else []
                self.seen.append((run["status"], len(lines)))
            v = self.verdicts[i] if i < len(self.verdicts) else "pass"
            cases.append({"case_id": f"usage-c{i}", "kind": "usage", "verdict": v,
                          **({"why": f"not decided: premise of c{i}"} if v == "not decided" else {})})
        if self.then == "sigint":
            raise KeyboardInterrupt
        if self.then == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)
            raise AssertionError("SIGTERM did not stop the run")
        if self.then == "error":
            raise RuntimeError("the generator fell over")
        return cases


@pytest.fixture
def fake_lab(monkeypatch):
    lab = _Lab()
    opened = []

    def open_(cls, cfg, lab_name=None):
        opened.append(cfg.name)
        lab.cfg = cfg
        return lab
    monkeypatch.setattr(Upf, "open", classmethod(open_))
    lab.opened = opened
    return lab


def _upftest(monkeypatch, kind: _Kind, *args) -> int:
    monkeypatch.setitem(cli.KINDS, "usage", kind)
    return gcli.main(["upftest", "usage", *args])


def _run(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def test_run_json_is_written_at_the_start_and_each_case_as_it_finishes(tmp_path, monkeypatch, fake_lab):
    out = tmp_path / "r"
    kind = _Kind(3, out=out)
    assert _upftest(monkeypatch, kind, "-o", str(out)) == 0
    # what the kind saw on disk before each case: the run started, the cases before it written
    assert kind.seen == [("running", 0), ("running", 1), ("running", 2)]
    run = _run(out)
    assert run["status"] == "complete" and run["cases_done"] == 3 and run["cases_planned"] == PLANNED
    assert run["test"] == "usage" and run["lab_config"] == "embedded-pfcp" and run["command"].startswith("gtplab ")
    assert run["lab"] == "fake-lab" and run["started"] and run["ended"]
    cases = store.read_cases(out, run["uuid"])
    assert [c["case_id"] for c in cases] == ["usage-c0", "usage-c1", "usage-c2"]
    assert all(c["run_uuid"] == run["uuid"] for c in cases)
    assert fake_lab.closed and not list(out.glob(".gtplab-*"))


@pytest.mark.parametrize("verdicts,code,verdict", [
    (("pass", "not decided", "pass"), 0, "not decided"),     # no failure of the UPF: exit 0, counted apart
    (("pass", "not decided", "fail"), 1, "fail"),
    (("pass", "pass", "pass"), 0, "pass"),
])
def test_not_decided_cases_are_counted_apart_and_do_not_fail_the_run(tmp_path, monkeypatch, fake_lab, capsys,
                                                                       verdicts, code, verdict):
    out = tmp_path / "r"
    assert _upftest(monkeypatch, _Kind(3, verdicts=verdicts), "-o", str(out)) == code
    run = _run(out)
    assert run["summary"]["verdict"] == verdict
    assert run["summary"]["counts"]["not decided"] == verdicts.count("not decided")
    o = capsys.readouterr()
    if "not decided" in verdicts:
        assert f": {verdict} (" in o.out and "1 not decided)" in o.out, o
        assert "  usage-c1: not decided: premise of c1\n" in o.err, o


def test_ctrl_c_marks_the_run_interrupted_after_the_cases_it_finished(tmp_path, monkeypatch, fake_lab, capsys):
    out = tmp_path / "r"
    assert _upftest(monkeypatch, _Kind(3, "sigint"), "-o", str(out)) == 130
    run = _run(out)
    assert run["status"] == "interrupted" and run["interrupted"]["signal"] == "SIGINT"
    assert run["cases_done"] == 3 and len(store.read_cases(out, run["uuid"])) == 3
    assert fake_lab.closed
    assert "interrupted (SIGINT) after 3 of 7 cases" in record.table([str(out)])
    assert "Traceback" not in capsys.readouterr().err


def _drive(out: str, then: str, second_sigterm: bool = False) -> None:
    """In a child process (a SIGTERM must not reach pytest): `gtplab upftest usage -o out` on a fake
    lab whose kind finishes 3 cases and then ends as `then`; prints whether the lab was closed.
    second_sigterm: the teardown gets a SIGTERM of its own."""
    def again():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)
    lab = _Lab(on_close=again if second_sigterm else None)
    Upf.open = classmethod(lambda cls, cfg, lab_name=None: lab)
    cli.KINDS["usage"] = _Kind(3, then)
    code = gcli.main(["upftest", "usage", "-o", out])
    print("lab closed" if lab.closed else "lab NOT closed", file=sys.stderr)
    sys.exit(code)


def _child(out: Path, then: str, second: bool = False) -> subprocess.CompletedProcess:
    code = f"from tests.upftests.test_upftest_runs import _drive; _drive({str(out)!r}, {then!r}, {second!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("second", [False, True], ids=["sigterm", "sigterm-twice"])
def test_sigterm_tears_down_and_marks_the_run_interrupted(tmp_path, second):
    out = tmp_path / "r"
    p = _child(out, "sigterm", second)
    assert p.returncode == 143, p.stderr
    assert "Traceback" not in p.stderr and "terminated (SIGTERM)" in p.stderr
    assert "lab closed" in p.stderr, p.stderr          # a second SIGTERM does not cut the teardown short
    run = _run(out)
    assert run["status"] == "interrupted" and run["interrupted"]["signal"] == "SIGTERM"
    assert run["cases_done"] == 3 and len(store.read_cases(out, run["uuid"])) == 3
    assert "interrupted (SIGTERM) after 3 of 7 cases" in record.table([str(out)])
    assert not (out / store.LOCK_FILE).exists()


def test_an_error_is_recorded_with_its_text(tmp_path, monkeypatch, fake_lab):
    out = tmp_path / "r"
    with pytest.raises(RuntimeError):          # a bug is a traceback, but its run says what happened
        _upftest(monkeypatch, _Kind(2, "error"), "-o", str(out))
    run = _run(out)
    assert run["status"] == "error" and run["error"]["text"] == "the generator fell over"
    assert run["cases_done"] == 2 and fake_lab.closed
    assert "error after 2 of 7 cases: the generator fell over" in record.table([str(out)])


# -- an N4 request the UPF never answers: the real harness and node on the fake UPF -------------------

def _harness_on(fake: FakeUpf) -> Upf:
    """The real Upf (its sessions, requests, close) on a fake UPF's PFCP, without a lab."""
    node = Node(fake.addr, node_id="cp.gtplab.test", local="127.0.0.1", port=0,
                timers=Timers(t1=0.05, n1=3, heartbeat=0))
    node.associate()
    u = Upf.__new__(Upf)
    u.cfg, u.name, u.on_case, u.agent, u.probe = None, "fake", None, None, None
    u.sessions, u._by_cp, u._next, u._closed, u._warnings = {}, {}, 0, False, []
    u._seid_base = 0xA5 << 32
    u.node = node
    u.pcfg = SimpleNamespace(n3="10.201.0.1")
    u.prov = SimpleNamespace(close=node.close, warnings=[], cfg=u.pcfg, node=node)
    u.be = SimpleNamespace(close=lambda: None)
    u.lab = SimpleNamespace(name="fake-lab", cpus=None, shared_with=list, addressing=SimpleNamespace(
        ue=lambda i: f"10.64.0.{i + 1}", local_teid=lambda i: i + 1, sgw=lambda i: "10.201.0.16",
        sgw_teid=lambda i: 0x100 + i))
    return u


def test_a_session_establishment_never_answered_is_an_error_with_its_exchange(tmp_path, monkeypatch, capsys):
    fake = FakeUpf()
    fake.silent = {m.SESS_EST_REQ}                 # as Open5GS drops a request it cannot parse
    try:
        upf = _harness_on(fake)
        monkeypatch.setattr(Upf, "open", classmethod(lambda cls, cfg, lab_name=None: upf))
        out = tmp_path / "r"
        assert gcli.main(["upftest", "handover", "-o", str(out)]) == 2     # a PfcpError: as every N4 failure
    finally:
        fake.close()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("gtplab upftest: ")] == \
        [ln for ln in err.splitlines() if "no answer from UPF" in ln], err
    run = _run(out)
    assert run["status"] == "error" and "no answer from UPF" in run["error"]["text"]
    x = run["error"]["exchange"]
    assert x["message"] == "session establishment request" and x["answer"] == "no answer"
    assert x["sends"] == 4 and isinstance(x["seq"], int)
    assert fake.seen[(m.SESS_EST_REQ, x["seq"])] == 4           # what the UPF got: 4 copies of that request
    assert run["cases_done"] == 0 and run["cases_planned"] == handover.planned()
    t = record.table([str(out)])
    assert "| PGW-U | **error after 0 of 2 cases: no answer to session establishment request after 4 sends** |" in t, t


# -- one run per results directory ---------------------------------------------------------------------

def test_a_second_run_into_the_same_results_directory_is_refused(tmp_path, monkeypatch, fake_lab, capsys):
    out = tmp_path / "r"
    assert _upftest(monkeypatch, _Kind(2), "-o", str(out)) == 0
    first = _run(out)
    before = (out / "cases.jsonl").read_text()
    capsys.readouterr()
    fake_lab.opened.clear()
    assert _upftest(monkeypatch, _Kind(5), "-o", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds run.json of upftest usage run {first['uuid']}" in err[0], err
    assert fake_lab.opened == [] and (out / "cases.jsonl").read_text() == before and _run(out) == first


def test_a_results_directory_another_run_is_writing_is_refused(tmp_path, monkeypatch, fake_lab, capsys):
    out = tmp_path / "r"
    owner = {"run_uuid": "other-run", "pid": 1, "host": "h", "started": "t", "what": "upftest handover"}
    with store.claim(out, owner):                 # another upftest is writing it (before its run.json)
        assert _upftest(monkeypatch, _Kind(2), "-o", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is being written by upftest handover other-run" in err[0], err
    assert fake_lab.opened == [] and store.contents(out) == []


# -- the table ----------------------------------------------------------------------------------------

def _recorded(d: Path, status: str, n: int, upf: str = "U", test: str = "usage", **end) -> Path:
    run = {"uuid": f"u-{d.name}", "started": "t", "backend": "local", "lab": "l", "host": "h", "kind": "upftest",
           "test": test, "upf": upf, "lab_config": "c", "cases_planned": PLANNED}
    rec = record.Recorder(d, run)
    rec.start()
    for i in range(n):
        rec.case({"case_id": f"{test}-c{i}", "verdict": "pass"})
    if status != "running":
        rec.end(status, **end)
    return d


def test_table_shows_runs_that_did_not_complete_and_directories_without_run_json(tmp_path, monkeypatch, capsys):
    from gtplab.pfcp.errors import PfcpTimeout
    e = PfcpTimeout("UE 10.64.0.1: no answer from UPF 10.100.0.2:8805 to session establishment request (seq 3) "
                    "after 4 sends, T1 3 s, N1 3")
    dirs = [_recorded(tmp_path / "ok", "complete", 7, upf="A"),
            _recorded(tmp_path / "cut", "interrupted", 3, upf="B", signal="SIGTERM"),
            _recorded(tmp_path / "n4", "error", 0, upf="C", test="n4", error=e),
            _recorded(tmp_path / "killed", "running", 2, upf="D")]     # SIGKILLed: no end recorded
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "run.json").write_text("{not json")
    args = [str(d) for d in dirs] + [str(tmp_path / "empty"), str(tmp_path / "bad")]
    assert gcli.main(["upftest", "table", *args]) == 0
    t = capsys.readouterr().out
    assert "| A | **pass** (7/7 pass) | not run |" in t, t
    assert "| B | **interrupted (SIGTERM) after 3 of 7 cases** (3 pass) | not run |" in t, t
    assert "| C | not run | **error after 0 of 7 cases: no answer to session establishment request after 4 sends** |" in t, t
    assert "| D | **cut short (no end recorded) after 2 of 7 cases** (2 pass) | not run |" in t, t
    assert f"| {tmp_path / 'empty'} | no run.json |  |" in t, t
    assert f"| {tmp_path / 'bad'} | {tmp_path / 'bad' / 'run.json'}: not JSON" in t, t
    # the exchange without the harness: what the node's own timeout says (an association request's)
    assert record.exchange_of(e) == {"message": "session establishment request", "seq": 3, "sends": 4,
                                     "answer": "no answer"}


def test_gtplab_report_of_a_killed_upftest_run_writes_its_report_saying_it_was_cut(tmp_path, capsys):
    """A SIGKILLed run never wrote report.md: `gtplab report DIR` writes it from its records, cut short
    after the cases it finished; a complete run's is not called cut short; -o is one line."""
    killed = _recorded(tmp_path / "killed", "running", 2, test="policing")
    done = _recorded(tmp_path / "ok", "complete", PLANNED)
    (done / "report.md").unlink()
    assert not (killed / "report.md").exists()
    assert gcli.main(["report", str(killed)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(killed / "report" / "index.html")
    assert err.strip() == f"gtplab report: {killed}: cut short: 2 of {PLANNED} cases (the run was killed)"
    md = (killed / "report.md").read_text()
    assert f"**cut short**: 2 pass, 0 fail, 0 not supported of 2 cases" in md, md
    assert f"**cut short (no end recorded) after 2 of {PLANNED} cases**" in md, md
    assert "cut short" in (killed / "report" / "index.html").read_text()
    assert gcli.main(["report", str(done)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.strip() == str(done / "report" / "index.html")
    assert "**pass**" in (done / "report.md").read_text() and "cut short" not in (done / "report.md").read_text()
    assert gcli.main(["report", str(done), "-o", str(tmp_path / "elsewhere")]) == 2
    assert capsys.readouterr().err.strip() == (f"gtplab report: {done}: the report of a gtplab upftest run is "
                                               "written in the run's own directory; drop -o")
    assert not (tmp_path / "elsewhere").exists()


def test_table_of_a_directory_that_does_not_exist_is_one_line(tmp_path, capsys):
    assert gcli.main(["upftest", "table", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gtplab upftest: table: {tmp_path / 'nope'}: no such directory"]


# -- bad arguments: one line, nothing built, nothing written -------------------------------------------

@pytest.mark.parametrize("sizes", ["0", "-64", "100000", "512,x"])
def test_bad_sizes_are_one_line_before_anything(tmp_path, monkeypatch, fake_lab, capsys, sizes):
    out = tmp_path / "r"
    monkeypatch.setitem(cli.KINDS, "policing", _Kind(1))
    assert gcli.main(["upftest", "policing", f"--sizes={sizes}", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gtplab upftest: --sizes '{sizes}': "), err
    assert fake_lab.opened == [] and not out.exists()


def test_a_binary_lab_config_is_one_line(tmp_path, monkeypatch, fake_lab, capsys):
    cfg = tmp_path / "lab.yaml"
    cfg.write_bytes(bytes(range(256)) * 4)
    out = tmp_path / "r"
    assert _upftest(monkeypatch, _Kind(1), "--lab-config", str(cfg), "-o", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gtplab upftest: lab config {cfg}: not a text (YAML) file"], err
    assert fake_lab.opened == [] and not out.exists()


@pytest.mark.lab                        # mounts a tmpfs
@pytest.mark.parametrize("how", ["read-only", "full"])
def test_a_results_directory_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, fake_lab, capsys, how):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    opts = "ro,size=64k" if how == "read-only" else "size=64k"
    subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "gtplab-test-upftest", str(mnt)], check=True)
    try:
        if how == "full":
            (mnt / "r").mkdir()
            with open(mnt / "fill", "wb", buffering=0) as f:       # until the disk is full
                try:
                    while True:
                        f.write(bytes(4096))
                except OSError:
                    pass
        out = mnt / "r"
        existed = out.exists()
        code = _upftest(monkeypatch, _Kind(1), "-o", str(out))
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 3, err                 # ResultsWriteError: as the sweep's (gtplab.errors)
        assert len(err) == 1 and ("Read-only file system" if how == "read-only" else "No space left") in err[0], err
        assert fake_lab.opened == []
        # nothing half-done: no run.json, no claim, no reserve left
        assert not existed or store.contents(out) == [] and not (out / store.LOCK_FILE).exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# -- the lab's teardown ends a `pgwu pfcp` agent left on its pins ---------------------------------------

@pytest.mark.lab                        # teardown releases the lab's CPU claims (/run/gtplab, root's)
def test_lab_teardown_stops_a_pgwu_agent_left_on_its_pin_dir(tmp_path):
    """An owner killed before its teardown (SIGKILL) leaves the agent it started (`pgwu -d PIN pfcp
    --listen 127.0.0.1:0`, in the host's namespace, outside the lab's); `gtplab lab down` ends it,
    and only it: a pgwu on another lab's pins is left alone."""
    from gtplab.lab import topology
    name = f"t-agent-{os.getpid()}"
    pins = str(tmp_path / f"gtplab-{name}")          # a stand-in pin dir: teardown removes it
    os.mkdir(pins)
    agent = tmp_path / "pgwu"                        # a process named pgwu, as the agent is
    agent.write_text(f"#!{os.path.realpath(sys.executable)}\nimport time\ntime.sleep(60)\n")
    agent.chmod(0o755)
    mine = subprocess.Popen([str(agent), "-d", pins, "pfcp", "--listen", "127.0.0.1:0"])
    other = subprocess.Popen([str(agent), "-d", pins + "-gen", "pfcp", "--listen", "127.0.0.1:0"])
    try:
        deadline = time.monotonic() + 5
        while topology._pgwu_on_pins(pins) != [mine.pid] and time.monotonic() < deadline:
            time.sleep(0.02)
        removed = topology.teardown({"name": name, "netns": {}, "pin_dirs": {"pgwu": pins}})
        assert mine.wait(timeout=10) is not None
        assert f"pgwu process {mine.pid} on {pins}" in removed and not os.path.exists(pins)
        assert other.poll() is None
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_cpus_shared_with_another_lab_are_recorded_and_reported(tmp_path, monkeypatch, fake_lab, capsys):
    """--share-cpus and the CPU layout reach the lab config the lab is built from; who else held the
    lab's CPUs is in run.json, on each case it overlapped, in report.md and in `upftest table`."""
    other = {"lab": "sweep01", "pid": 4242, "cpus": [1]}

    class Sharing(_Kind):
        def run(self, upf, **kw):
            cases = upf.cases()
            cases.append({"case_id": "usage-c0", "kind": "usage", "verdict": "pass"})
            fake_lab.shared.append(other)       # the other lab came while the run went on
            cases.append({"case_id": "usage-c1", "kind": "usage", "verdict": "pass"})
            return cases
    out = tmp_path / "r"
    assert _upftest(monkeypatch, Sharing(2), "-o", str(out), "--share-cpus", "--generator-cpus", "0",
                    "--dut-cpus", "1") == 0
    assert fake_lab.cfg.lab["share_cpus"] is True
    assert fake_lab.cfg.cpus == {"generator": "0", "dut": "1"}
    run, cases = _run(out), store.read_cases(out)
    assert run["share_cpus"] is True and run["cpus_shared_with"] == []
    assert [c["cpus_shared_with"] for c in cases] == [[], ["lab sweep01 (pid 4242) on CPU(s) 1"]]
    shared = "CPUs shared with lab sweep01 (pid 4242) on CPU(s) 1 during 1 of 2 cases"
    assert shared in (out / "report.md").read_text()
    capsys.readouterr()
    assert gcli.main(["upftest", "table", str(out)]) == 0
    assert "CPUs shared with lab sweep01" in capsys.readouterr().out


def test_cpus_this_host_has_not_are_one_line_before_anything(tmp_path, monkeypatch, fake_lab, capsys):
    out = tmp_path / "r"
    assert _upftest(monkeypatch, _Kind(1), "-o", str(out), "--generator-cpus", "64") == 2
    err = capsys.readouterr().err
    assert "CPU(s) 64 not available here" in err and len(err.strip().splitlines()) == 1
    assert not fake_lab.opened and not out.exists()
