"""An external UPF in the namespace lab (`dut.mode: external`, gtplab/lab/external.py), without eUPF:
the lab config's section checked, templates rendered, the runtime found and cached, the UPF's
counters mapped (gtplab/dut/upf_counters.py) and checked against the kernel's, and, as root, a
stand-in UPF (a shell) started in the DUT namespace on the DUT CPUs with its rendered config, the
N4 link routed only through the lab, the UPF stopped by teardown whoever runs it, and a UPF that
dies or never gets ready failing `up` with nothing left behind. eUPF itself: tests/lab/test_eupf.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from gtplab.dut.external import ExternalDut
from gtplab.dut.upf_counters import EupfCounters, KernelVerdicts, kernel_counts
from gtplab.errors import LabError, UserError
from gtplab.lab import config as labconfig
from gtplab.lab import external, runtime
from gtplab.measure.conservation import DutDelta
from tests.lib import REPO
from tests.lib.lab import leftovers, wait_for


# ---------------------------------------------------------------------------------------------
# The lab config's dut.external, templates


def spec(**kw) -> external.ExternalSpec:
    return external.parse_spec({"start": "/bin/true {config}", **kw}, "test", Path("/labs"))


@pytest.mark.parametrize("d, msg", [
    ({"start": "x", "bogus": 1}, r"unknown key\(s\) in dut.external: bogus"),
    ({"start": "up --n4 {nfour}"}, r"dut.external.start: unknown placeholder \{nfour\} \(known: .*\{n4\}"),
    ({"start": "x", "config": "a: {n3"}, r"dut.external.config: bad template"),
    ({"config": "a: 1"}, r"config is rendered for the start command: give start"),
    ({"start": "x", "vars": {"n4": "1"}}, r"dut.external.vars n4: the lab sets those"),
    ({"start": "x", "cpus": "all-of-them"}, r"dut.external.cpus 'all-of-them': one of dut, generator, all"),
    ({"start": "x", "ready_timeout": 0}, r"ready_timeout 0 must be a number of seconds > 0"),
    ({"start": "x", "config_file": "../etc/x"}, r"config_file '../etc/x': a file name"),
    ({"start": "x", "xdp": "yes"}, r"dut.external.xdp must be true or false"),
    ({"start": "x", "setup": "ip tuntap add name t0 mode tun"}, r"dut.external.setup must be a list of shell commands"),
    ({"start": "x", "setup": ["ip link set t0 up", 3]}, r"dut.external.setup must be a list of shell commands"),
    ({"start": "x", "setup": ["ip route replace {ue_pool} dev t0", "ip link set {tun} up"]},
     r"dut.external.setup\[1\]: unknown placeholder \{tun\}"),
])
def test_external_section_mistakes_are_named(d, msg):
    with pytest.raises(UserError, match=msg):
        external.parse_spec(d, "lab config x.yaml")


def test_external_section_defaults_and_paths():
    s = spec(runtime="../shared/u.tgz", vars={"ftup": "false"})
    assert s.runtime == "/shared/u.tgz"                     # relative to the config's folder
    assert (s.cpus, s.xdp, s.config_file, s.user_started) == ("dut", True, "upf.conf", False)
    assert external.parse_spec({}, "t").user_started
    assert external.render("a {n4} {{b}} {ftup}", {"n4": "10.0.0.1", "ftup": "true"}) == "a 10.0.0.1 {b} true"
    assert s.setup == [] and spec(setup=["ip link set {n3_if} mtu {mtu}"]).setup == ["ip link set {n3_if} mtu {mtu}"]


def test_the_open5gs_lab_config_renders_its_setup_and_config():
    """embedded-open5gs: a UPF without XDP whose TUN device and UE-pool route are made by setup
    commands, its config (Open5GS's keys) valid YAML with the lab's addresses, CHOOSE, a short wait
    for the Association Release it never answers, as many bearers as its global.max.ue."""
    cfg = labconfig.load("embedded-open5gs")
    s = cfg.external_spec()
    assert (s.xdp, s.runtime_env, cfg.counters, cfg.max_bearers) == (False, "GTPLAB_OPEN5GS_TARBALL", "kernelpath", 8192)
    assert s.runtime.endswith("/shared/open5gs/open5gs-8f25f3b-upf-runtime.tgz")
    assert cfg.dut["pfcp"]["choose"] is True and cfg.dut["pfcp"]["release_wait"] == 1
    v = {k: "x" for k in external.PLACEHOLDERS} | {"n3": "10.201.0.1", "n3_6": "fd47:7473::1", "n4": "10.203.0.1",
                                                  "ue_pool": "10.64.0.0/12",
                                                  "workdir": "/w", "mtu": "3200"} | s.vars
    assert [external.render(c, v) for c in s.setup] == [
        "ip tuntap add name ogstun mode tun", "ip link set ogstun mtu 3200 up", "ip route replace 10.64.0.0/12 dev ogstun",
        "sysctl -qw net.ipv6.conf.ogstun.disable_ipv6=0", "sysctl -qw net.ipv6.conf.all.forwarding=1",
        "ip -6 route replace fd47:7470::/32 dev ogstun"]
    upf = yaml.safe_load(external.render(s.config, v))
    assert upf["upf"]["pfcp"]["server"] == [{"address": "10.203.0.1"}]
    # one entry with both families: N3 over IPv6 (sweep --n3 6) and IPv4, one GTP-U resource (docs/ipv6.md)
    assert upf["upf"]["gtpu"]["server"] == [{"address": ["10.201.0.1", "fd47:7473::1"]}]
    assert upf["upf"]["session"] == [{"subnet": "10.64.0.0/12", "gateway": "10.79.255.254", "dev": "ogstun"},
                                     {"subnet": "fd47:7470::/32", "gateway": "fd47:7470:ffff:ffff::1", "dev": "ogstun"}]
    assert upf["global"]["max"]["ue"] == cfg.max_bearers and upf["logger"]["file"]["path"].startswith("/w/")


def test_a_process_is_followed_by_its_pid_and_start_time_not_its_name():
    """is_upf: the recorded pid with the start time it had (/proc/PID/stat field 22); whatever the
    process is called now (a wrapper that exec'd the UPF), and not a process that has the pid with
    another start time (a reused pid), nor one that has ended."""
    me = external.proc_start_ticks(os.getpid())
    assert isinstance(me, int) and external.is_upf(os.getpid(), me)
    assert not external.is_upf(os.getpid(), me + 1)                  # the pid, another process
    assert not external.is_upf(os.getpid(), None) and not external.is_upf(None, me)
    p = subprocess.Popen(["sh", "-c", "exec sleep 30"])               # started as sh, runs as sleep
    try:
        ticks = wait_for(lambda: external.proc_start_ticks(p.pid), what="the child's stat")
        assert external.is_upf(p.pid, ticks)
        wait_for(lambda: Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(b"sleep"), what="the exec")
        assert external.is_upf(p.pid, ticks)                           # the same process under its new name
    finally:
        p.kill()
    p.wait()
    assert not external.is_upf(p.pid, ticks)


def write_lab_config(tmp_path, **dut) -> str:
    cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-eupf.yaml").read_text())
    for k, v in dut.items():
        if v is None:
            cfg["dut"].pop(k, None)
        else:
            cfg["dut"][k] = v
    f = tmp_path / "lab.yaml"
    f.write_text(yaml.safe_dump(cfg))
    return str(f)


@pytest.mark.parametrize("dut, msg", [
    ({"provision": "pgwu", "pfcp": None}, r"dut.mode external: dut.provision pfcp .* or none"),
    ({"counters": "pgwu", "eupf": None}, r"dut.mode external: dut.counters eupf, prometheus .* kernel"),
    ({"mode": "pgwu"}, r"dut.external is given but dut.mode is 'pgwu'"),
    ({"pfcp": {"upf": "embedded", "n3": "10.201.0.1", "n6": "10.202.0.1"}}, r"upf: embedded is the PGW-U's own agent"),
    ({"eupf": None}, r"dut.eupf must be \{api: http://HOST:PORT\}"),
])
def test_external_lab_config_mistakes_are_named(tmp_path, dut, msg):
    with pytest.raises(UserError, match=msg):
        labconfig.load(write_lab_config(tmp_path, **dut))


def test_upf_lab_and_counters_kernel_need_an_external_upf(tmp_path):
    cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-pfcp.yaml").read_text())
    cfg["dut"]["pfcp"] = {"upf": "lab"}
    f = tmp_path / "l.yaml"
    f.write_text(yaml.safe_dump(cfg))
    with pytest.raises(UserError, match=r"upf: lab is an external UPF's N4 in the namespace lab"):
        labconfig.load(str(f))
    cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded.yaml").read_text())
    cfg["dut"]["counters"] = "kernel"
    f.write_text(yaml.safe_dump(cfg))
    with pytest.raises(UserError, match=r"dut.counters kernel counts an external UPF's XDP verdicts"):
        labconfig.load(str(f))


# ---------------------------------------------------------------------------------------------
# The runtime: a directory or a tarball, unpacked once into the cache


def make_tarball(tmp_path, name="upf-1.0", files=None) -> Path:
    src = tmp_path / "src" / name
    (src / "bin").mkdir(parents=True)
    for rel, text in (files or {"bin/upf": "#!/bin/sh\n"}).items():
        (src / rel).write_text(text)
    tgz = tmp_path / f"{name}-runtime.tgz"
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src, arcname=name)
    return tgz


def test_runtime_tarball_unpacked_once_under_its_checksum(tmp_path, monkeypatch):
    tgz = make_tarball(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("GTPLAB_CACHE", str(cache))
    d = runtime.resolve(str(tgz), None, "the UPF's")
    sha = hashlib.sha256(tgz.read_bytes()).hexdigest()[:16]
    assert d == cache / f"upf-1.0-runtime-{sha}" / "upf-1.0" and (d / "bin/upf").is_file()
    (d / "marker").write_text("kept")                       # a second resolve reuses the copy
    assert runtime.resolve(str(tgz), None, "the UPF's") == d and (d / "marker").exists()
    tgz2 = make_tarball(tmp_path / "v2", files={"bin/upf": "#!/bin/sh\nexit 1\n"})
    d2 = runtime.resolve(str(tgz2), None, "the UPF's")
    assert d2 != d and (d2 / "bin/upf").read_text().endswith("exit 1\n")      # changed: its own copy
    assert not any(p.name.startswith("upf-1.0-runtime-") and "." in p.name[len("upf-1.0-runtime-"):]
                   for p in cache.iterdir()), "a temporary unpack directory was left behind"


def test_runtime_env_overrides_the_lab_config_and_missing_says_where(tmp_path, monkeypatch):
    tgz = make_tarball(tmp_path)
    monkeypatch.setenv("GTPLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GTPLAB_TEST_UPF", str(tgz))
    assert runtime.resolve("/nonexistent/x.tgz", "GTPLAB_TEST_UPF", "the UPF's").name == "upf-1.0"
    monkeypatch.setenv("GTPLAB_TEST_UPF", str(tmp_path / "src"))          # a directory: as it is
    assert runtime.resolve(None, "GTPLAB_TEST_UPF", "the UPF's") == tmp_path / "src" / "upf-1.0"
    monkeypatch.delenv("GTPLAB_TEST_UPF")
    with pytest.raises(runtime.RuntimeUnavailable,
                       match=r"no eUPF runtime: /nonexistent/x.tgz \(dut.external.runtime\) does not exist; "
                             r"set \$GTPLAB_TEST_UPF or dut.external.runtime"):
        runtime.resolve("/nonexistent/x.tgz", "GTPLAB_TEST_UPF", "eUPF")
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(runtime.RuntimeUnavailable, match=r"Couldn't unpack .*bad.tgz"):
        runtime.resolve(str(bad), None, "eUPF")


# ---------------------------------------------------------------------------------------------
# Counters: eUPF's, the kernel's, and the check of one against the other

XDP = {"aborted": 1, "drop": 7, "pass": 20, "tx": 2, "redirect": 1000}
ROUTE = {"fib_lookup_ip4_cache": 0, "fib_lookup_ip4_ok": 1002, "fib_lookup_ip4_error_drop": 3,
         "fib_lookup_ip4_error_pass": 5, "fib_lookup_ip6_cache": 0, "fib_lookup_ip6_ok": 0,
         "fib_lookup_ip6_error_drop": 1, "fib_lookup_ip6_error_pass": 0}


def test_eupf_counters_map_its_verdicts_and_fib_to_reasons():
    seen = []

    def fetch(url):
        seen.append(url)
        return json.dumps(XDP if url.endswith("/xdp_stats") else ROUTE)
    c = EupfCounters("http://10.203.0.1:8080/", fetch).counters()
    assert seen == ["http://10.203.0.1:8080/api/v1/xdp_stats", "http://10.203.0.1:8080/api/v1/route_stats"]
    assert c == {("eupf_fwd", "redirect"): 1000, ("eupf_returned", "tx"): 2, ("drop_fib", "drop"): 4,
                 ("drop_rules", "drop"): 3, ("aborted", "aborted"): 1, ("pass_fib", "pass"): 5,
                 ("pass_no_match", "pass"): 15}
    d = DutDelta.from_counters({k: 0 for k in c}, c)
    assert (d.rx_packets, d.fwd_packets, d.drop_packets, d.pass_packets) == (1030, 1000, 8, 20)
    assert d.other == {"eupf_returned/tx": 2}
    with pytest.raises(UserError, match=r"Couldn't read eUPF's counters from http://x/api/v1/xdp_stats"):
        EupfCounters("http://x", lambda url: (_ for _ in ()).throw(OSError("refused"))).counters()
    with pytest.raises(UserError, match=r"eUPF counter redirect = '1'"):
        EupfCounters.mapping({**XDP, "redirect": "1"}, ROUTE)


def veth(packets=0, redirect=0, tx=0, drops=0, failed=0, xmit_err=0) -> dict:
    return {"rx_queue_0_xdp_packets": packets, "rx_queue_0_xdp_redirect": redirect, "rx_queue_0_xdp_tx": tx,
            "rx_queue_0_xdp_drops": drops, "rx_queue_0_drops": failed, "tx_queue_0_xdp_xmit_errors": xmit_err}


def test_kernel_verdicts_of_the_dut_veths():
    a, s = veth(100, 90, 2, 3, 1), veth(10, 10)
    assert kernel_counts(a) == {"packets": 100, "redirect": 90, "tx": 2, "drops": 3, "failed": 1, "passed": 4}
    c = KernelVerdicts(lambda: {"dacc": a, "dsgi": s}).counters()
    assert c == {("xdp_fwd", "redirect"): 100, ("xdp_returned", "tx"): 2, ("xdp_drop", "drop"): 3,
                 ("veth_failed", "drop"): 1, ("xdp_pass", "pass"): 4}


class _Port:
    def __init__(self, name):
        self.dut_ifname = name


def cross(dd: DutDelta, before: dict, after: dict, kind="eupf") -> list[str]:
    probe = ExternalDut.__new__(ExternalDut)           # no lab: only the check's inputs
    probe.counters_kind = kind
    probe.lab = type("L", (), {"ports": [_Port("d0"), _Port("d1")]})()
    return probe.cross_check(dd, before, after, "uplink")


def test_cross_check_finds_a_upf_whose_counters_miss_packets():
    before = {"dut_access": veth(), "dut_sgi": veth()}
    after = {"dut_access": veth(100, 90, 0, 6), "dut_sgi": veth()}
    good = DutDelta(100, 90, drops_by_reason={"drop_rules": 6}, passed_by_reason={"pass_no_match": 4})
    assert cross(good, before, after) == []
    short = DutDelta(97, 87, drops_by_reason={"drop_rules": 6}, passed_by_reason={"pass_no_match": 4})
    assert cross(short, before, after) == ["the UPF counted 87 redirected or sent back, the kernel 90 redirected "
                                           "and 0 sent back on d0 (0 failed after the program)"]
    mis = DutDelta(100, 90, drops_by_reason={"drop_rules": 2}, passed_by_reason={"pass_no_match": 8})
    assert cross(mis, before, after) == [
        "the UPF counted 2 dropped (XDP_DROP or XDP_ABORTED), the kernel 6 on d0",
        "the UPF counted 8 passed to the kernel, the kernel 4 on d0"]
    assert cross(short, before, after, kind="kernel") == []          # the kernel's own: nothing to compare


# ---------------------------------------------------------------------------------------------
# As root: a stand-in UPF in the lab

CONFIG = "n3 {n3_if} {n3}/{n3_prefixlen}\nn6 {n6_if} {n6}\nn4 {n4_if} {n4} cp {cp}\ncpus {dut_cpus} {flag}\n"


def standin(start: str, **kw) -> external.ExternalSpec:
    return external.parse_spec({"start": start, "config": CONFIG, "config_file": "u.conf", "xdp": False,
                                "vars": {"flag": "on"}, **kw}, "test")


def netns_of(pid: int) -> str:
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True).stdout.strip()


@pytest.mark.lab
def test_a_upf_runs_in_the_dut_netns_on_the_dut_cpus_with_its_config_and_goes_with_the_lab():
    from gtplab.lab.topology import Lab
    lab = Lab.up(dut="external", external_spec=standin("sleep 600"))
    name = lab.name
    try:
        x = lab.external
        pid = x["pid"]
        ticks = x["start_ticks"]
        assert external.is_upf(pid, ticks) and netns_of(pid) == lab.dut_ns
        assert sorted(os.sched_getaffinity(pid)) == lab.cpus.dut
        with open(f"/proc/{pid}/mountinfo") as f:      # its own bpffs on /sys/fs/bpf
            assert any(" /sys/fs/bpf " in ln and " - bpf " in ln for ln in f)
        a, (p0, p1) = lab.addressing, lab.ports
        conf = Path(x["workdir"], "u.conf").read_text()
        assert conf == (f"n3 {p0.dut_ifname} {a.dut_access}/24\nn6 {p1.dut_ifname} {a.dut_sgi}\n"
                        f"n4 {x['n4']['dut_ifname']} {a.dut_n4} cp {a.cp_n4}\n"
                        f"cpus {','.join(map(str, lab.cpus.dut))} on\n")
        assert lab.state["cpu_layout"]["upf"] == {"pid": pid, "cpus": lab.cpus.dut, "threads": 1}
        # the control plane's namespace reaches the UPF's N4 address over the lab's link
        import socket
        from gtplab.kernel.netns import run_in
        rx = run_in(lab.dut_ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        tx = run_in(lab.cp_ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        try:
            rx.bind((a.dut_n4, 0))
            rx.settimeout(5)
            tx.sendto(b"n4?", rx.getsockname())
            data, src = rx.recvfrom(16)
            assert (data, src[0]) == (b"n4?", a.cp_n4)
        finally:
            rx.close()
            tx.close()
    finally:
        lab.down()
    assert not external.is_upf(pid, ticks)
    assert leftovers(name) == []
    assert not Path(x["workdir"]).exists()


@pytest.mark.lab
def test_the_upf_is_stopped_by_lab_down_from_another_process():
    """`gtplab lab up --lab-config` (standalone), then `gtplab lab down` in another process: the UPF
    stops (its pid is in the lab's state) and nothing is left."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        cfg = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-eupf.yaml").read_text())
        cfg["dut"]["external"] = {"start": "sleep 600", "config": CONFIG, "vars": {"flag": "x"}, "xdp": False}
        cfg["dut"]["provision"], cfg["dut"]["counters"] = "none", "none"
        for k in ("pfcp", "eupf"):
            cfg["dut"].pop(k)
        f = Path(tmp) / "standin.yaml"
        f.write_text(yaml.safe_dump(cfg))
        gt = [str(REPO / ".venv/bin/gtplab")]
        up = subprocess.run(gt + ["lab", "up", "--lab-config", str(f)], capture_output=True, text=True, timeout=120)
        assert up.returncode == 0, up.stderr
        name = up.stdout.split()[0]
        try:
            st = json.loads(subprocess.run(gt + ["lab", "status", "--name", name, "--json"], capture_output=True,
                                           text=True, check=True).stdout)[0]
            assert st["dut"] == "external" and st["external"]["running"] and set(st["netns"]) == {"gen", "dut", "cp"}
            pid = st["external"]["pid"]
            ticks = external.proc_start_ticks(pid)
            assert "external UPF: N3" in up.stderr and f"pid {pid}" in up.stderr
        finally:
            down = subprocess.run(gt + ["lab", "down", "--name", name], capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        assert f"external UPF pid {pid} stopped" in down.stdout
        assert not external.is_upf(pid, ticks) and leftovers(name) == []


@pytest.mark.lab
def test_n4_is_routed_only_through_the_lab_link():
    """From the control plane's namespace the UPF's N4 address leaves by the lab's N4 link and there
    is no default route; add one, or a route to N4 by another link, and the check (run at lab up and
    before every association) says which."""
    from gtplab.dut.pfcp import in_lab
    from gtplab.lab.topology import Lab
    from gtplab.pfcp import provision as prov
    lab = Lab.up(dut="external", external_spec=standin("sleep 600"))
    try:
        ns, a, link = lab.cp_ns, lab.addressing, lab.external["n4"]["cp_ifname"]
        external.check_n4_route(ns, a.dut_n4, link)
        cfg, where = in_lab(prov.parse_config({"upf": "lab"}, "t"), lab)
        assert (cfg.upf, cfg.local, cfg.n3, cfg.n6, where) == ((a.dut_n4, 8805), a.cp_n4, a.dut_access, a.dut_sgi, ns)
        ip = ["ip", "-n", ns]
        subprocess.run(ip + ["link", "add", "x0", "type", "veth", "peer", "name", "x1"], check=True)
        subprocess.run(ip + ["link", "set", "x0", "up"], check=True)
        subprocess.run(ip + ["addr", "add", "192.0.2.10/24", "dev", "x0"], check=True)
        subprocess.run(ip + ["route", "add", "default", "via", "192.0.2.1"], check=True)
        with pytest.raises(LabError, match=rf"N4: {ns} has a default route \(via 192.0.2.1 dev x0\)"):
            external.check_n4_route(ns, a.dut_n4, link)
        with pytest.raises(UserError, match=r"dut.pfcp: N4: .* has a default route"):
            in_lab(prov.parse_config({"upf": "lab"}, "t"), lab)
        subprocess.run(ip + ["route", "del", "default"], check=True)
        subprocess.run(ip + ["route", "add", f"{a.dut_n4}/32", "dev", "x0"], check=True)
        with pytest.raises(LabError, match=rf"the route to {a.dut_n4} leaves by x0, not by the lab's link {link}"):
            external.check_n4_route(ns, a.dut_n4, link)
        subprocess.run(ip + ["route", "del", f"{a.dut_n4}/32"], check=True)
        external.check_n4_route(ns, a.dut_n4, link)
    finally:
        lab.down()


@pytest.mark.lab
@pytest.mark.parametrize("start, kw, msg", [
    ("sh -c 'echo boom: no such interface; exit 3'", {}, r"exited \(status 3\) before it was ready: .*boom"),
    ("sleep 600", {"xdp": True, "ready_timeout": 0.5}, r"attached no XDP program to d\w+p0, d\w+p1 within 0.5 s"),
    ("/nonexistent/upf --config {config}", {}, r"dut.external.start: /nonexistent/upf is not an executable"),
])
def test_a_upf_that_fails_or_never_gets_ready_fails_up_and_leaves_nothing(start, kw, msg):
    from gtplab.lab.topology import STATE_DIR, Lab

    def ours():
        """What the lab dir holds, less other processes' labs (other suites run on this machine):
        a state file <name>.json and its <name>-* dirs belong to the process its "pid" names."""
        names = set(p.name for p in STATE_DIR.glob("*")) if STATE_DIR.is_dir() else set()
        theirs = set()
        for n in names:
            st = STATE_DIR / (n.split("-")[0].removesuffix(".json") + ".json")
            try:
                if json.loads(st.read_text()).get("pid") != os.getpid():
                    theirs.add(n)
            except (OSError, ValueError):
                pass
        return names - theirs
    before = ours()
    with pytest.raises(LabError, match=msg):
        Lab.up(dut="external", external_spec=standin(start, **kw))
    assert ours() - before == set(), "a lab's state or the UPF's work dir was left behind"


def unique_name() -> str:
    return "x" + os.urandom(4).hex()


@pytest.mark.lab
def test_setup_commands_run_in_the_dut_netns_before_the_upf_and_go_with_it():
    """dut.external.setup (a TUN UPF's device and UE-pool route): rendered with the placeholders, run
    in the DUT namespace in order before the UPF starts (it sees the device), gone with the lab."""
    from gtplab.lab.topology import Lab
    setup = ["ip tuntap add name t0 mode tun", "ip link set t0 mtu {mtu} up", "ip route replace {ue_pool} dev t0",
             "echo {n3_if} {flag} > {workdir}/setup.out"]
    start = "sh -c 'ip -o link show t0 > {workdir}/seen; exec sleep 600'"
    lab = Lab.up(name=unique_name(), dut="external", external_spec=standin(start, setup=setup))
    try:
        wd, p0 = Path(lab.external["workdir"]), lab.ports[0]
        assert (wd / "setup.out").read_text() == f"{p0.dut_ifname} on\n"
        assert wait_for(lambda: (wd / "seen").exists() and "t0:" in (wd / "seen").read_text(),
                        what="the UPF to see the setup's device")
        link = json.loads(subprocess.run(["ip", "-n", lab.dut_ns, "-j", "link", "show", "t0"], capture_output=True,
                                         text=True, check=True).stdout)[0]
        assert link["mtu"] == p0.mtu and "UP" in link["flags"]
        route = subprocess.run(["ip", "-n", lab.dut_ns, "route", "get", lab.addressing.ue(5)], capture_output=True,
                               text=True, check=True).stdout
        assert " dev t0 " in route
        assert "setup: ip tuntap add name t0 mode tun" in Path(lab.external["log"]).read_text()
    finally:
        lab.down()
    assert leftovers(lab.name) == []
    assert subprocess.run(["ip", "link", "show", "t0"], capture_output=True).returncode != 0   # not in the host's


@pytest.mark.lab
def test_a_failing_setup_command_fails_up_naming_it_and_leaves_nothing(tmp_path):
    """The first setup command that fails: one LabError with the command and its stderr, the UPF never
    started, and the lab torn down (no namespace, no state, no work dir)."""
    from gtplab.lab.topology import STATE_DIR, Lab
    name = unique_name()
    marker = tmp_path / "started"
    s = standin(f"sh -c 'touch {marker}; exec sleep 600'",
                setup=["ip tuntap add name t0 mode tun", "ip link set nosuchdev{flag} up", "touch {workdir}/third"])
    with pytest.raises(LabError, match=r"^dut.external.setup command `ip link set nosuchdevon up` failed "
                                       r"\(status 1\): .*nosuchdevon"):
        Lab.up(name=name, dut="external", external_spec=s).down()      # down: only if it wrongly came up
    assert leftovers(name) == []
    assert not (STATE_DIR / f"{name}-upf").exists() and not marker.exists()


def children_in_group(lab) -> list[int]:
    """The `sleep 600`s of the UPF's group in the DUT namespace other than the process the lab started."""
    def cmd(p):
        try:
            return Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            return b""
    return [p for p in external.group_members(lab.external["pid"], lab.dut_ns)
            if p != lab.external["pid"] and cmd(p) == b"sleep\0" + b"600\0"]


@pytest.mark.lab
@pytest.mark.parametrize("start", [
    "sh -c 'sleep 600; echo never'",              # the shell waits for its child
    "sh -c 'sleep 600 & sleep 2'",                # the shell exits and leaves its child running
])
def test_a_upf_started_through_sh_c_is_stopped_with_what_it_started(start, monkeypatch):
    """A start command through `sh -c` (or a wrapper script): teardown's stop ends the shell and what
    it started (its process group), with SIGTERM, before the namespaces go, also when the shell has
    already exited; not left for the namespace sweep's SIGKILL."""
    from gtplab.lab.topology import Lab
    monkeypatch.setattr(external, "STOP_GRACE", 3.0)
    lab = Lab.up(name=unique_name(), dut="external", external_spec=standin(start))
    try:
        kids = wait_for(lambda: children_in_group(lab), what="the shell's child")
        if "&" in start:
            wait_for(lambda: not external.is_upf(lab.external["pid"], lab.external["start_ticks"]), timeout=10,
                     what="the shell to exit")
            assert children_in_group(lab) == kids                      # its child still runs
        done = external.stop(lab.state, lab._external_proc)
        assert done == [f"external UPF pid {lab.external['pid']} stopped"]
        assert all(external.proc_start_ticks(k) is None for k in kids), "the shell's child outlived the stop"
    finally:
        lab.down()
    assert leftovers(lab.name) == []


@pytest.mark.lab
def test_a_upf_behind_a_wrapper_script_is_followed_by_pid(tmp_path):
    """A wrapper script that execs the UPF under another name: the lab still knows it runs (CPU
    layout, status) and stops it itself."""
    from gtplab.lab.topology import Lab, lab_status
    wrapper = tmp_path / "run-upf"
    wrapper.write_text("#!/bin/sh\nexec sleep 600\n")
    wrapper.chmod(0o755)
    lab = Lab.up(name=unique_name(), dut="external", external_spec=standin(f"{wrapper} --config {{config}}"))
    try:
        pid = lab.external["pid"]
        assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0")
        assert lab.state["cpu_layout"]["upf"]["pid"] == pid
        assert lab_status(lab.name)["external"]["running"]
        assert external.stop(lab.state, lab._external_proc) == [f"external UPF pid {pid} stopped"]
    finally:
        lab.down()


@pytest.mark.lab
def test_xdp_false_puts_xdp_pass_on_the_dut_ports_so_the_generators_frames_arrive():
    """A UPF without XDP (xdp: false): the lab attaches XDP_PASS to both DUT ports before it starts,
    so the frames the generator's XDP program redirects into the veths reach a socket in the DUT
    namespace (the UPF's N3 socket here), every one of them; teardown detaches it."""
    import socket
    from gtplab.kernel.netns import run_in
    from gtplab.lab.topology import Lab, teardown
    from gtplab.traffic.backend import engine_client
    lab = Lab.up(name=unique_name(), dut="external", external_spec=standin("sleep 600"))
    try:
        progs = external.xdp_progs(lab.dut_ns, [p.dut_ifname for p in lab.ports])
        assert all(x and x["name"] == "gtplab_pass" and x["mode"] == "native" for x in progs.values()), progs
        a = lab.addressing
        rx = run_in(lab.dut_ns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        rx.bind((a.dut_access, 2152))
        rx.setblocking(False)
        c = engine_client(lab)
        try:
            c.connect()
            c.reset(ports=[0, 1])
            c.load_profile(str(REPO / "trex_profiles/gtpu_uplink.py"), ports=[0],
                           tunables={"flows": 4, "sgws": 4, "size": 256})
            c.clear_stats()
            c.start(ports=[0], mult="1000pps", duration=0.3)
            c.wait_on_traffic(ports=[0], timeout=30)
            sent = c.get_stats()[0]["opackets"]
        finally:
            c.disconnect()
        got = 0

        def drained():
            nonlocal got
            try:
                while True:
                    rx.recv(4096)
                    got += 1
            except BlockingIOError:
                return got >= sent
        wait_for(drained, what=f"the {sent} G-PDUs at the N3 socket (got {got})")
        rx.close()
        assert 200 <= sent == got
    finally:
        removed = teardown(lab.state, lab._external_proc)
    assert [f"XDP_PASS on {p.dut_ifname}" for p in lab.ports] == [r for r in removed if r.startswith("XDP_PASS")]


@pytest.mark.lab
def test_a_user_started_upf_is_waited_for_by_no_one():
    """No start command: the lab comes up with its N4 link, starts nothing, waits for nothing; its
    status says the user starts the UPF."""
    from gtplab.lab.topology import Lab, lab_status
    lab = Lab.up(dut="external", external_spec=external.parse_spec({}, "t"))
    try:
        st = lab_status(lab.name)
        assert st["external"]["user_started"] and st["external"]["pid"] is None
        assert set(st["netns"]) == {"gen", "dut", "cp"} and st["netns"]["cp"]["exists"]
        external.check_n4_route(lab.cp_ns, lab.addressing.dut_n4, lab.external["n4"]["cp_ifname"])
        notes = lab.state["cpu_layout"]["notes"]
        assert any("the external UPF attached no XDP program" in n for n in notes), notes
        assert not lab.state["cpu_layout"]["honoured"]
    finally:
        lab.down()
    wait_for(lambda: leftovers(lab.name) == [], what="the lab to be gone")


def test_cases_with_more_bearers_than_the_dut_holds_are_skipped_with_the_reason(tmp_path):
    """dut.max_bearers (eUPF: 65,535 sessions): the default spec's 1 M scale cases are skipped, each
    named in run.json's skipped; the others stay; a bad value is refused."""
    from gtplab.measure.plan import load_spec
    from gtplab.measure.sweep import planned_cases
    cases, skipped = planned_cases(load_spec(None), labconfig.load("embedded-eupf"))
    assert len(cases) == 18 and all(c.n_bearers <= 65535 for c in cases)
    assert [s["case_id"] for s in skipped] == ["uplink-64-multi1000000-random-csumon-search",
                                               "downlink-64-multi1000000-random-csumon-search"]
    assert all("the DUT holds at most 65535 (dut.max_bearers)" in s["note"] for s in skipped)
    all_cases, none_skipped = planned_cases(load_spec(None), labconfig.load("embedded"))
    assert len(all_cases) == 20 and none_skipped == []
    with pytest.raises(UserError, match=r"dut.max_bearers 0 must be a number of bearers >= 1"):
        labconfig.load(write_lab_config(tmp_path, max_bearers=0))


@pytest.mark.lab
def test_a_user_started_upf_is_asked_for_before_a_sweep_builds_or_uses_a_lab(tmp_path):
    """Without dut.external.start the sweep cannot build the lab itself (nobody would start the
    UPF): it says how; on a running lab without the UPF's XDP programs yet, it says what to start
    where. Nothing is built either way."""
    from gtplab.lab.topology import Lab
    from gtplab.traffic import backend
    f = write_lab_config(tmp_path, external={"xdp": True})
    cfg = labconfig.load(f)
    with pytest.raises(UserError, match=r"its UPF is started by you .* `gtplab lab up --lab-config .*--lab NAME"):
        backend.choose(cfg)
    lab = Lab.up(dut="external", external_spec=cfg.external_spec())
    try:
        with pytest.raises(UserError, match=rf"lab {lab.name}: no XDP program on d\w+p0, d\w+p1: start the UPF in "
                                            rf"{lab.dut_ns}"):
            backend.choose(cfg, lab=lab.name)
    finally:
        lab.down()


def test_every_shipped_lab_config_says_whether_it_ran_here():
    """Each lab config of gtplab/lab/labs/ opens with what was seen of it here: `# Run here:` (by the
    suite, or by hand with the date and commit) or `# Not run here:` with why (issue 30: nothing
    claimed that was not seen)."""
    import re
    from pathlib import Path
    labs = Path(labconfig.__file__).parent / "labs"
    bad = []
    for p in sorted(labs.glob("*.yaml")):
        first = p.read_text().splitlines()[0]
        ran = re.match(r"# Run here: by (every `\./setup\.sh test`|hand \d{4}-\d\d-\d\d, commit [0-9a-f]{7})", first)
        if not ran and not re.match(r"# Not run here: \S", first):
            bad.append(f"{p.name}: {first}")
    assert bad == []
