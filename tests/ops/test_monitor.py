"""gtplab monitor / push / export against a real local stack (Prometheus, Pushgateway, node-exporter from
Debian's packages) on random loopback ports with a unique state dir; always `monitor down` afterwards.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import time

import pytest
import yaml

from tests.lib.monitor_stack import (SWEEP, Stack, free_ports, gateway_groups, gateway_value, gtplab, make_case,
                                     make_run, pid_alive, prom_query, running_stack, write_results_dir)
from tests.lib import REPO


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with running_stack(tmp_path_factory.mktemp("monitor")) as s:
        yield s


def _our_processes(marker: str) -> list[int]:
    """pids of live processes whose command line mentions marker (our unique state/data dir)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if marker.encode() in f.read() and pid_alive(int(d)):
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def _refused(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, port)) != 0


# ---- monitor up / status / down ----------------------------------------------------------------

def test_up_status_down(tmp_path):
    s = Stack(tmp_path)
    try:
        s.up()
        cp = gtplab("monitor", "status", "--state-dir", str(s.state_dir), "--json")
        assert cp.returncode == 0, cp.stderr
        st = json.loads(cp.stdout)
        assert {n: v["state"] for n, v in st.items()} == {
            "node-exporter": "up", "pushgateway": "up", "prometheus": "up"}
        assert st["prometheus"]["url"] == s.prometheus and st["pushgateway"]["url"] == s.gateway
        pids = s.pids()
        assert pids == {n: v["pid"] for n, v in st.items()}
        # loopback only: bound to 127.0.0.1, so another loopback address is refused
        for port in (s.prom_port, s.gw_port, s.node_port):
            assert not _refused("127.0.0.1", port) and _refused("127.0.0.2", port)
        conf = yaml.safe_load((s.state_dir / "prometheus" / "prometheus.yml").read_text())
        jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
        assert jobs["pushgateway"]["honor_labels"] is True
        assert jobs["pgwu"]["static_configs"][0]["targets"] == [f"127.0.0.1:{s.pgwu_port}"]
        assert conf["global"]["scrape_interval"] == "1s"
        # up again: nothing new started
        s.up()
        assert s.pids() == pids
        # Prometheus scrapes its targets: node-exporter and the gateway come up
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            up = {r["metric"]["job"]: r["value"][1] for r in prom_query(s.prometheus, "up")}
            # every target scraped at least once (each has its own offset within the interval)
            if up.get("node") == "1" and up.get("pushgateway") == "1" and "pgwu" in up:
                break
            time.sleep(0.5)
        assert up.get("node") == "1" and up.get("pushgateway") == "1", up
        assert up.get("pgwu") == "0"  # nothing listens on the pgwu target in this test
    finally:
        cp = s.down()
    assert cp.returncode == 0 and "stopped" in cp.stdout, cp.stdout + cp.stderr
    assert not any(pid_alive(p) for p in pids.values())
    assert not _our_processes(str(s.state_dir))
    cp = gtplab("monitor", "status", "--state-dir", str(s.state_dir))
    assert cp.returncode == 1 and cp.stdout.count(" down ") == 3, cp.stdout
    assert "nothing was running" in s.down().stdout


