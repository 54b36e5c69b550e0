"""Ansible provisioning (ansible/): lint, syntax, rendered configs, and local.yml for real.

Unit tests: ansible-lint (production profile), --syntax-check of every playbook, and
ansible/tests/render.yml, which renders the trex, dut and monitoring roles' files for the example
inventory into a temp dir (the rendered trex_cfg.yaml and prometheus.yml are checked, the latter with
`promtool check config`).
Lab tests: local.yml run twice on this machine (the second run must report changed=0), and the DUT's
network setup script run twice on veths inside a namespace of our own.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from gtplab.dut.dataplane import PGWU_DIR, pgwu_binary
from tests.lib import REPO

ANSIBLE = REPO / "ansible"
VENV_BIN = Path(sys.executable).parent
EXAMPLE = ANSIBLE / "inventory" / "example"
PLAYBOOKS = ["site.yml", "local.yml", "tests/render.yml"]


def _tool(name: str) -> str:
    path = VENV_BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found (it comes with requirements.txt: run ./setup.sh)")
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_CONFIG"] = str(ANSIBLE / "ansible.cfg")
    if os.getuid() != 0:        # a user whose home is not writable (nobody: /nonexistent) has its tmp dirs here
        tmp = os.path.join(tempfile.gettempdir(), f"gtplab-ansible-{os.getuid()}")
        env.setdefault("ANSIBLE_REMOTE_TMP", tmp)
        env.setdefault("ANSIBLE_LOCAL_TEMP", tmp)
    return env


def _playbook(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ansible-playbook"), *args], cwd=ANSIBLE, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _changed_tasks(output: str) -> list[str]:
    """Names of the tasks that reported a change in an ansible-playbook output."""
    tasks, current = [], None
    for line in output.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            current = line.split("[", 1)[1].rsplit("]", 1)[0]
        elif line.startswith("changed:") and current and current not in tasks:
            tasks.append(current)
    return tasks


def _recap(output: str) -> dict[str, int]:
    """The PLAY RECAP counters of the single host in an ansible-playbook output."""
    m = re.search(r"PLAY RECAP \*+\n(\S+)\s+:\s+(.*)", output)
    assert m, f"no PLAY RECAP in the output:\n{output[-3000:]}"
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}


# ---- lint and syntax ------------------------------------------------------------------------------

def test_ansible_lint_production():
    cp = subprocess.run([_tool("ansible-lint"), "--profile", "production", "--nocolor", "ansible/"],
                        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, f"ansible-lint failed:\n{out[-5000:]}"
    assert "Profile 'production' was required, and it passed" in out, out[-2000:]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_syntax_check(playbook):
    cp = _playbook("-i", str(EXAMPLE), "--syntax-check", playbook, timeout=120)
    assert cp.returncode == 0, f"--syntax-check {playbook} failed:\n{cp.stdout}{cp.stderr}"


# ---- rendered templates for the example inventory ------------------------------------------------

@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = tmp_path_factory.mktemp("ansible-render")
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "-e", f"render_dir={out}")
    assert cp.returncode == 0, f"render.yml failed:\n{cp.stdout[-4000:]}{cp.stderr[-2000:]}"
    recap = _recap(cp.stdout)
    assert recap["failed"] == 0
    return out


def _group_vars(group: str) -> dict:
    return yaml.safe_load((EXAMPLE / "group_vars" / f"{group}.yml").read_text())


def _hosts() -> dict:
    return yaml.safe_load((EXAMPLE / "hosts.yml").read_text())["all"]["children"]


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_trex_cfg_rendered(rendered):
    gv = _group_vars("trex")
    (host,) = _hosts()["trex"]["hosts"]
    cfg = yaml.safe_load((rendered / host / "trex_cfg.yaml").read_text())
    assert isinstance(cfg, list) and len(cfg) == 1, cfg
    cfg = cfg[0]
    assert cfg["version"] == 2
    assert cfg["port_limit"] == 2
    assert cfg["interfaces"] == [p["pci"] for p in gv["trex_ports"]]
    # lab addressing contract: port 0 = access side, port 1 = SGi side, gateways = the DUT
    assert cfg["port_info"] == [
        {"ip": "10.201.0.2", "default_gw": "10.201.0.1"},
        {"ip": "10.202.0.2", "default_gw": "10.202.0.1"},
    ]
    platform = cfg["platform"]
    assert platform["master_thread_id"] == gv["trex_master_core"]
    assert platform["latency_thread_id"] == gv["trex_latency_core"]
    assert platform["dual_if"] == gv["trex_dual_if"]
    used = [platform["master_thread_id"], platform["latency_thread_id"]] + platform["dual_if"][0]["threads"]
    assert len(used) == len(set(used)), f"a core is used twice: {used}"


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_prometheus_config_rendered(rendered):
    (host,) = _hosts()["monitoring"]["hosts"]
    path = rendered / host / "etc" / "prometheus" / "prometheus.yml"
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.fail("promtool not found (Debian package prometheus, installed by setup.sh)")
    cp = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, f"promtool check config failed:\n{cp.stdout}{cp.stderr}"

    cfg = yaml.safe_load(path.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"prometheus", "pushgateway", "node", "pgwu"}
    assert jobs["pushgateway"]["honor_labels"] is True
    children = _hosts()

    def addr(group: str, name: str) -> str:
        return children[group]["hosts"][name]["ansible_host"]

    node = sorted(t for sc in jobs["node"]["static_configs"] for t in sc["targets"])
    want_node = sorted(f"{addr(g, h)}:9100" for g in ("trex", "dut", "monitoring") for h in children[g]["hosts"])
    assert node == want_node
    pgwu = [t for sc in jobs["pgwu"]["static_configs"] for t in sc["targets"]]
    port = _group_vars("dut")["dut_metrics_port"]
    assert pgwu == [f"{addr('dut', h)}:{port}" for h in children["dut"]["hosts"]]


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_grafana_provisioning_rendered(rendered):
    (host,) = _hosts()["monitoring"]["hosts"]
    prov = rendered / host / "etc" / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "gtplab.yaml").read_text())["datasources"]
    assert len(ds) == 1 and ds[0]["type"] == "prometheus"
    providers = yaml.safe_load((prov / "dashboards" / "gtplab.yaml").read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards/gtplab"
    # Every datasource uid the dashboards refer to is the one provisioned.
    refs = set()
    for path in sorted((REPO / "dashboards").glob("*.json")):
        text = path.read_text()
        refs |= {m for m in re.findall(r'"datasource":\s*\{[^}]*"uid":\s*"([^"$]+)"', text)}
    if not refs:
        pytest.skip("no dashboards/*.json with datasource references yet")
    assert refs == {ds[0]["uid"]}, f"dashboards use {refs}, the role provisions {ds[0]['uid']}"


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_files_rendered(rendered):
    gv = _group_vars("dut")
    (host,) = _hosts()["dut"]["hosts"]
    root = rendered / host
    env = dict(line.split("=", 1) for line in (root / "etc/default/pgwu").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["PGWU_ACCESS_IF"] == gv["dut_access_if"] and env["PGWU_SGI_IF"] == gv["dut_sgi_if"]
    assert "--local-addr 10.201.0.1 " in env["PGWU_LOAD_ARGS"]
    assert "--ue-pool 10.64.0.0/12 " in env["PGWU_LOAD_ARGS"]
    assert "--sport-entropy on" in env["PGWU_LOAD_ARGS"]       # TS 29.281 4.4.2.0, pgwu's default
    assert env["PGWU_METRICS_LISTEN"] == f"0.0.0.0:{gv['dut_metrics_port']}"
    unit = (root / "etc/systemd/system/pgwu.service").read_text()
    assert re.search(r"^ExecStartPre=/usr/local/sbin/pgwu attach --access \$\{PGWU_ACCESS_IF\} "
                     r"--sgi \$\{PGWU_SGI_IF\}", unit, re.M)
    assert re.search(r"^ExecStart=/usr/local/sbin/pgwu metrics --listen", unit, re.M)
    assert re.search(r"^ExecStopPost=-/usr/local/sbin/pgwu unload", unit, re.M)
    script = root / "usr/local/sbin/gtplab-dut-setup"
    cp = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert cp.returncode == 0, cp.stderr
    text = script.read_text()
    assert "flow_hash \"$ACCESS_IF\" gtpu4 sde" in text  # TEID hashing on the access side
    assert "neigh \"10.201.0.$((16 + k))\"" in text and "seq 0 63" in text


def test_trex_bad_ports_rejected(tmp_path):
    """An odd number of TRex ports is refused with the role's one clear message, nothing rendered."""
    bad = json.dumps({"trex_ports": [{"pci": "0000:3b:00.0", "ip": "10.201.0.2", "gw": "10.201.0.1"}]})
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "trex",
                   "-e", f"render_dir={tmp_path}", "-e", bad, timeout=120)
    assert cp.returncode != 0
    assert "trex_ports must list an even number" in cp.stdout
    assert not list(tmp_path.rglob("trex_cfg.yaml"))


