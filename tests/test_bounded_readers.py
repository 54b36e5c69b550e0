"""Bounded input, reader by reader (issue 35 item 5; the limits: gtplab/bounded.py LIMITS): every file
or HTTP body gtplab reads for a user is refused in one line when it is endless (/dev/zero, a body that
never ends or trickles), too large (a file over its kind's limit, a 2 GiB sparse file), stalls, or is
a FIFO nobody writes; a legitimate one is still read.

Each reader runs in a forked child (_in_child) whose address space is capped at MEM above what it
had and which is killed at a deadline, so a reader without a bound fails its test (MemoryError, or
"still reading after N s") instead of taking the machine. The limits are made small for the test
(monkeypatch, before the fork) where an oversized input must be written.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
import tracemalloc

import pytest

from gtplab import bounded
from tests.lib import REPO
from tests.lib.http_server import hostile

GTPLAB = str(REPO / ".venv/bin/gtplab")
LIMIT = 1 << 20               # the bound a reader is given here, where one is patched in
MEM = 1 << 30                 # the child's address space above its start: an unbounded reader hits it
PEAK = 8 * LIMIT              # Python memory a bounded reader may hold while reading (a chunk, a line, a tail)
OVERSIZE = 48 << 20           # what the "oversized" server sends at most


# ---- running a reader: a child with a memory cap and a deadline ------------------------------------

def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) << 10
    return 0


def _in_child(call, seconds: float = 20) -> dict:
    """call() in a forked child: {"raised": exception class names (most derived first) or None,
    "msg": its message, "peak": peak traced Python memory, "took": seconds}. A child still running at
    `seconds` is killed and the test fails."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # the child: never returns into pytest
        try:
            os.close(r)
            cap = _vm_size() + MEM
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            tracemalloc.start()
            t0 = time.monotonic()
            out: dict = {"raised": None, "msg": ""}
            try:
                out["value"] = repr(call())[:200]
            except BaseException as e:          # noqa: BLE001 -- reported to the parent
                out = {"raised": [c.__name__ for c in type(e).__mro__], "msg": str(e)[:2000]}
            out["took"] = time.monotonic() - t0
            out["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + seconds
    try:
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"still reading after {seconds} s: no bound on the input")
            time.sleep(0.02)
        raw = b""
        while chunk := os.read(r, 65536):
            raw += chunk
    finally:
        os.close(r)
    assert raw, "the child died without a word"
    return json.loads(raw)


def _refused(out: dict, kind: str, *words: str) -> None:
    """One line, of class `kind`, naming `words`, within the memory bound."""
    assert out["raised"], f"taken: {out}"
    assert kind in out["raised"], f"{out['raised'][0]}: {out['msg']}"
    assert out["msg"] and "\n" not in out["msg"], repr(out["msg"])
    for w in words:
        assert w in out["msg"], out["msg"]
    assert out["peak"] < PEAK, f"peak {out['peak'] >> 20} MiB while reading: read to the end"


@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "fifo"
    os.mkfifo(p)
    return p


@pytest.fixture
def sparse(tmp_path):
    """A 2 GiB sparse file (zeros, no newline)."""
    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(2 << 30)
    return p


# ---- an HTTP server whose answers do not end ----------------------------------------------------------

@pytest.fixture
def server():
    """{mode: base URL}: tests/lib/http_server.hostile's servers (oversized capped at OVERSIZE)."""
    with hostile(OVERSIZE) as urls:
        yield urls


# ---- gtplab.dut.external.http_get: eUPF's REST API --------------------------------------------------