def test_up_refuses_a_busy_port(tmp_path):
    s = Stack(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        s.gw_port = busy.getsockname()[1]
        cp = gtplab(*s.up_args())
    assert cp.returncode == 2
    assert cp.stderr.strip().count("\n") == 0 and f"port {s.gw_port}" in cp.stderr, cp.stderr
    assert not _our_processes(str(s.state_dir)) and not _our_processes(str(s.data_dir))


def test_up_failing_part_way_leaves_nothing_running(tmp_path):
    s = Stack(tmp_path)
    # node-exporter and the gateway start, then Prometheus refuses this retention and exits (gtplab
    # checks its form before starting anything; its range, Prometheus' own, only Prometheus knows)
    cp = gtplab(*s.up_args(), "--retention", "300000y")
    try:
        assert cp.returncode == 2, cp.stdout + cp.stderr
        assert "prometheus exited at start" in cp.stderr, cp.stderr
        assert not _our_processes(str(s.state_dir)) and not _our_processes(str(s.data_dir))
        assert not any((s.state_dir / n / "pid").exists() for n in ("prometheus", "pushgateway", "node-exporter"))
    finally:
        s.down()


def test_down_never_signals_a_process_it_did_not_start(tmp_path):
    s = Stack(tmp_path)
    other = subprocess.Popen(["sleep", "60"])
    try:
        d = s.state_dir / "pushgateway"
        d.mkdir(parents=True)
        (d / "pid").write_text(f"{other.pid}\n")  # e.g. a stale pid file whose pid was reused
        (d / "cmdline").write_text(json.dumps(["/usr/bin/prometheus-pushgateway", "--web.listen-address=x"]))
        cp = s.down()
        assert cp.returncode == 0 and "nothing was running" in cp.stdout
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_bad_arguments_are_one_clear_error(tmp_path):
    cp = gtplab("monitor", "up", "--state-dir", str(tmp_path / "s"), "--pgwu-target", "nope")
    assert cp.returncode == 2 and "HOST:PORT" in cp.stderr and cp.stderr.count("\n") == 1
    assert not (tmp_path / "s").exists()


# ---- metrics ------------------------------------------------------------------------------------

def test_case_metrics_follow_prometheus_conventions():
    from prometheus_client import generate_latest

    from gtplab.results.push import case_registry
    text = generate_latest(case_registry(make_run(), make_case(0, "uplink", 64))).decode()
    cp = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and cp.stdout.strip() == "" and cp.stderr.strip() == "", cp.stdout + cp.stderr
    for name in ("gtplab_case_received_packets_per_second", "gtplab_case_received_bytes_per_second",
                 "gtplab_case_loss_ratio", "gtplab_case_latency_seconds", "gtplab_case_dut_program_seconds_per_packet",
                 "gtplab_case_goal_lower_bound_packets_per_second", "gtplab_case_latency_at_pdr_seconds"):
        assert f"# TYPE {name} gauge" in text


def test_push_case_grouping_key_and_values(stack):
    from gtplab.results.push import push_case
    run, case = make_run(), make_case(7, "downlink", 128, flows=16, checksum="off")
    assert push_case(stack.gateway, run, case)
    (group,) = gateway_groups(stack.gateway, run["uuid"]).values()
    assert group["labels"] == {
        "job": "gtplab_sweep", "action": "downlink", "uuid": run["uuid"], "case_id": case["case_id"],
        "frame_size": "128", "direction": "downlink", "flows": "16", "checksum": "off", "ip": "4", "n3": "4",
        "backend": "local"}
    assert gateway_value(group, "gtplab_case_received_packets_per_second") == case["rx_pps"]
    assert gateway_value(group, "gtplab_case_received_bytes_per_second", layer="l1") == pytest.approx(case["rx_bps_l1"] / 8)
    assert gateway_value(group, "gtplab_case_latency_seconds", stat="p99") == pytest.approx(27e-6)
    assert gateway_value(group, "gtplab_case_dut_program_seconds_per_packet") == pytest.approx(61.28e-9)
    assert gateway_value(group, "gtplab_case_info", flow_mode="multi", rate_mode="search", goal="NDR",
                         limit="dut") == 1
    # the search's result per goal, the goal code as the label (MLRsearch, issue 26)
    for code in ("NDR", "PDR0.5"):
        g = case["goals"][code]
        assert gateway_value(group, "gtplab_case_goal_lower_bound_packets_per_second", goal=code) == g["lower_pps"]
        assert gateway_value(group, "gtplab_case_goal_upper_bound_packets_per_second", goal=code) == g["upper_pps"]
        assert gateway_value(group, "gtplab_case_goal_conditional_throughput_packets_per_second",
                             goal=code) == g["conditional_pps"]
        assert gateway_value(group, "gtplab_case_goal_regular", goal=code) == 1
        assert gateway_value(group, "gtplab_case_goal_info", goal=code, limit="dut", irregular="") == 1
    assert gateway_value(group, "gtplab_case_search_disturbed_trials") == 1
    assert gateway_value(group, "gtplab_case_latency_at_pdr_seconds", load_percent="90", stat="p99") == \
        pytest.approx(99e-6)
    assert not push_case("http://127.0.0.1:9", run, case, timeout=1)  # nothing listens: False, no raise


def test_gateway_goes_away_mid_sweep_and_nothing_is_lost(stack, tmp_path):
    """The sweep's loop: write the case to disk, then push. Gateway down for cases 2-3, back for 4."""
    from gtplab.observe import monitor
    from gtplab.results import store as results
    from gtplab.results.push import Pusher
    run = make_run()
    rdir = tmp_path / "results"
    results.write_run(rdir, run)
    warnings: list[str] = []
    pusher = Pusher(stack.gateway, run, results_dir=str(rdir), warn=warnings.append)
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]

    results.append_case(rdir, cases[0])
    assert pusher.push(cases[0])
    assert monitor.stop(str(stack.state_dir), "pushgateway")  # the gateway goes away
    for case in cases[1:3]:
        results.append_case(rdir, case)
        assert not pusher.push(case)
    assert len(warnings) == 1, warnings  # said once
    assert str(rdir) in warnings[0] and "gtplab push" in warnings[0]
    assert [c["case_id"] for c in results.read_cases(rdir)] == [c["case_id"] for c in cases[:3]]
    cp = gtplab("push", str(rdir), "--gateway", stack.gateway, "--timeout", "1")
    assert cp.returncode == 1 and "pushed 0 of 3" in cp.stdout, cp.stdout + cp.stderr

    stack.up()  # restarts only the gateway; case 0 comes back from its persistence file
    assert set(gateway_groups(stack.gateway, run["uuid"])) == {cases[0]["case_id"]}
    results.append_case(rdir, cases[3])
    assert pusher.push(cases[3])  # held cases 1 and 2 go first
    assert pusher.pending == [] and pusher.finish()
    assert len(warnings) == 1
    assert set(gateway_groups(stack.gateway, run["uuid"])) == {c["case_id"] for c in cases}