# ---- local.yml, for real ----------------------------------------------------------------------------

def _host_net_state() -> dict[str, list]:
    """Addresses of the host namespace's interfaces and the sysctls local.yml must leave alone."""
    links = json.loads(subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    state = {f"if:{l['ifname']}": sorted(a["local"] + "/" + str(a["prefixlen"]) for a in l.get("addr_info", []))
             for l in links}
    for key in ("net/ipv4/ip_forward", "net/ipv4/conf/all/rp_filter", "net/core/netdev_budget"):
        state[key] = [Path("/proc/sys", key).read_text().strip()]
    return state


@pytest.mark.lab
@pytest.mark.timeout(900)
def test_local_yml_runs_and_is_idempotent(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("local.yml provisions this machine: needs root")
    # Build from a snapshot of dataplane/ (and lib/, its shared build rules and headers) so a
    # concurrent edit can't make the second run rebuild.
    src = tmp_path / "src"
    shutil.copytree(PGWU_DIR, src / PGWU_DIR.relative_to(REPO),
                    ignore=shutil.ignore_patterns("*.o", "*.skel.h", "*.tmp", "pgwu"))
    shutil.copytree(REPO / "lib", src / "lib")
    # Two runs of this test at once (several checkouts on one machine) would rewrite each other's
    # files between our two runs: take turns.
    with open("/run/lock/gtplab-ansible-local.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _check_local_yml(src)


def _check_local_yml(src: Path) -> None:
    before = _host_net_state()

    first = _playbook("local.yml", "-e", f"dut_src_dir={src}", timeout=600)
    assert first.returncode == 0, f"local.yml failed:\n{first.stdout[-6000:]}{first.stderr[-2000:]}"
    recap1 = _recap(first.stdout)
    assert recap1["failed"] == 0 and recap1["changed"] >= 1, recap1  # it built pgwu at least

    second = _playbook("local.yml", "-e", f"dut_src_dir={src}", timeout=600)
    assert second.returncode == 0, f"local.yml (2nd run) failed:\n{second.stdout[-6000:]}"
    recap2 = _recap(second.stdout)
    assert recap2["changed"] == 0, f"2nd run changed: {_changed_tasks(second.stdout)}\n{second.stdout[-4000:]}"
    assert recap2["failed"] == 0

    # What it did: pgwu built from the snapshot and installed, configs valid, no interface touched.
    built = (src / PGWU_DIR.relative_to(REPO) / "pgwu").read_bytes()   # the snapshot's build
    assert Path("/usr/local/sbin/pgwu").read_bytes() == built
    assert os.access("/usr/local/sbin/pgwu", os.X_OK)
    cp = subprocess.run(["promtool", "check", "config", "/etc/prometheus/prometheus.yml"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    prom = yaml.safe_load(Path("/etc/prometheus/prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert jobs["pgwu"] == ["127.0.0.1:9464"] and jobs["node"] == ["127.0.0.1:9100"]
    assert Path("/etc/systemd/system/pgwu.service").is_file()
    assert "PGWU_ACCESS_IF=\n" in Path("/etc/default/pgwu").read_text()
    if Path("/proc/1/comm").read_text().strip() != "systemd":
        assert "not systemd" in second.stdout  # it said what it did not start
    after = _host_net_state()
    common = {k: v for k, v in before.items() if k in after}
    assert {k: after[k] for k in common} == common, "local.yml changed the host's interfaces or sysctls"


# ---- the DUT's network setup script, on veths in a namespace of our own ---------------------------

def _ns(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True,
                          check=check, timeout=60)


@pytest.mark.lab
def test_dut_setup_script_in_namespace(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    rid = secrets.token_hex(3)
    ns = f"gtpans-{rid}"
    acc, sgi = f"acc{rid}", f"sgi{rid}"
    mac = "02:00:00:0a:c1:01"
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "dut", "-e", f"render_dir={tmp_path}",
                   "-e", json.dumps({"dut_access_if": acc, "dut_sgi_if": sgi, "dut_sgw_mac": mac,
                                     "dut_sgw_count": 4, "dut_rx_queues": 1, "dut_irq_cores": [0]}),
                   timeout=120)
    assert cp.returncode == 0, cp.stdout[-3000:]
    script = str(next(tmp_path.rglob("gtplab-dut-setup")))
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for dev in (acc, sgi):
            _ns(ns, "ip", "link", "add", dev, "type", "veth", "peer", "name", f"p{dev}")
            _ns(ns, "ip", "link", "set", f"p{dev}", "up")
        first = _ns(ns, "bash", script)
        changes = [l for l in first.stdout.splitlines() if l.startswith("changed:")]
        assert f"changed: {acc} address 10.201.0.1/24" in changes
        assert f"changed: {sgi} address 10.202.0.1/24" in changes
        assert f"changed: route 198.18.0.0/15 via 10.202.0.2 dev {sgi}" in changes
        assert sum(l.startswith("changed: neighbour") for l in changes) == 4
        # veth has no RSS: reported, not fatal
        assert f"note: {acc}: rx-flow-hash udp4 sdfn not supported" in first.stdout

        second = _ns(ns, "bash", script)
        assert "changed:" not in second.stdout, second.stdout

        addrs = _ns(ns, "ip", "-o", "-4", "addr", "show").stdout
        assert "inet 10.201.0.1/24" in addrs and "inet 10.202.0.1/24" in addrs
        assert "via 10.202.0.2" in _ns(ns, "ip", "-4", "route", "show", "exact", "198.18.0.0/15").stdout
        neigh = _ns(ns, "ip", "neigh", "show", "dev", acc).stdout
        for k in range(4):
            assert re.search(rf"^10\.201\.0\.{16 + k} lladdr {mac} PERMANENT", neigh, re.M), neigh
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)


# ---- several generator port pairs (dut_pairs) ------------------------------------------------------

TWO_PAIRS = {"dut_access_if": "", "dut_sgi_if": "", "dut_sgw_count": 4, "dut_pairs": [
    {"access_if": "PA0", "sgi_if": "PS0", "pdn_prefix": "198.18.0.0/18", "sgw_mac": "02:00:00:0A:00:01",
     "pdn_gateway_mac": "02:00:00:0b:00:01"},
    {"access_if": "PA1", "sgi_if": "PS1", "sgw_mac": "02:00:00:0a:01:01", "pdn_gateway_mac": "02:00:00:0b:01:01",
     "neighbours": [{"addr": "10.201.1.9", "mac": "02:00:00:0a:01:09", "side": "access"}]}]}


def _dut_pairs_filter():
    """The dut role's filter (ansible/roles/dut/filter_plugins/dut_pairs.py), imported as a module."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("gtplab_dut_pairs_filter",
                                                  ANSIBLE / "roles/dut/filter_plugins/dut_pairs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.lab     # renders files owned by root, and runs the script in a namespace of our own
def test_dut_two_pairs_set_up_in_namespace(tmp_path):
    """dut_pairs with two pairs: /etc/default/pgwu lists both pairs' interfaces for `pgwu attach
    --access a,b --sgi c,d` (the GTP-U address pair 0's), and gtplab-dut-setup, run in a namespace
    on four veths, gives each pair its addresses, its PDN route via its SGi interface, its N6
    gateway and SGW neighbours on its own interfaces (pair 1's from the role's defaults for pair 1:
    10.201.1.1/24, 10.202.1.1/24, 198.18.64.0/18 via 10.202.1.2, SGWs 10.201.1.16..); a second run
    changes nothing."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    rid = secrets.token_hex(3)
    ns = f"gtpans-{rid}"
    names = {f"{side}{k}": f"{side.lower()}{k}{rid}" for side in ("PA", "PS") for k in (0, 1)}
    extra = json.loads(json.dumps(TWO_PAIRS))
    for p in extra["dut_pairs"]:
        p["access_if"], p["sgi_if"] = names[p["access_if"]], names[p["sgi_if"]]
    a0, s0, a1, s1 = names["PA0"], names["PS0"], names["PA1"], names["PS1"]
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "dut", "-e", f"render_dir={tmp_path}",
                   "-e", json.dumps(extra), timeout=120)
    assert cp.returncode == 0, cp.stdout[-3000:]
    (host,) = _hosts()["dut"]["hosts"]
    env = _env_file((tmp_path / host / "etc/default/pgwu").read_text())
    assert (env["PGWU_ACCESS_IF"], env["PGWU_SGI_IF"]) == (f"{a0},{a1}", f"{s0},{s1}"), env
    assert "--local-addr 10.201.0.1 " in env["PGWU_LOAD_ARGS"], env["PGWU_LOAD_ARGS"]
    script = str(tmp_path / host / "usr/local/sbin/gtplab-dut-setup")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for dev in names.values():
            _ns(ns, "ip", "link", "add", dev, "type", "veth", "peer", "name", f"p{dev}")
            _ns(ns, "ip", "link", "set", f"p{dev}", "up")
        first = _ns(ns, "bash", script)
        changes = [l for l in first.stdout.splitlines() if l.startswith("changed:")]
        for dev, addr in ((a0, "10.201.0.1/24"), (s0, "10.202.0.1/24"), (a1, "10.201.1.1/24"), (s1, "10.202.1.1/24")):
            assert f"changed: {dev} address {addr}" in changes, changes
        assert f"changed: route 198.18.0.0/18 via 10.202.0.2 dev {s0}" in changes, changes
        assert f"changed: route 198.18.64.0/18 via 10.202.1.2 dev {s1}" in changes, changes
        second = _ns(ns, "bash", script)
        assert "changed:" not in second.stdout, second.stdout
        # each pair's neighbours on its own interfaces, and nowhere else
        for k, (acc, sgi) in enumerate(((a0, s0), (a1, s1))):
            sgw_mac, gw_mac = f"02:00:00:0a:0{k}:01", f"02:00:00:0b:0{k}:01"
            neigh = _ns(ns, "ip", "neigh", "show", "dev", acc).stdout
            for j in range(4):
                assert re.search(rf"^10\.201\.{k}\.{16 + j} lladdr {sgw_mac} PERMANENT", neigh, re.M), neigh
            assert len(neigh.strip().splitlines()) == 4 + k, neigh      # pair 1: its extra N3 peer
            sgi_neigh = _ns(ns, "ip", "neigh", "show", "dev", sgi).stdout
            assert re.fullmatch(rf"10\.202\.{k}\.2 lladdr {gw_mac} PERMANENT\s*", sgi_neigh), sgi_neigh
        assert re.search(rf"^10\.201\.1\.9 lladdr 02:00:00:0a:01:09 PERMANENT",
                         _ns(ns, "ip", "neigh", "show", "dev", a1).stdout, re.M)
        # the routes the DUT's FIB gives each pair's traffic: SGWs and PDN addresses out of their pair
        for dst, dev in (("10.201.0.17", a0), ("10.201.1.17", a1), ("198.18.0.5", s0), ("198.18.64.5", s1)):
            assert f"dev {dev} " in _ns(ns, "ip", "-4", "route", "get", dst).stdout, dst
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)


@pytest.mark.parametrize("change, message", [
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0"}], "dut_access_if": "eth1", "dut_sgi_if": "eth2"},
     "give dut_access_if/dut_sgi_if (one pair) or dut_pairs (several), not both"),
    ({"dut_pairs": [{"access_if": "a0"}]}, "dut_pairs: pair 0: sgi_if '': an interface name"),
    ({"dut_pairs": [{"access_if": "a0,a1", "sgi_if": "s0"}]}, "dut_pairs: pair 0: access_if 'a0,a1'"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0"}, {"access_if": "a0", "sgi_if": "s1"}]},
     "dut_pairs: pair 1: access_if a0 is already pair 0's"),
    ({"dut_pairs": [{"access_if": f"a{k}", "sgi_if": f"s{k}"} for k in range(5)]}, "dut_pairs: 5 pairs, at most 4"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0"}, {"access_if": "a1", "sgi_if": "s1",
                                                          "access_addr": "10.201.0.2/24"}]},
     "dut_pairs: pair 1: access_addr 10.201.0.2/24 overlaps pair 0's 10.201.0.1/24"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0"}, {"access_if": "a1", "sgi_if": "s1",
                                                          "pdn_prefix": "198.18.0.0/15"}]},
     "dut_pairs: pair 1: pdn_prefix 198.18.0.0/15 overlaps pair 0's 198.18.0.0/15"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0"}, {"access_if": "a1", "sgi_if": "s1", "pdn_gateway": "10.202.0.2"}]},
     "dut_pairs: pair 1: pdn_gateway 10.202.0.2 is not on sgi_addr 10.202.1.1/24's network"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0", "sgw_mac": "02:00:00:0a"}]}, "dut_pairs: pair 0: sgw_mac"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0", "sgw_base": "10.201.0.250"}]},
     "sgw_base 10.201.0.250 + sgw_count 64 must stay in one /24"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0", "neighbours": [{"addr": "10.201.0.9", "mac": "x"}]}]},
     "dut_pairs: pair 0: neighbours[0]"),
    ({"dut_pairs": [{"access_if": "a0", "sgi_if": "s0", "sgw": "10.201.0.16"}]}, "dut_pairs: pair 0: unknown key(s) sgw"),
    ({"dut_pairs": {"access_if": "a0"}}, "dut_pairs: dut_pairs: give a list"),
])
def test_dut_pairs_bad_input_refused(change, message):
    """Each bad dut_pairs is refused with one line naming the pair and the key (the role's filter,
    called as the role calls it, with the one-pair variables' defaults)."""
    mod = _dut_pairs_filter()
    d = yaml.safe_load((ANSIBLE / "roles/dut/defaults/main.yml").read_text())
    one = {"access_if": change.get("dut_access_if", ""), "sgi_if": change.get("dut_sgi_if", ""),
           **{k: d[f"dut_{k}"] for k in ("access_addr", "sgi_addr", "pdn_prefix", "pdn_gateway", "pdn_gateway_mac",
                                        "sgw_base", "sgw_count", "sgw_mac", "neighbours")}}
    with pytest.raises(mod.AnsibleFilterError) as e:
        mod.gtplab_dut_pairs(change["dut_pairs"], one)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_dut_pairs_filter_fills_the_contract():
    """Keys a pair leaves out: pair 0's from the one-pair variables, pair K's from the lab's
    addressing contract (gtplab/lab/generators.py: SGWs 10.201.K.16.., PDN 198.18.64K.1..); no
    dut_pairs: the one pair of dut_access_if/dut_sgi_if, or none."""
    from gtplab.lab.generators import PDN_BASE, SGW_BASE
    mod = _dut_pairs_filter()
    d = yaml.safe_load((ANSIBLE / "roles/dut/defaults/main.yml").read_text())
    one = {"access_if": "", "sgi_if": "", **{k: d[f"dut_{k}"] for k in (
        "access_addr", "sgi_addr", "pdn_prefix", "pdn_gateway", "pdn_gateway_mac", "sgw_base", "sgw_count",
        "sgw_mac", "neighbours")}}
    assert mod.gtplab_dut_pairs([], one) == []
    (p,) = mod.gtplab_dut_pairs([], {**one, "access_if": "eth1", "sgi_if": "eth2"})
    assert (p["access_addr"], p["pdn_prefix"], p["sgw_base"]) == ("10.201.0.1/24", "198.18.0.0/15", "10.201.0.16")
    pairs = mod.gtplab_dut_pairs([{"access_if": f"a{k}", "sgi_if": f"s{k}"} for k in range(4)], one)
    for k, p in enumerate(pairs[1:], 1):
        assert p["sgw_base"] == SGW_BASE.format(k=k)
        assert ipaddress.ip_address(PDN_BASE.format(o=64 * k)) in ipaddress.ip_network(p["pdn_prefix"])
        assert (p["access_addr"], p["sgi_addr"], p["pdn_gateway"]) == (f"10.201.{k}.1/24", f"10.202.{k}.1/24",
                                                                       f"10.202.{k}.2")
    assert pairs[0]["pdn_prefix"] == "198.18.0.0/15" and pairs[0]["sgw_count"] == 64


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_bad_pairs_nothing_rendered(tmp_path):
    """A bad dut_pairs fails the render (the role's templates call the filter) with its one line,
    and leaves no pgwu environment behind."""
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "dut", "-e", f"render_dir={tmp_path}",
                   "-e", json.dumps({"dut_access_if": "", "dut_sgi_if": "", "dut_pairs": [
                       {"access_if": "a0", "sgi_if": "s0"}, {"access_if": "a0", "sgi_if": "s1"}]}), timeout=120)
    assert cp.returncode != 0, cp.stdout[-3000:]
    assert "dut_pairs: pair 1: access_if a0 is already pair 0's" in cp.stdout, cp.stdout[-3000:]
    assert not list(tmp_path.rglob("pgwu"))


# ---- pgwu.service's commands, run the way systemd would, in a namespace of our own ---------------

def _unit_commands(unit: str, env: dict[str, str]) -> list[tuple[str, list[str], bool]]:
    """(directive, argv, ignore_failure) of each Exec* line, with systemd's $VAR / ${VAR} expansion."""
    cmds = []
    for line in unit.splitlines():
        m = re.match(r"^(ExecStartPre|ExecStart|ExecStopPost)=(.*)$", line)
        if not m:
            continue
        words, argv = shlex.split(m.group(2)), []
        ignore = words[0].startswith("-")
        words[0] = words[0].lstrip("-")
        for word in words:
            whole = re.fullmatch(r"\$(\w+)", word)
            if whole:  # $VAR: split into words
                argv += env.get(whole.group(1), "").split()
            else:      # ${VAR}: one word
                argv.append(re.sub(r"\$\{(\w+)\}", lambda v: env.get(v.group(1), ""), word))
        cmds.append((m.group(1), argv, ignore))
    return cmds


def _env_file(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key] = value[1:-1] if value[:1] == value[-1:] == '"' and len(value) > 1 else value
    return env


@pytest.mark.lab
@pytest.mark.timeout(300)
def test_pgwu_unit_attaches_and_exports(tmp_path):
    """The rendered pgwu.service + /etc/default/pgwu, executed step by step without systemd."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace and XDP")
    pgwu = pgwu_binary()
    if not os.access(pgwu, os.X_OK):
        pytest.fail(f"{pgwu} is not built: run `make -C dataplane` first")
    rid = secrets.token_hex(3)
    ns, pin = f"gtpans-{rid}", f"/sys/fs/bpf/gtpans-{rid}"
    acc, sgi = f"acc{rid}", f"sgi{rid}"
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "dut", "-e", f"render_dir={tmp_path}",
                   "-e", json.dumps({"dut_access_if": acc, "dut_sgi_if": sgi, "dut_pin_dir": pin,
                                     "dut_pgwu_bin": str(pgwu), "dut_metrics_address": "127.0.0.1",
                                     "dut_max_bearers": 4096}),
                   timeout=120)
    assert cp.returncode == 0, cp.stdout[-3000:]
    root = next(p for p in tmp_path.iterdir() if p.is_dir())
    env = _env_file((root / "etc/default/pgwu").read_text())
    cmds = _unit_commands((root / "etc/systemd/system/pgwu.service").read_text(), env)
    assert [c[0] for c in cmds].count("ExecStart") == 1
    # nsenter switches only the network namespace: /sys/fs/bpf stays visible (ip netns exec hides it).
    enter = ["nsenter", f"--net=/run/netns/{ns}"]
    run_env = dict(os.environ, PGWU_PIN_DIR=env["PGWU_PIN_DIR"])
    metrics = None
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        _ns(ns, "ip", "link", "set", "lo", "up")
        for dev in (acc, sgi):
            _ns(ns, "ip", "link", "add", dev, "type", "veth", "peer", "name", f"p{dev}")
            _ns(ns, "ip", "link", "set", dev, "up")
            _ns(ns, "ip", "link", "set", f"p{dev}", "up")
        for directive, argv, ignore in cmds:
            if directive != "ExecStartPre":
                continue
            r = subprocess.run(enter + argv, env=run_env, capture_output=True, text=True, timeout=60)
            assert ignore or r.returncode == 0, f"{directive}={' '.join(argv)} failed: {r.stderr}"
        for dev in (acc, sgi):
            assert "prog/xdp" in _ns(ns, "ip", "-d", "link", "show", dev).stdout, f"nothing attached to {dev}"

        (start,) = [argv for d, argv, _ in cmds if d == "ExecStart"]
        metrics = subprocess.Popen(enter + start, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        fetch = ("import urllib.request; print(urllib.request.urlopen('http://%s/metrics', timeout=2)"
                 ".read().decode())" % env["PGWU_METRICS_LISTEN"])
        deadline, body = time.monotonic() + 30, ""
        while time.monotonic() < deadline and metrics.poll() is None:
            r = subprocess.run(enter + [sys.executable, "-c", fetch], capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                body = r.stdout
                break
            time.sleep(0.3)
        assert metrics.poll() is None, f"pgwu metrics exited: {metrics.communicate()[1].decode()}"
        assert re.search(r"^pgwu_packets_total\{", body, re.M), f"no pgwu counters served:\n{body[:2000]}"
        metrics.terminate()
        metrics.wait(timeout=10)

        for directive, argv, ignore in cmds:
            if directive == "ExecStopPost":
                r = subprocess.run(enter + argv, env=run_env, capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, f"ExecStopPost={' '.join(argv)} failed: {r.stderr}"
        assert not os.path.exists(pin), "ExecStopPost left the pin dir"
        for dev in (acc, sgi):
            assert "prog/xdp" not in _ns(ns, "ip", "-d", "link", "show", dev).stdout
    finally:
        if metrics and metrics.poll() is None:
            metrics.kill()
            metrics.wait()
        if os.path.exists(pin):
            subprocess.run(enter + [str(pgwu), "-d", pin, "unload"], capture_output=True, check=False)
        if os.path.isdir(pin):
            shutil.rmtree(pin, ignore_errors=True)
        subprocess.run(["ip", "netns", "delete", ns], check=False)


# ---- the trex role's install path, on this machine with a release served from loopback ----------

def _fake_trex_release(path: Path, version: str, top: str | None = None) -> None:
    """A tarball laid out like a TRex release (<version>/t-rex-64, dpdk_nic_bind.py), or with another
    top folder (the runtime tarball of ../shared/trex has scripts/). Not TRex: only the role's
    download/unpack/link/config/unit steps are tested with it."""
    import tarfile
    import io
    with tarfile.open(path, "w:gz") as tar:
        for name, body in (("t-rex-64", "#!/bin/sh\necho fake t-rex-64 \"$@\"\n"),
                           ("dpdk_nic_bind.py", "#!/usr/bin/env python3\n")):
            data = body.encode()
            info = tarfile.TarInfo(f"{top or version}/{name}")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.lab
@pytest.mark.timeout(600)
def test_trex_role_installs_release(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("runs a role on this machine: needs root")
    from tests.lib.http_server import serving
    www = tmp_path / "www"
    www.mkdir()
    _fake_trex_release(www / "v9.01.tar.gz", "v9.01")
    _fake_trex_release(tmp_path / "local-v9.02.tar.gz", "v9.02", top="scripts")   # as shipped: scripts/
    with serving(directory=str(www)) as url:
        root = tmp_path / "root"
        common = {
            "trex_install_root": str(root / "opt/trex"),
            "trex_cfg_path": str(root / "trex_cfg.yaml"),
            "trex_systemd_dir": str(root),
            "trex_hugepages": "",                        # leave this machine's memory alone
            "trex_packages": ["python3", "kmod", "iproute2"],
            "trex_node_exporter": False,
            "trex_url": f"{url}/{{{{ trex_version }}}}.tar.gz",
            "trex_ports": [{"pci": "0000:00:1f.0", "dpdk_driver": "", "ip": "10.201.0.2", "gw": "10.201.0.1"},
                           {"pci": "0000:00:1f.1", "dpdk_driver": "", "ip": "10.202.0.2", "gw": "10.202.0.1"}],
        }
        root.mkdir()
        runs = []
        for extra in ({"trex_version": "v9.01"}, {"trex_version": "v9.01"},
                      {"trex_version": "v9.02", "trex_tarball": str(tmp_path / "local-v9.02.tar.gz")}):
            cp = _playbook("tests/trex_install.yml", "-e", json.dumps(common | extra), timeout=300)
            assert cp.returncode == 0, f"trex role failed:\n{cp.stdout[-5000:]}"
            runs.append(cp.stdout)
            if extra["trex_version"] == "v9.01" and len(runs) == 1:
                assert os.readlink(root / "opt/trex/current") == str(root / "opt/trex/v9.01")
                assert (root / "opt/trex/v9.01/t-rex-64").stat().st_mode & 0o111
    assert _recap(runs[0])["changed"] >= 4, runs[0][-3000:]   # download, unpack, link, cfg, unit
    assert _recap(runs[1])["changed"] == 0, f"2nd run changed: {_changed_tasks(runs[1])}"
    # The local tarball of another version, laid out as the runtime tarball (top folder scripts/, the
    # old role failed at 'Point current at this release'): copied, unpacked, current moved to it.
    assert os.readlink(root / "opt/trex/current") == str(root / "opt/trex/v9.02")
    assert (root / "opt/trex/v9.02/t-rex-64").stat().st_mode & 0o111
    assert (root / "opt/trex/v9.02.tar.gz").read_bytes() == (tmp_path / "local-v9.02.tar.gz").read_bytes()
    cfg = yaml.safe_load((root / "trex_cfg.yaml").read_text())[0]
    assert cfg["interfaces"] == ["0000:00:1f.0", "0000:00:1f.1"]
    unit = (root / "trex.service").read_text()
    assert f"ExecStart={root}/opt/trex/current/t-rex-64 -i -c 2 --cfg {root}/trex_cfg.yaml --iom 0" in unit
    assert "Environment=PYTHON3=/usr/bin/python3" in unit
    if Path("/proc/1/comm").read_text().strip() != "systemd":
        assert "trex.service is installed but not started" in runs[1]


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_pfcp_unit_rendered(rendered):
    """pgwu-pfcp.service runs `pgwu pfcp` on the maps pgwu.service pins, and follows its restarts."""
    (host,) = _hosts()["dut"]["hosts"]
    root = rendered / host
    env = dict(line.split("=", 1) for line in (root / "etc/default/pgwu").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["PGWU_PFCP_LISTEN"] == "0.0.0.0:8805"
    assert env["PGWU_PFCP_ARGS"] == '""'
    unit = (root / "etc/systemd/system/pgwu-pfcp.service").read_text()
    assert re.search(r"^ExecStart=/usr/local/sbin/pgwu pfcp --listen \$\{PGWU_PFCP_LISTEN\} \$PGWU_PFCP_ARGS$",
                     unit, re.M)
    for dep in ("Requires=pgwu.service", "After=pgwu.service", "PartOf=pgwu.service",
                "EnvironmentFile=/etc/default/pgwu"):
        assert re.search(rf"^{dep}$", unit, re.M), dep


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_pfcp_args_rendered(tmp_path):
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "-e", f"render_dir={tmp_path}", "-e",
                   "dut_pfcp_node_id=upf.example.org", "-e", "dut_pfcp_heartbeat=5")
    assert cp.returncode == 0, f"render.yml failed:\n{cp.stdout[-4000:]}{cp.stderr[-2000:]}"
    (host,) = _hosts()["dut"]["hosts"]
    env = dict(line.split("=", 1) for line in (tmp_path / host / "etc/default/pgwu").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["PGWU_PFCP_ARGS"] == '"--node-id upf.example.org --heartbeat 5"'


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_sport_entropy_off_rendered(tmp_path):
    """dut_sport_entropy: off (peers that need source port 2152) reaches `pgwu load`."""
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "-e", f"render_dir={tmp_path}", "-e",
                   "dut_sport_entropy=off")
    assert cp.returncode == 0, f"render.yml failed:\n{cp.stdout[-4000:]}{cp.stderr[-2000:]}"
    (host,) = _hosts()["dut"]["hosts"]
    env = dict(line.split("=", 1) for line in (tmp_path / host / "etc/default/pgwu").read_text().splitlines()
               if line and not line.startswith("#"))
    assert "--csum on --sport-entropy off" in env["PGWU_LOAD_ARGS"], env["PGWU_LOAD_ARGS"]


# ---- issue 34: roles that fail when the host is not working ---------------------------------------

def _local_lab_inventory(path: Path, **group_vars: dict) -> Path:
    """An inventory of three hosts (monitoring, dut, trex), all this machine over connection local,
    without become (the tests run as root or fail before anything needs it)."""
    groups = {}
    for group in ("monitoring", "dut", "trex"):
        host = {"ansible_connection": "local", "ansible_become": False,
                "ansible_python_interpreter": sys.executable}
        groups[group] = {"hosts": {f"gtplab-test-{group}": host}, "vars": group_vars.get(group, {})}
    path.write_text(yaml.safe_dump({"all": {"children": groups}}))
    return path


def test_site_plays_independent(tmp_path):
    """A failing play does not end the run: with each role's variables refused, all three plays run
    (the old site.yml stopped after the monitoring play: 'NO MORE HOSTS LEFT'), every host is reported
    failed with what failed, and the run fails. Each role checks its variables before touching the host."""
    inv = _local_lab_inventory(tmp_path / "hosts.yml",
                               monitoring={"monitoring_prometheus_listen": "nowhere"},
                               dut={"dut_xdp_mode": "bogus"},
                               trex={"trex_ports": [{"pci": "0000:3b:00.0", "ip": "10.201.0.2", "gw": "10.201.0.1"}]})
    cp = _playbook("-i", str(inv), "site.yml", timeout=300)
    out = cp.stdout
    assert cp.returncode != 0, out[-3000:]
    assert "monitoring_prometheus_listen and monitoring_pushgateway_listen must be" in out, out[-4000:]
    assert "Set both dut_access_if and dut_sgi_if" in out, out[-4000:]
    assert "trex_ports must list an even number" in out, out[-4000:]
    recap = dict(re.findall(r"^(gtplab-test-\w+)\s+:\s+(.*)$", out, re.M))
    assert set(recap) == {"gtplab-test-monitoring", "gtplab-test-dut", "gtplab-test-trex"}, out[-2000:]
    for host, line in recap.items():
        assert re.search(r"failed=1\b", line) and re.search(r"rescued=1\b", line), f"{host}: {line}"
    assert re.search(r"fatal: \[gtplab-test-dut\].*dut: Check the DUT variables", out), out[-3000:]


def test_grafana_unreachable_skipped_with_message(tmp_path):
    """Grafana's repository unreachable: Grafana is skipped with a message saying so and how to get it,
    and the run goes on (the old role failed the play at 'Install Grafana'). Check mode: nothing on this
    machine changes; the probe runs for real. monitoring_grafana_required: true makes it an error."""
    common = ["tests/grafana.yml", "--check",
              "-e", "monitoring_grafana_repo_url=http://127.0.0.1:9"]
    cp = _playbook(*common, timeout=180)
    assert cp.returncode == 0, cp.stdout[-4000:]
    assert "Grafana is SKIPPED on localhost" in cp.stdout, cp.stdout[-3000:]
    assert "monitoring_grafana_deb" in cp.stdout
    assert re.search(r"TASK \[monitoring : Install Grafana\] \*+\nskipping", cp.stdout), cp.stdout[-3000:]
    cp = _playbook(*common, "-e", "monitoring_grafana_required=true", timeout=180)
    assert cp.returncode != 0 and "Grafana is SKIPPED on localhost" in cp.stdout, cp.stdout[-3000:]


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_dut_n6_gateway_and_peer_neighbours_rendered(tmp_path):
    """The N6 gateway's MAC (TRex's SGi port in dest_mac mode answers no ARP for it) and further
    neighbours are role variables: gtplab-dut-setup adds them as permanent entries."""
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "-e", f"render_dir={tmp_path}", "-e", json.dumps({
        "dut_pdn_gateway_mac": "02:00:00:00:0B:02",
        "dut_neighbours": [{"addr": "10.201.0.9", "mac": "02:00:00:00:0a:09", "side": "access"},
                           {"addr": "10.202.0.9", "mac": "02:00:00:00:0b:09", "side": "sgi"}]}))
    assert cp.returncode == 0, f"render.yml failed:\n{cp.stdout[-4000:]}{cp.stderr[-2000:]}"
    (host,) = _hosts()["dut"]["hosts"]
    script = tmp_path / host / "usr/local/sbin/gtplab-dut-setup"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert 'neigh 10.202.0.2 02:00:00:00:0b:02 "$SGI_IF"' in text, text[-1500:]
    assert 'neigh 10.201.0.9 02:00:00:00:0a:09 "$ACCESS_IF"' in text
    assert 'neigh 10.202.0.9 02:00:00:00:0b:09 "$SGI_IF"' in text


@pytest.mark.lab     # the roles install their files owned by root: rendering them needs root
def test_trex_af_packet_ports_rendered(tmp_path):
    """af_packet ports (kernel interfaces through DPDK's af_packet PMD: veths, containers) beside PCI
    ones; low_end for one-core hosts (the old role refused any port without a PCI id)."""
    extra = {"trex_ports": [{"af_packet": "eth1", "dest_mac": "02:00:00:00:0a:01"},
                            {"af_packet": "eth2", "dest_mac": "02:00:00:00:0b:01"}],
             "trex_low_end": True, "trex_low_end_core": 1}
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "trex",
                   "-e", f"render_dir={tmp_path}", "-e", json.dumps(extra), timeout=120)
    assert cp.returncode == 0, cp.stdout[-4000:]
    (host,) = _hosts()["trex"]["hosts"]
    cfg = yaml.safe_load((tmp_path / host / "trex_cfg.yaml").read_text())[0]
    assert cfg["interfaces"] == [
        f"--vdev=net_af_packet{i},iface=eth{i + 1},blocksz=4096,framesz=4096,framecnt=4096" for i in (0, 1)]
    assert cfg["low_end"] is True and cfg["low_end_core"] == 1 and "platform" not in cfg
    assert cfg["port_info"][1] == {"dest_mac": "02:00:00:00:0b:01"}
    # a port naming both kinds, or neither, is refused
    bad = {"trex_ports": [{"af_packet": "eth1", "pci": "0000:3b:00.0", "ip": "1.1.1.1", "gw": "1.1.1.2"},
                          {"af_packet": "eth2", "ip": "1.1.1.2", "gw": "1.1.1.1"}], "trex_low_end": True}
    cp = _playbook("-i", str(EXAMPLE), "tests/render.yml", "--limit", "trex",
                   "-e", f"render_dir={tmp_path}/bad", "-e", json.dumps(bad), timeout=120)
    assert cp.returncode != 0 and "trex_ports must list an even number" in cp.stdout


def test_trex_packages_have_distutils():
    """TRex v3.08's start scripts import distutils.util: without python3-distutils trex.service
    crash-loops on Debian 12 ('No module named distutils.util')."""
    defaults = yaml.safe_load((ANSIBLE / "roles/trex/defaults/main.yml").read_text())
    assert "python3-distutils" in defaults["trex_packages"]


def test_trex_rpc_check_fails_without_trex(tmp_path):
    """After starting trex.service the role asks TRex for its version over RPC: nothing answering on the
    port (a crash loop) fails the play with the port and the time waited (the old role had no check:
    failed=0 with TRex dead). Uses the client of the runtime tarball, when it is there."""
    from gtplab.lab import trex_server
    try:
        tdir = trex_server.resolve()
    except trex_server.TrexUnavailable as e:
        pytest.skip(f"no TRex runtime: {e}")
    except PermissionError as e:               # the cache is root's: a user who may not read it has none
        pytest.skip(f"no TRex runtime this user may read: {e}")
    root = tmp_path / "opt"
    root.mkdir()
    (root / "current").symlink_to(tdir)
    with __import__("socket").socket() as s:     # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cp = _playbook("tests/trex_check.yml", "-e", json.dumps({
        "trex_install_root": str(root), "trex_rpc_port": port, "trex_check_timeout": 5,
        "trex_check_systemd": False}), timeout=180)
    assert cp.returncode != 0, cp.stdout[-3000:]
    assert f"TRex does not answer RPC on 127.0.0.1:{port} after 5 s" in cp.stdout, cp.stdout[-3000:]