@pytest.mark.parametrize("mode", ["oversized", "trickle", "stall"])
def test_eupf_counters_api_answer_that_does_not_end(server, monkeypatch, mode):
    from gtplab.dut import external
    monkeypatch.setattr(bounded, "EUPF_API_BYTES", LIMIT)
    monkeypatch.setattr(external, "HTTP_TIMEOUT", 1.0)
    url = server[mode] + "/api/v1/xdp_stats"
    out = _in_child(lambda: external.http_get(url), 15)
    _refused(out, "OSError", f"eUPF API {url}",
             {"oversized": "larger than 1 MiB", "trickle": "past its deadline", "stall": "stalled"}[mode])
    assert out["took"] < 5


# ---- gtplab.results.export.query_range: `gtplab export` ----------------------------------------------

@pytest.mark.parametrize("mode", ["oversized", "trickle", "stall", "error-oversized"])
def test_export_query_answer_that_does_not_end(server, monkeypatch, mode):
    from gtplab.results import export
    monkeypatch.setattr(bounded, "PROMETHEUS_QUERY_BYTES", LIMIT)
    out = _in_child(lambda: export.query_range(server[mode], "up", 0, 60, 15, timeout=1.0), 15)
    _refused(out, "UserError", {"oversized": "larger than 1 MiB", "trickle": "past its deadline",
                                "stall": "stalled", "error-oversized": "Prometheus refused"}[mode])
    assert out["took"] < 5