def test_gtplab_push_pushes_a_results_dir(stack, tmp_path):
    run = make_run(backend="trex")
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    write_results_dir(tmp_path / "r", run, cases)  # by hand, from docs/results.md
    cp = gtplab("push", str(tmp_path / "r"), "--gateway", stack.gateway)
    assert cp.returncode == 0, cp.stderr
    assert f"pushed 4 of 4 case(s)" in cp.stdout
    groups = gateway_groups(stack.gateway, run["uuid"])
    assert set(groups) == {c["case_id"] for c in cases}
    for c in cases:
        assert gateway_value(groups[c["case_id"]], "gtplab_case_loss_ratio") == pytest.approx(c["loss_ratio"])
        assert groups[c["case_id"]]["labels"]["backend"] == "trex"
    # and Prometheus scrapes them from the gateway with the grouping key as labels
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        res = prom_query(stack.prometheus, f'gtplab_case_info{{uuid="{run["uuid"]}"}}')
        if len(res) == 4:
            break
        time.sleep(0.5)
    assert sorted((r["metric"]["action"], r["metric"]["frame_size"]) for r in res) == sorted(
        (d, str(fs)) for d, fs in SWEEP)


@pytest.mark.parametrize("content, message", [
    (None, "run.json: no such file"),
    ('{"case_id": "a", "direction": "uplink", "frame_size": 64}\nnot json\n', "cases.jsonl:2: not JSON"),
    ('{"case_id": "a", "frame_size": 64}\n', "cases.jsonl:1: missing direction"),
])
def test_push_rejects_a_bad_results_dir(tmp_path, content, message):
    if content is not None:
        write_results_dir(tmp_path, make_run(), [])
        (tmp_path / "cases.jsonl").write_text(content)
    cp = gtplab("push", str(tmp_path), "--gateway", "http://127.0.0.1:9")
    assert cp.returncode == 2 and message in cp.stderr and cp.stderr.count("\n") == 1, cp.stderr


