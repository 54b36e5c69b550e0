"""The namespace lab (gtplab/lab/topology.py): topology, isolation between labs, cleanup after a crash, and GTP-U
traffic through the PGW-U in both directions. Needs root; creates namespaces with unique names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from gtplab.lab import awake
from gtplab.lab import topology as labmod
from gtplab.lab.topology import Lab, LabError
from gtplab.traffic.backend import engine_client
from tests.lib.lab import (add_bearer, dut_counters, leftovers, load_bearers, packet_socket, run_in, send_frames,
                           wait_for)
from tests.lib import REPO

pytestmark = pytest.mark.lab

GTPLAB = [sys.executable, "-m", "gtplab"]


@pytest.fixture(scope="module")
def pgwu_lab():
    with Lab.up() as lab:
        yield lab


def links_by_name(lab: Lab) -> dict[str, dict]:
    return {ln["ifname"]: ln for ln in lab.links()}


def test_topology(pgwu_lab):
    lab = pgwu_lab
    st = labmod.lab_status(lab.name)
    assert st["status"] == "up"
    assert all(ns["exists"] for ns in st["netns"].values())
    links = links_by_name(lab)
    for p in lab.ports:
        g, d = links[p.ifname], links[p.dut_ifname]
        assert g["netns"] == lab.gen_ns and d["netns"] == lab.dut_ns
        assert (g["address"], d["address"]) == (p.mac, p.dut_mac)
        assert g["mtu"] == d["mtu"] == labmod.DEFAULT_MTU
        assert len(p.ifname) <= 15 and lab.name in p.ifname and lab.name in p.dut_ifname
        # the DUT runs the PGW-U natively; the generator ports have the pass program
        assert d["xdp"]["mode"] == 1, d.get("xdp")
        assert g["xdp"]["mode"] == 1 and g["xdp"]["prog"]["name"] == "gtplab_pass"
    names = {links[p.dut_ifname]["xdp"]["prog"]["name"] for p in lab.ports}
    assert names == {"xdp_access", "xdp_sgi"}
    # addressing contract on the DUT
    out = subprocess.run(["ip", "-n", lab.dut_ns, "-j", "addr"], capture_output=True, text=True, check=True)
    addrs = {a["ifname"]: [i["local"] for i in a["addr_info"] if i["family"] == "inet"]
             for a in json.loads(out.stdout)}
    assert addrs[lab.ports[0].dut_ifname] == ["10.201.0.1"] and addrs[lab.ports[1].dut_ifname] == ["10.202.0.1"]
    route = subprocess.run(["ip", "-n", lab.dut_ns, "route", "get", "198.18.0.9"], capture_output=True,
                           text=True, check=True).stdout
    assert "via 10.202.0.2" in route
    neigh = subprocess.run(["ip", "-n", lab.dut_ns, "neigh", "show", "10.201.0.79"], capture_output=True,
                           text=True, check=True).stdout
    assert lab.ports[0].mac in neigh and "PERMANENT" in neigh
    fwd = subprocess.run(["ip", "netns", "exec", lab.dut_ns, "sysctl", "-n", "net.ipv4.ip_forward"],
                         capture_output=True, text=True, check=True).stdout
    assert fwd.strip() == "1"
    assert Path(lab.pin_dir, "stats").exists()


def recv_matching(sock, match, count, timeout=3.0) -> list[bytes]:
    """Frames the socket receives (not our own outgoing ones) for which match(Ether) is true."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            data, addr = sock.recvfrom(65535)
        except TimeoutError:
            continue
        if addr[2] == 4:  # PACKET_OUTGOING
            continue
        if match(Ether(data)):
            got.append(data)
    return got