def test_export_cli_on_a_trickling_prometheus(server, tmp_path):
    t0 = time.monotonic()
    p = subprocess.run([GTPLAB, "export", "--prometheus", server["trickle"], "--timeout", "1",
                        "-o", str(tmp_path / "out.csv")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p
    assert len(p.stderr.strip().splitlines()) == 1 and "past its deadline" in p.stderr, p.stderr
    assert not (tmp_path / "out.csv").exists(), "a half-written CSV left behind"
    assert time.monotonic() - t0 < 30


# ---- gtplab.pfcp.provision.read_bearer_file (and `gtplab pfcp`, the sweep's PFCP provisioning) -----

def test_bearer_file_dev_zero():
    from gtplab.pfcp import provision
    _refused(_in_child(lambda: provision.read_bearer_file("/dev/zero", False)), "UserError",
             "bearer file /dev/zero:1: a line longer than 4 KiB")


def test_bearer_file_over_its_limit(tmp_path, monkeypatch):
    from gtplab.pfcp import provision
    monkeypatch.setattr(bounded, "BEARER_FILE_BYTES", LIMIT)
    p = tmp_path / "bearers.txt"
    line = b"0x00000001 10.0.0.1 10.201.0.2 0x00000001\n"
    p.write_bytes(line * (2 * LIMIT // len(line)))
    _refused(_in_child(lambda: provision.read_bearer_file(str(p), False)), "UserError",
             f"bearer file {p}: larger than 1 MiB")


def test_bearer_file_sparse_2gib_and_fifo(sparse, fifo):
    from gtplab.pfcp import provision
    _refused(_in_child(lambda: provision.read_bearer_file(str(sparse), False)), "UserError", "longer than 4 KiB")
    _refused(_in_child(lambda: provision.read_bearer_file(str(fifo), False), 10), "UserError", "not a regular file")


def test_bearer_file_of_100k_bearers_is_read(tmp_path):
    """A legitimate file is still read whole: 100k bearers, with comments and the provisioned form."""
    from gtplab.pfcp import provision
    p = tmp_path / "bearers.txt"
    with open(p, "w") as f:
        f.write("# TEID UE SGW SGW_TEID\n\n")
        for i in range(100_000):
            f.write(f"{i + 1:#010x} 10.{i >> 16}.{(i >> 8) & 255}.{i & 255} 10.201.0.2 {i + 1:#010x}"
                    f" ue6=fd47:7470:{i >> 16:x}:{i & 0xffff:x}::/64  # 10.201.0.1 {i:#x} {i:#x}\n")
    b = provision.read_bearer_file(str(p), False)
    assert len(b) == 100_000 and b[-1].teid == 100_000 and b[5].ue6 is not None


# ---- gtplab.dut.pfcp: the provisioned bearer file kept for the results --------------------------------

@pytest.mark.parametrize("target", ["/dev/zero", "sparse", "oversized"])
def test_provisioned_bearer_file_that_does_not_end(tmp_path, sparse, monkeypatch, target):
    from gtplab.dut import pfcp
    monkeypatch.setattr(bounded, "BEARER_FILE_BYTES", LIMIT)
    big = tmp_path / "big.txt"
    big.write_bytes(b"0x1 10.0.0.1 10.201.0.2 0x1\n" * (2 * LIMIT // 28))

    class Prov:                                     # the UPF's answers written as an endless file
        def install(self, path, out):
            os.symlink({"/dev/zero": "/dev/zero", "sparse": str(sparse), "oversized": str(big)}[target], out)

    d = object.__new__(pfcp.PfcpDut)
    d.__dict__.update(prov=Prov(), _n=0, _dir=tmp_path / "pfcp", teid_file=None, provisioned_text=None)
    (tmp_path / "pfcp").mkdir()
    _refused(_in_child(lambda: d.install_bearers(str(tmp_path / "in.txt"))), "UserError",
             "provisioned bearer file", "larger than 1 MiB")


# ---- gtplab.observe.monitor: the state directory (--state-dir) and the daemons' logs ------------------

@pytest.mark.parametrize("name", ["pid", "cmdline", "monitor.json"])
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_monitor_state_file_that_does_not_end(tmp_path, fifo, name, target):
    from gtplab.observe import monitor
    state = tmp_path / "state"
    (state / "prometheus").mkdir(parents=True)
    (state / "prometheus" / "pid").write_text("1\n")
    (state / "prometheus" / "cmdline").write_text('["/usr/bin/prometheus"]')
    where = state / "monitor.json" if name == "monitor.json" else state / "prometheus" / name
    where.unlink(missing_ok=True)
    os.symlink("/dev/zero" if target == "/dev/zero" else fifo, where)
    call = (lambda: monitor.load_settings(str(state))) if name == "monitor.json" else \
        (lambda: monitor.running_pid(str(state), "prometheus"))
    _refused(_in_child(call, 10), "UserError", f"monitor state file {where}",
             "larger than 1 MiB" if target == "/dev/zero" else "not a regular file")


def test_monitor_status_cli_on_a_dev_zero_state(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.symlink("/dev/zero", state / "monitor.json")
    p = subprocess.run([GTPLAB, "monitor", "status", "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p
    assert len(p.stderr.strip().splitlines()) == 1 and "larger than 1 MiB" in p.stderr, p.stderr


@pytest.mark.parametrize("target", ["sparse", "fifo"])
def test_monitor_log_tail_of_a_huge_or_endless_log(sparse, fifo, target):
    from gtplab.observe import monitor
    log = sparse if target == "sparse" else fifo
    out = _in_child(lambda: monitor._log_tail(log), 10)
    assert out["raised"] is None, out
    assert out["peak"] < PEAK, f"peak {out['peak'] >> 20} MiB: the whole log read for its tail"


# ---- gtplab.lab.external.log_tail: an external UPF's log -------------------------------------------

@pytest.mark.parametrize("target", ["sparse", "fifo"])
def test_external_upf_log_tail_of_a_huge_or_endless_log(sparse, fifo, target):
    from gtplab.lab import external
    log = sparse if target == "sparse" else fifo
    out = _in_child(lambda: external.log_tail({"log": str(log)}), 10)
    assert out["raised"] is None, out
    assert out["peak"] < PEAK, f"peak {out['peak'] >> 20} MiB: the whole log read for its tail"


# ---- gtplab.lab.config.read_yaml: a lab config or sweep spec --------------------------------------

@pytest.mark.parametrize("target", ["/dev/zero", "sparse", "fifo"])
def test_lab_config_that_does_not_end(sparse, fifo, target):
    from gtplab.lab import config
    path = {"/dev/zero": "/dev/zero", "sparse": str(sparse), "fifo": str(fifo)}[target]
    _refused(_in_child(lambda: config.read_yaml(path), 10), "UserError", f"lab config {path}",
             "not a regular file" if target == "fifo" else "larger than 1024 KiB")


def test_pfcp_cli_with_a_fifo_for_lab_config(fifo):
    p = subprocess.run([GTPLAB, "pfcp", "--lab-config", str(fifo), "--duration", "1"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p
    assert len(p.stderr.strip().splitlines()) == 1 and "not a regular file" in p.stderr, p.stderr


# ---- gtplab.results.store: run.json and cases.jsonl (report, push, upftest table, analysis) ---------

@pytest.mark.parametrize("name", ["run.json", "cases.jsonl"])
def test_results_files_that_are_fifos(tmp_path, name):
    from gtplab.results import store
    d = tmp_path / "res"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({k: "x" for k in store.RUN_FIELDS}))
    (d / name).unlink(missing_ok=True)
    os.mkfifo(d / name)
    call = store.read_run if name == "run.json" else store.read_cases
    _refused(_in_child(lambda: call(d), 10), "ResultsError", f"{d / name}: not a regular file")


def test_cases_jsonl_over_its_limit_in_all(tmp_path, monkeypatch):
    """Lines each under the line bound, the file over the whole-file bound."""
    from gtplab.results import store
    monkeypatch.setattr(store, "MAX_CASES_BYTES", LIMIT)
    d = tmp_path / "res"
    d.mkdir()
    line = json.dumps({"case_id": "c", "direction": "uplink", "frame_size": 64, "pad": "x" * 4000}) + "\n"
    (d / "cases.jsonl").write_text(line * (2 * LIMIT // len(line)))
    _refused(_in_child(lambda: store.read_cases(d)), "ResultsError", "larger than 1 MiB")


def test_analysis_line_numbers_of_a_dev_zero_cases_file(tmp_path, monkeypatch):
    """gtplab.results.analysis.load reads cases.jsonl again for its line numbers: to the store's
    bounds too (the file may have changed since read_cases)."""
    from gtplab.results import analysis, store
    d = tmp_path / "res"
    d.mkdir()
    (d / "run.json").write_text(json.dumps({k: "x" for k in store.RUN_FIELDS}))
    os.symlink("/dev/zero", d / "cases.jsonl")
    monkeypatch.setattr(store, "read_cases", lambda *a, **k: [])
    monkeypatch.setattr(store, "MAX_LINE_BYTES", LIMIT)
    _refused(_in_child(lambda: analysis.load(d)), "ResultsError", "longer than 1 MiB")


# ---- gtplab.conformance.cli.read: `gtplab conformance table DIR` -------------------------------------

@pytest.mark.parametrize("name", ["run.json", "cases.jsonl"])
@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_conformance_table_of_files_that_do_not_end(tmp_path, monkeypatch, fifo, name, target):
    from gtplab.conformance import cli
    monkeypatch.setattr(bounded, "RUN_JSON_BYTES", LIMIT)
    monkeypatch.setattr(bounded, "CASE_LINE_BYTES", LIMIT)
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text('{"kind": "conformance"}')
    (d / name).unlink(missing_ok=True)
    os.symlink("/dev/zero" if target == "/dev/zero" else fifo, d / name)
    _refused(_in_child(lambda: cli.read(str(d)), 10), "UserError", f"table: {d}/{name}",
             "not a regular file" if target == "fifo" else "larger than 1 MiB" if name == "run.json" else "longer than 1 MiB")


def test_conformance_table_cli_of_dev_zero(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    os.symlink("/dev/zero", d / "run.json")
    p = subprocess.run([GTPLAB, "conformance", "table", str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p
    assert len(p.stderr.strip().splitlines()) == 1 and "larger than 16 MiB" in p.stderr, p.stderr