def test_results_files_follow_the_contract(tmp_path):
    from gtplab.results import store as results
    run = make_run()
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    results.write_run(tmp_path, run)
    for c in cases:
        results.append_case(tmp_path, c)
    assert json.loads((tmp_path / "run.json").read_text()) == run
    assert [json.loads(line) for line in (tmp_path / "cases.jsonl").read_text().splitlines()] == cases
    with open(tmp_path / "cases.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    assert float(rows[0]["latency_us.p99"]) == cases[0]["latency_us"]["p99"]
    assert rows[0]["dut.drops_by_reason.drop_unknown_teid"] == str(cases[0]["dut"]["drops_by_reason"]["drop_unknown_teid"])
    assert rows[1]["dut.drops_by_reason.drop_unknown_teid"] == ""  # 1518 B: no drops, column still there


# ---- export -------------------------------------------------------------------------------------

def test_export_writes_csv(stack, tmp_path):
    from gtplab.results.push import push_case
    run = make_run()
    assert push_case(stack.gateway, run, make_case(0, "uplink", 64))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not prom_query(stack.prometheus, f'gtplab_case_info{{uuid="{run["uuid"]}"}}'):
        time.sleep(0.5)
    time.sleep(3)  # a few more scrapes, so the CPU rate has samples
    out = tmp_path / "export.csv"
    cp = gtplab("export", "--prometheus", stack.prometheus, "--start", "now-2m", "--step", "1s",
                "--rate-window", "5s", "-o", str(out))
    assert cp.returncode == 0, cp.stderr
    with open(out) as f:
        rows = list(csv.DictReader(f))
    queries = {r["query"] for r in rows}
    assert {"cpu_seconds_per_second", "results"} <= queries
    cpus = {r["cpu"] for r in rows if r["query"] == "cpu_seconds_per_second"}
    with open("/proc/stat") as f:  # the online CPUs, as node-exporter sees them
        online = {line.split()[0][3:] for line in f if line.startswith("cpu") and line[3].isdigit()}
    assert cpus == online
    mine = [r for r in rows if r["query"] == "results" and r["uuid"] == run["uuid"]
            and r["__name__"] == "gtplab_case_received_packets_per_second"]
    assert mine and float(mine[-1]["value"]) == make_case(0, "uplink", 64)["rx_pps"]

    wide = tmp_path / "wide.csv"
    cp = gtplab("export", "--prometheus", stack.prometheus, "--start", "now-1m", "--format", "wide",
                "--query", f'rx=gtplab_case_received_packets_per_second{{uuid="{run["uuid"]}"}}', "-o", str(wide))
    assert cp.returncode == 0, cp.stderr
    with open(wide) as f:
        header, *data = list(csv.reader(f))
    assert header[:2] == ["timestamp", "time"] and len(header) == 3 and header[2].startswith("rx{")
    assert data and data[-1][2] == "900000"

    cp = gtplab("export", "--prometheus", stack.prometheus, "--query", "bad=rate(", "-o", str(tmp_path / "x.csv"))
    assert cp.returncode == 2 and "parse error" in cp.stderr and not (tmp_path / "x.csv").exists()
    cp = gtplab("export", "--start", "now", "--end", "now-1h", "-o", str(tmp_path / "y.csv"))
    assert cp.returncode == 2 and "before" in cp.stderr


def test_pusher_with_the_gateway_down_all_sweep_long(tmp_path):
    from gtplab.results.push import Pusher
    (port,) = free_ports(1)  # nothing listens there
    run = make_run()
    warnings: list[str] = []
    pusher = Pusher(f"http://127.0.0.1:{port}", run, results_dir=str(tmp_path), timeout=1, warn=warnings.append)
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    assert not pusher.case_started(cases[0], 0, len(cases))
    assert [pusher.push(c) for c in cases] == [False] * 4
    assert len(warnings) == 1 and "the sweep goes on" in warnings[0]
    assert pusher.pending == cases and pusher.pushed == 0
    assert not pusher.finish()
    assert pusher.pending == cases  # still held, in order
    assert len(warnings) == 2 and f"4 case(s) not pushed; they are in {tmp_path}" in warnings[1]


# ---- "sweep running" groups of sweeps that were killed -------------------------------------------

KILLED_SWEEP = """
import json, sys, time
from gtplab.results.push import Pusher
run = json.loads(sys.argv[2])
p = Pusher(sys.argv[1], run, timeout=5)
assert p.case_started({"case_id": "c0", "direction": "uplink", "frame_size": 64, "flows": 1,
                       "checksum": "on"}, index=0, total=4)
print("running", flush=True)
time.sleep(600)
"""


def _live_uuids(gateway: str) -> set[str]:
    from gtplab.results.push import live_groups
    return {g["labels"].get("uuid") for g in live_groups(gateway)}


def _killed_sweep(gateway: str) -> dict:
    """A real process that pushes its "sweep running" group, then dies by SIGKILL mid-sweep (no
    finish()): the group stays behind, as after `kill -9` or an OOM kill."""
    import sys
    run = make_run()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SWEEP, gateway, json.dumps(run)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line == "running\n", line + proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert run["uuid"] in _live_uuids(gateway)
    return run


def test_stale_running_group_is_cleared_by_the_next_push(stack):
    from gtplab.results.push import Pusher
    dead = _killed_sweep(stack.gateway)
    # a sweep that is alive (this process) keeps its group through the clean-up
    alive_run = make_run()
    alive = Pusher(stack.gateway, alive_run)
    assert alive.case_started(make_case(0, "uplink", 64), index=0, total=2)
    # the next sweep's first push removes the dead one's group, not the live one's
    nxt = Pusher(stack.gateway, make_run())
    assert nxt.push(make_case(1, "uplink", 64))
    uuids = _live_uuids(stack.gateway)
    assert dead["uuid"] not in uuids and alive_run["uuid"] in uuids
    assert alive.finish()
    assert alive_run["uuid"] not in _live_uuids(stack.gateway)


def test_stale_running_group_is_cleared_by_gtplab_push(stack, tmp_path):
    dead = _killed_sweep(stack.gateway)
    run = make_run()
    write_results_dir(tmp_path / "r", run, [make_case(0, "uplink", 64)])
    cp = gtplab("push", str(tmp_path / "r"), "--gateway", stack.gateway)
    assert cp.returncode == 0, cp.stderr
    assert f"removed the stale 'sweep running' group of run {dead['uuid']}" in cp.stderr
    assert dead["uuid"] not in _live_uuids(stack.gateway)


def test_stale_running_group_is_cleared_by_monitor_up_after_a_gateway_restart(stack):
    """The gateway keeps groups across restarts (persistence file): `monitor up`, which restarts it,
    removes the dead sweep's group once the gateway is back."""
    from gtplab.observe import monitor
    dead = _killed_sweep(stack.gateway)
    assert monitor.stop(str(stack.state_dir), "pushgateway")
    cp = gtplab(*stack.up_args())
    assert cp.returncode == 0, cp.stderr
    assert f"removed the stale 'sweep running' group of run {dead['uuid']}" in cp.stdout
    assert dead["uuid"] not in _live_uuids(stack.gateway)


def test_running_group_of_another_host_is_kept_until_it_is_old(stack):
    """An owner this host cannot check (another host) is left alone unless its last push is older
    than a day; a group without an owner (older gtplab) is judged by its age the same way."""
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
    from gtplab.results.push import LIVE_JOB, UNCHECKABLE_STALE_AFTER_S, clear_stale_live_groups
    reg = CollectorRegistry()
    Gauge("gtplab_sweep_owner_info", "owner", ["host", "boot_id", "pid", "pid_start"],
          registry=reg).labels(host="elsewhere", boot_id="x", pid="1", pid_start="1").set(1)
    uuid = make_run()["uuid"]
    push_to_gateway(stack.gateway, job=LIVE_JOB, registry=reg, grouping_key={"uuid": uuid, "backend": "trex"})
    assert clear_stale_live_groups(stack.gateway) == [] and uuid in _live_uuids(stack.gateway)
    later = time.time() + UNCHECKABLE_STALE_AFTER_S + 60
    assert clear_stale_live_groups(stack.gateway, now=later) == [{"uuid": uuid, "backend": "trex"}]
    assert uuid not in _live_uuids(stack.gateway)


def test_a_gateway_that_lost_pushes_gets_them_again(stack):
    """SIGKILL loses what the gateway took since it last wrote its persistence file. Made certain
    here: killed, its persistence file removed, restarted. The sweep's next push sees the new start
    time and pushes every earlier case of the run again."""
    from gtplab.results.push import Pusher
    run = make_run()
    pusher = Pusher(stack.gateway, run)
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    assert pusher.push(cases[0]) and pusher.push(cases[1])
    os.kill(stack.pids()["pushgateway"], 9)
    deadline = time.monotonic() + 10
    while pid_alive(stack.pids()["pushgateway"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    (stack.data_dir / "pushgateway" / "pushgateway.data").unlink(missing_ok=True)
    stack.up()
    assert gateway_groups(stack.gateway, run["uuid"]) == {}  # lost with the gateway
    assert pusher.push(cases[2])
    assert set(gateway_groups(stack.gateway, run["uuid"])) == {c["case_id"] for c in cases[:3]}
    assert pusher.restarts_seen == 1
    assert pusher.finish()


def test_pusher_works_with_a_gateway_without_the_status_api():
    """A gateway (or a proxy in front of one) that answers 404 on /api/v1/status still gets every
    push; only the restart check is off."""
    from gtplab.results.push import Pusher
    from tests.lib.http_server import serving
    got = []

    def put(path, body):
        got.append(path)
        return 200
    with serving(get=lambda path: (404, b""), put=put) as url:
        p = Pusher(url, make_run(), warn=lambda m: None)
        assert p.push(make_case(0, "uplink", 64)) and p.push(make_case(1, "uplink", 128))
        assert len(got) == 2 and p.pending == []


def test_gtplab_push_of_a_torn_cases_file_pushes_what_is_whole(stack, tmp_path):
    """A run killed while writing cases.jsonl leaves its last line torn: `gtplab push` pushes every
    whole case and names the torn line, instead of refusing the directory."""
    run = make_run()
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    rdir = tmp_path / "torn"
    write_results_dir(rdir, run, cases)
    with open(rdir / "cases.jsonl", "a") as f:
        f.write(json.dumps(make_case(9, "uplink", 256))[:40])
    cp = gtplab("push", str(rdir), "--gateway", stack.gateway)
    assert cp.returncode == 0, cp.stderr
    assert f"line {len(cases) + 1} of {rdir}/cases.jsonl is torn" in cp.stderr
    assert f"pushed {len(cases)} of {len(cases)}" in cp.stdout
    assert set(gateway_groups(stack.gateway, run["uuid"])) == {c["case_id"] for c in cases}


@pytest.mark.parametrize("when", ["before finish", "while finish waits"])
def test_finish_holds_the_run_when_the_gateway_dies_before_persisting(stack, tmp_path, when):
    """The run's last pushes are safe only once the gateway has written them to its persistence
    file: finish() waits for that (1 s with gtplab monitor). A gateway killed meanwhile leaves the
    run's cases held and finish() saying `gtplab push`; once it is back, pushing again brings every
    case in. (Before, finish() returned True and the cases were gone with the gateway.)
    "before finish": killed between the run's last push and finish(), found by the 30-minute soak:
    finish() took the unreachable status API for "no status API" and the last case was lost."""
    import threading
    from gtplab.results.push import Pusher
    run = make_run()
    warnings: list[str] = []
    pusher = Pusher(stack.gateway, run, results_dir=str(tmp_path), warn=warnings.append)
    cases = [make_case(i, d, fs) for i, (d, fs) in enumerate(SWEEP)]
    for c in cases:
        assert pusher.push(c)
    done: list[bool] = []
    t = threading.Thread(target=lambda: done.append(pusher.finish()))
    if when == "while finish waits":
        t.start()
        time.sleep(0.2)
    os.kill(stack.pids()["pushgateway"], 9)
    (stack.data_dir / "pushgateway" / "pushgateway.data").unlink(missing_ok=True)
    try:
        if when == "before finish":
            time.sleep(0.2)
            t.start()
        t.join(30)
        assert done == [False] and [c["case_id"] for c in pusher.pending] == [c["case_id"] for c in cases]
        assert "gtplab push" in warnings[-1]
    finally:
        stack.up()      # the module's other tests need the gateway, whatever failed here
    assert pusher.finish()
    assert set(gateway_groups(stack.gateway, run["uuid"])) == {c["case_id"] for c in cases}