def test_traffic_both_directions(pgwu_lab):
    lab, a = pgwu_lab, pgwu_lab.addressing
    acc, sgi = lab.ports
    b = add_bearer(lab, 0)
    n = 5
    inner = IP(src=b["ue"], dst=a.pdn(7), ttl=64, id=1) / UDP(sport=4000, dport=5000) / (b"u" * 100)
    ul = (Ether(src=acc.mac, dst=acc.dut_mac) / IP(src=b["sgw"], dst=a.dut_access, id=2)
          / UDP(sport=2152, dport=2152) / GTP_U_Header(teid=b["teid"], gtp_type=255) / inner)
    dl = (Ether(src=sgi.mac, dst=sgi.dut_mac) / IP(src=a.pdn(7), dst=b["ue"], ttl=64, id=3)
          / UDP(sport=5000, dport=4000) / (b"d" * 100))
    before = dut_counters(lab)

    with packet_socket(lab, 1) as rx1:
        send_frames(lab, 0, [bytes(ul)] * n)
        got = recv_matching(rx1, lambda e: IP in e and e[IP].dst == a.pdn(7) and UDP in e, n)
    assert len(got) == n, f"{len(got)}/{n} uplink packets came out decapsulated on port 1"
    e = Ether(got[0])
    assert e.dst == sgi.mac and e.src == sgi.dut_mac
    assert GTP_U_Header not in e and e[IP].src == b["ue"] and bytes(e[UDP].payload) == b"u" * 100

    with packet_socket(lab, 0) as rx0:
        send_frames(lab, 1, [bytes(dl)] * n)
        got = recv_matching(rx0, lambda e: GTP_U_Header in e, n)
    assert len(got) == n, f"{len(got)}/{n} downlink packets came out encapsulated on port 0"
    e = Ether(got[0])
    assert e.dst == acc.mac and e.src == acc.dut_mac
    assert (e[IP].src, e[IP].dst, e[UDP].dport) == (a.dut_access, b["sgw"], 2152)
    assert e[GTP_U_Header].teid == b["sgw_teid"] and e[GTP_U_Header].gtp_type == 255
    e_in = e[GTP_U_Header].payload
    assert e_in[IP].dst == b["ue"] and bytes(e_in[UDP].payload) == b"d" * 100

    after = dut_counters(lab)
    for key in ("UL_FWD/redirect", "DL_FWD/redirect"):
        assert after.get(key, 0) - before.get(key, 0) == n, (key, before, after)
    # and pgwu's own report parses
    assert lab.pgwu_json("stats")


def test_two_labs_do_not_collide():
    with Lab.up(dut="pass") as one, Lab.up(dut="pass") as two:
        assert one.name != two.name
        mine = {one.gen_ns, one.dut_ns, one.pin_dir, one.gen_pin_dir}
        theirs = {two.gen_ns, two.dut_ns, two.pin_dir, two.gen_pin_dir}
        assert not mine & theirs
        # same addresses, separate namespaces: both carry traffic on their own
        for lab in (one, two):
            with packet_socket(lab, 0) as rx:
                frame = Ether(src=lab.ports[0].dut_mac, dst=lab.ports[0].mac) / IP(dst="10.201.0.2") / UDP()
                run_in(lab, "dut", _send_raw, lab.ports[0].dut_ifname, bytes(frame))
                assert recv_matching(rx, lambda e: UDP in e, 1)
        # a name in use is refused and the lab that has it is untouched
        with pytest.raises(LabError, match="exists already"):
            Lab.up(name=one.name, dut="pass")
        assert labmod.lab_status(one.name)["status"] == "up"
        assert all(ns["exists"] for ns in labmod.lab_status(one.name)["netns"].values())
    assert leftovers(one.name) == [] and leftovers(two.name) == []


def _send_raw(ifname: str, frame: bytes) -> None:
    import socket
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        s.send(frame)


def test_down_leaves_nothing():
    lab = Lab.up(dut="pgwu")
    assert leftovers(lab.name)  # the check below would see a lab
    lab.down()
    assert leftovers(lab.name) == []
    lab.down()  # again: nothing to do, no error


def test_cli_up_status_down():
    out = subprocess.run(GTPLAB + ["lab", "up", "--dut", "drop"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    name = out.stdout.strip()
    try:
        st = subprocess.run(GTPLAB + ["lab", "status", "--name", name, "--json"], capture_output=True,
                            text=True, check=True, cwd=REPO)
        (s,) = json.loads(st.stdout)
        ports = [ln for ln in s["links"] if ln["ifname"] not in s["park"]]
        assert s["name"] == name and s["dut"] == "drop" and len(ports) == 4
        assert all(ln["xdp"] and ln["xdp"]["mode"] == "native" for ln in ports)
        # the spare veth pair the engine parks its transmit programs on: there, unused until then
        assert sorted(ln["ifname"] for ln in s["links"] if ln["ifname"] in s["park"]) == sorted(s["park"])
        lay = s["cpu_layout"]
        assert lay["honoured"] and set(lay["threads"]) == {p["ifname"] for p in s["ports"]} | {
            p["dut_ifname"] for p in s["ports"]}
        assert all(t["pinned"] for ts in lay["threads"].values() for t in ts)
    finally:
        down = subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, text=True,
                              cwd=REPO)
    assert down.returncode == 0, down.stderr
    assert leftovers(name) == []
    again = subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, text=True, cwd=REPO)
    assert again.returncode == 2 and "no lab named" in again.stderr
    bad = subprocess.run(GTPLAB + ["lab", "up", "--name", "Bad_Name"], capture_output=True, text=True,
                         cwd=REPO)
    assert bad.returncode == 2 and "bad lab name" in bad.stderr and bad.stderr.count("\n") == 1


def test_crash_after_up_then_down_cleans_up():
    """The process that built the lab dies without tearing down; `gtplab lab down --name` cleans up."""
    code = ("import os, signal; from gtplab.lab.topology import Lab; lab = Lab.up(dut='pgwu'); "
            "print(lab.name, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == -signal.SIGKILL, p.stderr
    name = p.stdout.strip()
    assert name and leftovers(name)
    down = subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, text=True, cwd=REPO)
    assert down.returncode == 0, down.stderr
    assert leftovers(name) == []


def test_down_without_state_file():
    """The state file is lost (e.g. /run was cleared): down --name finds the lab by its names."""
    lab = Lab.up(dut="pgwu")
    lab.state_path.unlink()
    down = subprocess.run(GTPLAB + ["lab", "down", "--name", lab.name], capture_output=True, text=True,
                          cwd=REPO)
    assert down.returncode == 0, down.stderr
    assert leftovers(lab.name) == []


def test_interrupt_during_up_rolls_back(monkeypatch):
    """Ctrl-C in the middle of Lab.up (after namespaces, veths and the DUT program exist)."""
    name = "t" + os.urandom(4).hex()

    def interrupted(self):
        assert leftovers(name)  # really half-built at this point
        raise KeyboardInterrupt
    monkeypatch.setattr(Lab, "attach_gen_pass", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Lab.up(name=name, dut="drop")
    assert leftovers(name) == []


def test_engine_traffic_through_pgwu(pgwu_lab):
    """The embedded engine on the lab's generator ports: the uplink and downlink profiles through the
    PGW-U, every packet sent arrives on the other port and is counted as forwarded by the DUT."""
    lab = pgwu_lab
    flows = 16
    lab.pgwu("session", "flush")  # bearer 0 may be there from the test above
    load_bearers(lab, flows, sgws=4)
    profiles = REPO / "trex_profiles"
    c = engine_client(lab)
    try:
        c.connect()
        gen_xdp = {ln["ifname"]: ln["xdp"]["prog"]["name"] for ln in lab.links() if ln["netns"] == lab.gen_ns}
        assert "gtplab_pass" not in gen_xdp.values()  # the engine's receive program replaced it
        for tx, rx, prof, reason in ((0, 1, "gtpu_uplink.py", "UL_FWD/redirect"),
                                     (1, 0, "gtpu_downlink.py", "DL_FWD/redirect")):
            c.reset(ports=[0, 1])
            c.load_profile(str(profiles / prof), ports=[tx], tunables={"flows": flows, "sgws": 4, "size": 256})
            before = dut_counters(lab).get(reason, 0)
            c.clear_stats()
            c.start(ports=[tx], mult="2000pps", duration=1)
            c.wait_on_traffic(ports=[tx], timeout=30)
            st = wait_for(lambda: (s := c.get_stats())[rx]["ipackets"] >= s[tx]["opackets"] > 0 and s,
                          what=f"{prof}: port {rx} receiving what port {tx} sent")
            sent = st[tx]["opackets"]
            assert 1500 <= sent <= 2500, st[tx]
            dut = dut_counters(lab)
            assert st[rx]["ipackets"] == sent, (prof, st[rx]["ipackets"], sent, dut)
            assert dut.get(reason, 0) - before == sent, (prof, before, dut)
    finally:
        c.disconnect()
        lab.attach_gen_pass()


def _idle_states(cpus: list[int]) -> list[Path]:
    return [p for c in cpus for p in Path(f"/sys/devices/system/cpu/cpu{c}/cpuidle").glob("state*/disable")
            if (p.parent / "name").read_text().strip() != "POLL"]


def _check_spinners(rec: dict, cpus: list[int]) -> list[int]:
    """The record's spinners run, one per DUT CPU, pinned there, at SCHED_IDLE; returns their pids."""
    pids = [s["pid"] for s in rec["spinners"]]
    assert sorted(s["cpu"] for s in rec["spinners"]) == sorted(cpus), rec
    for s in rec["spinners"]:
        assert os.sched_getaffinity(s["pid"]) == {s["cpu"]}
        assert os.sched_getscheduler(s["pid"]) == os.SCHED_IDLE
        assert b"gtplab-awake" in Path(f"/proc/{s['pid']}/cmdline").read_bytes()
    return pids


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def test_dut_cpus_kept_out_of_idle_and_given_back_by_teardown():
    """keep_cpus_awake() keeps the DUT CPUs out of halt by what this host allows, says what it did,
    and a lab torn down without restore_cpu_idle() (its owner died) still gives everything back. With
    a cpuidle driver: its idle states but polling off (and on again after). Without (this Intel VM):
    a SCHED_IDLE spinner per DUT CPU (gone after). Either way the record, on disk before the change
    and in the layout the results show, is checked against the machine."""
    lab = Lab.up(dut="drop")
    states = _idle_states(lab.cpus.dut)
    # which kind of host this ran on is in the session's header (tests/conftest.py) and in every
    # assertion's message
    host = f"cpuidle driver {awake.cpuidle_driver()}, {len(states)} idle state(s) to turn off"
    pids = []
    try:
        before = {p: p.read_text().strip() for p in states}
        rec = lab.keep_cpus_awake()
        on_disk = json.loads(lab.state_path.read_text())["awake"]
        assert on_disk["method"] == rec["method"] and lab.state["cpu_layout"]["awake"]["method"] == rec["method"]
        assert rec["applied"] and lab.state["cpu_layout"]["awake"]["applied"], (host, rec)
        if states:
            assert rec["method"] == "cpuidle", (host, rec)
            assert all(p.read_text().strip() == "1" for p in states)
            assert on_disk["saved"] == {str(p): "0" for p, v in before.items() if v == "0"}
        else:
            assert rec["method"] == "spinner", (host, rec)
            pids = _check_spinners(rec, lab.cpus.dut)
            assert [s["pid"] for s in on_disk["spinners"]] == pids
        assert lab.keep_cpus_awake() == rec        # once per lab: a second call changes nothing
    finally:
        lab.down()
    assert {p: p.read_text().strip() for p in states} == before
    assert all(wait_for(lambda: _gone(pid), what=f"spinner {pid} to stop") for pid in pids)


def test_the_spinner_runs_on_any_host_and_stops_with_its_owner():
    """Asked for (lab config lab.awake: spinner), the spinner runs on a host with cpuidle too; restored
    by the runner's end it is gone, and when the process that started it dies it exits by itself."""
    with Lab.up(dut="drop") as lab:
        rec = lab.keep_cpus_awake("spinner")
        assert rec["method"] == "spinner" and rec["applied"]
        pids = _check_spinners(rec, lab.cpus.dut)
        lab.restore_cpu_idle()
        assert all(wait_for(lambda: _gone(pid), what=f"spinner {pid} to stop") for pid in pids)
        assert "awake" not in lab.state and lab.state["cpu_layout"]["awake"]["restored"]
        # the owner dies without restoring: its spinner notices and exits
        code = ("import os, sys, json; from gtplab.lab.topology import Lab; lab = Lab.open(sys.argv[1]); "
                "rec = lab.keep_cpus_awake('spinner'); print(json.dumps(rec['spinners']), flush=True); "
                "os.kill(os.getpid(), 9)")
        p = subprocess.run([sys.executable, "-c", code, lab.name], capture_output=True, text=True, cwd=REPO)
        spinners = json.loads(p.stdout)
        assert spinners and p.returncode == -signal.SIGKILL, p.stderr
        # at SCHED_IDLE it runs only when its CPU has nothing else to run: while other suites load
        # the machine, it notices its owner's death seconds later (5 s was not enough here, load 8)
        assert all(wait_for(lambda: _gone(s["pid"]), timeout=60, what=f"orphaned spinner {s['pid']} to exit")
                   for s in spinners)


def test_the_lab_says_what_it_could_not_apply():
    """Asked for nothing, or for idle states on a host without any, the record says nothing was
    applied and why, and nothing on the machine changed."""
    with Lab.up(dut="drop") as lab:
        states = _idle_states(lab.cpus.dut)
        before = {p: p.read_text().strip() for p in states}
        rec = lab.keep_cpus_awake("none")
        assert rec["method"] == "none" and not rec["applied"] and rec["notes"]
        assert lab.state["cpu_layout"]["awake"]["applied"] is False
        lab.restore_cpu_idle()
        if not states:
            rec = lab.keep_cpus_awake("cpuidle")
            assert rec["method"] == "none" and not rec["applied"]
            assert any("no cpuidle states" in n for n in rec["notes"]), rec
            lab.restore_cpu_idle()
        assert {p: p.read_text().strip() for p in states} == before
        with pytest.raises(LabError, match="awake method"):
            lab.keep_cpus_awake("nap")


def test_cpu_layout_parse_and_bad_input():
    from gtplab.lab.cpu import CpuLayout
    assert CpuLayout.parse({"generator": 0, "dut": "1"}) == CpuLayout([0], [1])
    assert CpuLayout.parse({"generator": [0], "dut": [1]}) == CpuLayout([0], [1])
    assert CpuLayout.parse("auto") == CpuLayout.default() == CpuLayout.parse(None)
    for bad, msg in (({"generator": 0}, "generator: CPUS, dut: CPUS"), ({"generator": 0, "dut": 999}, "not available"),
                     ({"generator": "x", "dut": 1}, "not a CPU list"), ({"generator": [0, 0], "dut": 1}, "twice"),
                     ({"generator": True, "dut": 1}, "not a CPU list"), ({"generator": [], "dut": 1}, "not a CPU list")):
        with pytest.raises(LabError, match=msg):
            CpuLayout.parse(bad)


def test_a_layout_that_shares_a_cpu_is_recorded_as_not_honoured():
    from gtplab.lab.cpu import CpuLayout
    with Lab.up(dut="drop", cpus=CpuLayout([0], [0])) as lab:
        lay = lab.state["cpu_layout"]
        assert not lay["honoured"] and any("run both generator and DUT" in n for n in lay["notes"])
        assert json.loads(lab.state_path.read_text())["cpu_layout"]["honoured"] is False


def test_a_dut_port_without_xdp_has_no_threaded_napi_and_says_so():
    with Lab.up(dut="none") as lab:
        lay = lab.state["cpu_layout"]
        assert any(f"{p.dut_ifname} (dut): no threaded NAPI" in n for p in lab.ports for n in lay["notes"])


def test_down_all_spares_labs_in_use_and_status_marks_orphans(tmp_path):
    """`lab down --all` leaves a lab whose creator (a sweep, a test) still runs, unless forced;
    `lab status` marks a lab whose creator died without tearing it down as orphaned. (Its own state
    directory: --all here sees this test's lab only, never another user's.)"""
    env = dict(os.environ, GTPLAB_RUN_DIR=str(tmp_path))
    code = ("import sys, time; sys.path.insert(0, %r); from gtplab.lab.topology import Lab; "
            "lab = Lab.up(dut='drop'); print(lab.name, flush=True); time.sleep(120)" % str(REPO))
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    name = owner.stdout.readline().strip()
    try:
        assert name, "the lab owner did not start"
        down = subprocess.run(GTPLAB + ["lab", "down", "--all"], capture_output=True, text=True, cwd=REPO, env=env)
        assert down.returncode == 1 and f"{name} (pid {owner.pid})" in down.stderr, down.stderr
        assert leftovers(name)
        owner.kill()
        owner.wait()
        st = subprocess.run(GTPLAB + ["lab", "status", "--name", name, "--json"], capture_output=True,
                            text=True, cwd=REPO, check=True, env=env)
        assert json.loads(st.stdout)[0]["status"].startswith("orphaned")
        down = subprocess.run(GTPLAB + ["lab", "down", "--all"], capture_output=True, text=True, cwd=REPO, env=env)
        assert name not in down.stderr and f"lab {name}: removed" in down.stdout, down  # creator gone
        assert leftovers(name) == []
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, cwd=REPO, env=env)
