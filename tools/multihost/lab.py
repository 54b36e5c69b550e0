#!/usr/bin/env python3
"""The real lab on one machine (issue 34.B): three systemd-nspawn container hosts (monitoring, dut,
trex; this machine is the Ansible controller), provisioned by ansible/site.yml.

    sudo .venv/bin/python tools/multihost/lab.py run [--keep] [--no-sweep]

- Root filesystems: debootstrap minbase (systemd, openssh, python3) once, cached in
  /var/cache/gtplab-multihost/<release>-<hash>/ and copied per host for each run.
- A management bridge `gtplmh-<hex>-br` (a /24 picked from 10.0.0.0/8 that no host route uses),
  each container on it through `--network-bridge`; the controller is the bridge's .1.
- The hosts reach only the Debian archive, through a small HTTP proxy on the bridge address
  (ArchiveProxy: GET/HEAD for deb.debian.org and security.debian.org, nothing else).
- Data veths, two generator port pairs: trex eth1 <-> dut eth1 (access) and trex eth2 <-> dut eth2
  (SGi), pair 1 on eth3 <-> eth3 (access) and eth4 <-> eth4 (SGi), moved into the containers after
  boot (`--network-interface` needs udev). Fixed MACs, so the inventory can name them. One TRex server
  with the four as af_packet ports 0-3; the DUT's pgwu attached to both pairs (the dut role's
  dut_pairs: `pgwu attach --access eth1,eth3 --sgi eth2,eth4`).
- The DUT gets a bpffs instance of its own at /sys/fs/bpf and the bpf/perf_event_open syscalls; the
  TRex host /sys/module read-only (DPDK's EAL reads it).
- Everything is named gtplmh-<hex>-*, and removed at the end, also on failure, Ctrl-C and SIGTERM.

Then `gtplab sweep --backend trex` (a lab config written for these hosts, dut.ssh with the run's key)
through the TRex host against the DUT host, each case pushed to the monitoring host's Pushgateway
and queried back from its Prometheus; then the same sweep with its sessions over PFCP: the DUT host
runs `pgwu pfcp` (the dut role's pgwu-pfcp.service, dut_pfcp: true) on its management address, and
gtplab, on the controller, is its control plane over the management network (N4), as an SMF on
another host is. Then `gtplab pairs` over both port pairs at once (lab config `generators:`), uplink
and downlink, through the one TRex server against the DUT host, conservation exact over both pairs,
each pair's packets back on that pair, background frames on all four links counted on their pair.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("GTPLAB_MULTIHOST_CACHE", "/var/cache/gtplab-multihost"))
STATE = Path("/var/lib/gtplab-multihost")
RELEASE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2", "ca-certificates"]
ARCHIVE_HOSTS = {"deb.debian.org", "security.debian.org"}
HOSTS = ("monitoring", "dut", "trex")
MACS = {"trex1": "02:6d:68:00:0a:01", "dut1": "02:6d:68:00:0a:02",    # pair 0: access (N3/S1-U)
        "trex2": "02:6d:68:00:0b:01", "dut2": "02:6d:68:00:0b:02",    #         SGi (N6)
        "trex3": "02:6d:68:00:0c:01", "dut3": "02:6d:68:00:0c:02",    # pair 1: access
        "trex4": "02:6d:68:00:0d:01", "dut4": "02:6d:68:00:0d:02"}    #         SGi
SIDES = ("1", "2", "3", "4")      # the data links: ethN on both hosts, TRex port N-1
# each data link's addresses (DUT host, its peer behind the TRex host): the dut role's pair K
# (10.201.K.1/24 access, 10.202.K.1/24 SGi, the N6 gateway 10.202.K.2), for the background frames
LINK_IPS = {"1": ("10.201.0.1", "10.201.0.250"), "2": ("10.202.0.1", "10.202.0.2"),
            "3": ("10.201.1.1", "10.201.1.250"), "4": ("10.202.1.1", "10.202.1.2")}
PAIRS_RATE_PPS = 20000            # gtplab pairs: per pair, 128 B, 16 flows, 2 trials of 3 s a direction
PAIRS_TRIALS = 2
TREX_TARBALL = REPO.parent / "shared" / "trex" / "trex-v3.08-runtime.tgz"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(*argv: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    cp = subprocess.run(list(argv), text=True, capture_output=True, **kw)
    if check and cp.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {cp.returncode}: {cp.stderr.strip()[-1000:]}")
    return cp


# ---- the Debian-archive-only proxy ------------------------------------------------------------------

class ArchiveProxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    def _forward(self, head: bool) -> None:
        url = self.path
        host = urllib.request.urlparse(url).hostname or ""
        if not url.startswith("http://") or host not in ARCHIVE_HOSTS:
            self.send_error(403, f"gtplab-multihost proxy: only {', '.join(sorted(ARCHIVE_HOSTS))}")
            return
        req = urllib.request.Request(url, method="HEAD" if head else "GET")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                self.send_response(r.status)
                for k, v in r.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.end_headers()
                if not head:
                    shutil.copyfileobj(r, self.wfile, 1 << 16)
        except urllib.error.HTTPError as e:
            self.send_error(e.code, str(e.reason))
        except OSError as e:
            self.send_error(502, str(e))

    def do_GET(self):  # noqa: N802
        self._forward(False)

    def do_HEAD(self):  # noqa: N802
        self._forward(True)

    def log_message(self, *a):
        pass


# ---- root filesystems ------------------------------------------------------------------------------

def base_rootfs() -> Path:
    """The cached debootstrap tree (built once: ~2.5 min, ~330 MB)."""
    key = hashlib.sha256(" ".join([RELEASE, MIRROR] + PACKAGES).encode()).hexdigest()[:12]
    base = CACHE / f"{RELEASE}-{key}"
    if (base / ".gtplab-complete").exists():
        return base
    tmp = CACHE / f".{base.name}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log(f"debootstrap {RELEASE} into {base} (once; cached)")
    t0 = time.monotonic()
    cp = sh("debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", RELEASE, str(tmp), MIRROR,
            check=False)
    if cp.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(f"debootstrap failed:\n{cp.stdout[-2000:]}{cp.stderr[-2000:]}")
    (tmp / "etc/machine-id").write_text("")           # each boot makes its own
    (tmp / ".gtplab-complete").write_text(f"{time.monotonic() - t0:.0f} s\n")
    tmp.rename(base)
    log(f"debootstrap done in {time.monotonic() - t0:.0f} s")
    return base


# ---- the lab -------------------------------------------------------------------------------------

class Lab:
    def __init__(self, keep: bool = False):
        self.tag = f"gtplmh-{secrets.token_hex(2)}"     # + "-br", "-t1": interface names <= 15
        self.dir = STATE / self.tag
        self.keep = keep
        self.bridge = f"{self.tag}-br"
        self.net = self._free_net()
        self.gw = str(self.net.network_address + 1)
        self.addr = {h: str(self.net.network_address + 10 + i) for i, h in enumerate(HOSTS)}
        self.procs: dict[str, subprocess.Popen] = {}
        self.leaders: dict[str, int] = {}
        self.proxy: ArchiveProxy | None = None
        self.bpffs = self.dir / "bpffs"
        self.times: dict[str, float] = {}

    @staticmethod
    def _free_net() -> ipaddress.IPv4Network:
        used = []
        for line in sh("ip", "-4", "route", "show", "table", "all").stdout.splitlines() + \
                sh("ip", "-4", "-o", "addr").stdout.split():
            word = line.split()[0] if line.split() else ""
            try:
                used.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                pass
        for _ in range(200):
            net = ipaddress.ip_network(f"10.{secrets.randbelow(50) + 200}.{secrets.randbelow(256)}.0/24")
            if net.subnet_of(ipaddress.ip_network("10.200.0.0/14")):     # the lab's own data ranges
                continue
            if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
                return net
        sys.exit("no free /24 in 10.200.0.0/11 for the management bridge")

    # -- up --
    def up(self) -> None:
        t0 = time.monotonic()
        base = base_rootfs()
        self.times["rootfs_cache"] = time.monotonic() - t0
        self.dir.mkdir(parents=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / "id"))
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gw}/{self.net.prefixlen}", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        self.proxy = ArchiveProxy((self.gw, 0), _ProxyHandler)
        threading.Thread(target=self.proxy.serve_forever, daemon=True).start()
        t1 = time.monotonic()
        for host in HOSTS:
            self._make_root(base, host)
        self.times["copy_roots"] = time.monotonic() - t1
        self.bpffs.mkdir()
        sh("mount", "-t", "bpf", "bpf", str(self.bpffs))            # a bpffs instance of the DUT's own
        t1 = time.monotonic()
        for host in HOSTS:
            self._boot(host)
        for host in HOSTS:
            self._net(host)
        self._data_links()
        for host in HOSTS:
            self._wait_ssh(host)
        self.times["boot"] = time.monotonic() - t1
        log(f"hosts up: {self.addr} (bridge {self.bridge}, proxy {self.gw}:{self.proxy.server_port})")

    def _make_root(self, base: Path, host: str) -> None:
        root = self.dir / host
        sh("cp", "-a", "--reflink=auto", str(base), str(root))
        (root / "etc/hostname").write_text(f"{host}\n")
        (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 {host}\n")
        ssh = root / "root/.ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_text((self.dir / "id.pub").read_text())
        (root / "etc/apt/apt.conf.d/90gtplab-proxy").write_text(
            f'Acquire::http::Proxy "http://{self.gw}:{self.proxy.server_port}";\n')
        # the console getty has no console here
        for unit in ("console-getty.service", "getty@tty1.service"):
            (root / "etc/systemd/system" / unit).unlink(missing_ok=True)
            (root / "etc/systemd/system" / unit).symlink_to("/dev/null")

    def _boot(self, host: str) -> None:
        argv = ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "--boot", "--console=passive",
                "-D", str(self.dir / host), "-M", f"{self.tag}-{host[:3]}", f"--network-bridge={self.bridge}",
                "--capability=CAP_IPC_LOCK,CAP_BPF,CAP_PERFMON,CAP_NET_ADMIN,CAP_SYS_RESOURCE"]
        if host == "dut":
            argv += [f"--bind={self.bpffs}:/sys/fs/bpf", "--system-call-filter=bpf perf_event_open"]
        if host == "trex":
            argv += ["--bind-ro=/sys/module", "--system-call-filter=perf_event_open"]
        out = open(self.dir / f"{host}.console", "w")
        self.procs[host] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    def _leader(self, host: str, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        parent = self.procs[host].pid
        while time.monotonic() < deadline:
            if self.procs[host].poll() is not None:
                sys.exit(f"{host}: systemd-nspawn exited: {(self.dir / f'{host}.console').read_text()[-2000:]}")
            for pid in sh("ps", "-o", "pid=", "--ppid", str(parent), check=False).stdout.split():
                try:        # nspawn's transient outer child may be gone between ps and here
                    if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                        return int(pid)
                except OSError:
                    pass
            time.sleep(0.2)
        sys.exit(f"{host}: no container init after {timeout} s")

    def _nsip(self, host: str, *args: str) -> None:
        sh("nsenter", "-t", str(self.leaders[host]), "-n", "ip", *args)

    def _net(self, host: str) -> None:
        self.leaders[host] = self._leader(host)
        deadline = time.monotonic() + 20
        while sh("nsenter", "-t", str(self.leaders[host]), "-n", "ip", "link", "show", "host0",
                 check=False).returncode and time.monotonic() < deadline:
            time.sleep(0.2)
        self._nsip(host, "addr", "add", f"{self.addr[host]}/{self.net.prefixlen}", "dev", "host0")
        self._nsip(host, "link", "set", "host0", "up")
        self._nsip(host, "route", "add", "default", "via", self.gw)

    def _data_links(self) -> None:
        for side in SIDES:
            a, b = f"{self.tag}-t{side}", f"{self.tag}-d{side}"
            sh("ip", "link", "add", a, "mtu", "3200", "address", MACS[f"trex{side}"], "type", "veth",
               "peer", "name", b, "mtu", "3200", "address", MACS[f"dut{side}"])
            for dev, host in ((a, "trex"), (b, "dut")):
                sh("ip", "link", "set", dev, "netns", str(self.leaders[host]))
                self._nsip(host, "link", "set", dev, "name", f"eth{side}")
                self._nsip(host, "link", "set", f"eth{side}", "up")

    def ssh_argv(self, host: str) -> list[str]:
        return ["ssh", "-i", str(self.dir / "id"), "-o", "StrictHostKeyChecking=no", "-o",
                "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=3",
                f"root@{self.addr[host]}"]

    def _wait_ssh(self, host: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sh(*self.ssh_argv(host), "true", check=False).returncode == 0:
                return
            time.sleep(1)
        sys.exit(f"{host}: no ssh after {timeout} s")

    # -- ansible --
    def inventory(self) -> Path:
        common = {"ansible_user": "root", "ansible_ssh_private_key_file": str(self.dir / "id"),
                  "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                  "ansible_python_interpreter": "/usr/bin/python3"}
        inv = {"all": {"vars": common, "children": {
            "monitoring": {"hosts": {"mon1": {"ansible_host": self.addr["monitoring"]}},
                           "vars": {"monitoring_grafana_repo_timeout": 5}},
            "dut": {"hosts": {"dut1": {"ansible_host": self.addr["dut"]}}, "vars": {
                # two generator port pairs: pair 0 as the one-pair lab had it (its PDN prefix narrowed
                # to pair 0's /18), pair 1 on the role's defaults for pair 1 (10.201.1.1/24,
                # 10.202.1.1/24, 198.18.64.0/18 via 10.202.1.2, SGWs 10.201.1.16..)
                "dut_pairs": [
                    {"access_if": "eth1", "sgi_if": "eth2", "pdn_prefix": "198.18.0.0/18",
                     "sgw_mac": MACS["trex1"], "pdn_gateway_mac": MACS["trex2"]},
                    {"access_if": "eth3", "sgi_if": "eth4", "sgw_mac": MACS["trex3"], "pdn_gateway_mac": MACS["trex4"]}],
                "dut_xdp_mode": "generic", "dut_max_bearers": 65536,
                "dut_sysctls": {"net.ipv4.ip_forward": 1, "net.ipv4.conf.all.rp_filter": 0,
                                "net.ipv4.conf.default.rp_filter": 0},
                "dut_pfcp": True, "dut_pfcp_listen": f"{self.addr['dut']}:8805"}},
            "trex": {"hosts": {"trex1": {"ansible_host": self.addr["trex"]}}, "vars": {
                "trex_version": "v3.08", "trex_tarball": str(TREX_TARBALL), "trex_hugepages": "",
                "trex_low_end": True, "trex_low_end_core": 0, "trex_extra_args": "--iom 0 --no-scapy-server",
                "trex_ports": [{"af_packet": f"eth{side}", "dest_mac": MACS[f"dut{side}"]} for side in SIDES]}},
        }}}
        path = self.dir / "hosts.yml"
        path.write_text(json.dumps(inv, indent=1))
        return path

    def site(self) -> int:
        t0 = time.monotonic()
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible/ansible.cfg"), ANSIBLE_NOCOLOR="1")
        with open(self.dir / "site.log", "w") as out:
            rc = subprocess.run([str(REPO / ".venv/bin/ansible-playbook"), "-i", str(self.inventory()), "site.yml"],
                                cwd=REPO / "ansible", env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        self.times["site_yml"] = time.monotonic() - t0
        text = (self.dir / "site.log").read_text()
        log("site.yml rc=%d in %.0f s\n%s" % (rc, self.times["site_yml"], text[text.rfind("PLAY RECAP"):]))
        return rc

    # -- the sweep through the TRex host against the DUT host, results into the monitoring host --
    def lab_config(self, pfcp: bool = False, pairs: bool = False) -> dict:
        dut, trex = self.addr["dut"], self.addr["trex"]
        cfg = {"name": self.tag, "description": "tools/multihost: nspawn hosts, af_packet TRex, generic-XDP pgwu",
               "backend": "trex", "trex_server": f"{trex}:4501", "ports": {"access": 0, "sgi": 1},
               "port_speed_bps": 1e9, "max_rate_pps": 100000, "cpu_shared_with_generator": True,
               "dut": {"metrics_url": f"http://{dut}:9464/metrics", "node_exporter_url": f"http://{dut}:9100/metrics",
                       "ssh": {"host": dut, "user": "root", "key": str(self.dir / "id"),
                               "options": ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                           "-o", "LogLevel=ERROR"]},
                       "pgwu": "/usr/local/sbin/pgwu", "pin_dir": "/sys/fs/bpf/pgwu"}}
        if pairs:
            # both port pairs of the one TRex server; each pair's SGWs and PDN addresses the
            # defaults for pair K (10.201.K.16.., 198.18.64K.1..), routed by the dut role's dut_pairs
            del cfg["ports"]
            cfg["generators"] = [{"ports": {"access": 0, "sgi": 1}}, {"ports": {"access": 2, "sgi": 3}}]
        if pfcp:
            # gtplab as the DUT host's control plane over the management network: the DUT host's
            # pgwu pfcp listens on its management address (dut_pfcp_listen); gtplab's node on the
            # bridge address, on a port of its own (CI's labs and others may hold 8805 here)
            cfg["dut"].update(provision="pfcp", pfcp={
                "upf": f"{dut}:8805", "local": self.gw, "node_id": self.gw, "listen_port": 0,
                "n3": "10.201.0.1", "n6": "10.202.0.1", "release_wait": 1})
        return cfg

    def background_hook(self, name: str, sides: tuple[str, ...] = ("1", "2")) -> str:
        """The sweep's (and gtplab pairs') --on-trial-start: tools/multihost/background.py writes
        background frames on the data links of `sides` from both ends (the DUT host's and the TRex
        host's stacks, through packet sockets) in the middle of every trial; what it sent goes to
        <name>-background.jsonl."""
        links = []
        for side in sides:
            dut_ip, peer_ip = LINK_IPS[side]
            links.append({"host": "dut", "ifname": f"eth{side}", "src_mac": MACS[f"dut{side}"],
                          "dst_mac": MACS[f"trex{side}"], "src_ip": dut_ip, "dst_ip": peer_ip})
            links.append({"host": "trex", "ifname": f"eth{side}", "src_mac": MACS[f"trex{side}"],
                          "dst_mac": MACS[f"dut{side}"], "src_ip": peer_ip, "dst_ip": dut_ip})
        spec = self.dir / f"{name}-background.json"
        spec.write_text(json.dumps({"ssh": {h: self.ssh_argv(h) for h in ("dut", "trex")}, "links": links}))
        return (f"{sys.executable} {REPO / 'tools/multihost/background.py'} {spec} "
                f">> {self.dir / f'{name}-background.jsonl'}")

    def background_check(self, name: str, out: Path) -> tuple[bool, str]:
        """The hook wrote the same frames in every trial of the sweep (its log: one line per trial,
        the cases' cost trials included). Every trial the cases record has its conservation exact
        with the background counted by kind, each kind the TRex host sent into the DUT counted
        there (to_dut_ingress, to_dut_other_port) and each kind the DUT host sent counted as
        received by TRex (generator_rx)."""
        log_file = self.dir / f"{name}-background.jsonl"
        sent = [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()] if log_file.exists() else []
        cases = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()] \
            if (out / "cases.jsonl").exists() else []
        trials = [(c["direction"], t) for c in cases for t in c.get("trials") or []]
        bad, sums, exact = [], {}, 0
        if not sent or len(sent) < len(trials) or not trials:
            bad.append(f"{len(trials)} recorded trials, background written in {len(sent)}")
        for direction, t in trials if sent else []:
            cons = t["conservation"]
            bg = cons.get("background")
            tx, rx = ("eth1", "eth2") if direction == "uplink" else ("eth2", "eth1")
            want = {"to_dut_ingress": sent[0]["trex"][tx], "to_dut_other_port": sent[0]["trex"][rx],
                    "generator_rx": sent[0]["dut"][rx]}
            if not cons["ok"] or bg is None:
                bad.append(f"{direction}: ok {cons['ok']}, background {bg}, errors {cons['errors']}")
                continue
            short = {place: {k: (n, (bg[place] or {}).get(k, 0)) for k, n in kinds.items()
                             if (bg[place] or {}).get(k, 0) < n} for place, kinds in want.items()}
            short = {k: v for k, v in short.items() if v}
            if short:
                bad.append(f"{direction}: sent, counted {short}")
            else:
                exact += 1
            sums[direction] = {**bg, "dut_background": cons.get("dut_background")}
        return not bad, (f"background written in {len(sent)} trials; of the cases' {len(trials)} recorded "
                         f"trials, exact with it, each kind counted: {exact}; counted {json.dumps(sums)}"
                         + (f"; FAILED: {bad}" if bad else ""))

    def _run_sweep(self, name: str, cfg: dict, push: bool) -> tuple[int, Path]:
        (self.dir / f"{name}.json").write_text(json.dumps(cfg, indent=1))
        out = self.dir / f"results-{name}"
        t0 = time.monotonic()
        with open(self.dir / f"{name}.log", "w") as f:
            rc = subprocess.run([str(REPO / ".venv/bin/gtplab"), "sweep", "--lab-config", str(self.dir / f"{name}.json"),
                                 *(["--pushgateway", f"http://{self.addr['monitoring']}:9091"] if push else []),
                                 "--out", str(out), "--sizes", "128",
                                 "--directions", "uplink,downlink", "--flow-modes", "single", "--flows", "16", "--bearers", "16",
                                 "--checksum", "on", "--rate-mode", "fixed", "--rate", "20000", "--duration", "3",
                                 "--no-latency", "--no-scale", "--on-trial-start", self.background_hook(name)],
                                cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
        self.times[name] = time.monotonic() - t0
        log(f"{name} rc={rc} in {self.times[name]:.0f} s: {(self.dir / f'{name}.log').read_text()[-1500:]}")
        ok, msg = self.background_check(name, out)
        log(f"{name} {msg}")
        return (rc or (0 if ok else 1)), out

    def sweep_pfcp(self) -> int:
        """The sweep again, its 16 sessions established over N4 with the DUT host's pgwu pfcp: every
        case forwarded all it was sent, and each was provisioned over PFCP (the results' bearers-pfcp
        file: the F-TEIDs the agent holds)."""
        rc, out = self._run_sweep("sweep_pfcp", self.lab_config(pfcp=True), push=False)
        cases = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()] if rc == 0 else []
        lost = {c.get("case_id"): (c.get("tx_packets"), c.get("rx_packets")) for c in cases
                if not c.get("tx_packets") or c.get("rx_packets") != c.get("tx_packets")}
        provisioned = sorted(x.name for x in out.glob("bearers-pfcp*.txt")) if out.is_dir() else []
        log(f"PFCP over the management network: {len(cases)} cases, not all forwarded: {lost or 'none'}, "
            f"sessions files {provisioned}")
        return rc or (1 if lost or not cases or not provisioned else 0)

    def sweep(self) -> int:
        mon = self.addr["monitoring"]
        rc, out = self._run_sweep("sweep", self.lab_config(), push=True)
        # pushed per case to the Pushgateway, scraped by Prometheus (honor_labels): query it back
        deadline, series = time.monotonic() + 30, []
        while time.monotonic() < deadline and not series:
            q = urllib.parse.quote('gtplab_case_offered_packets_per_second{job="gtplab_sweep"}')
            with urllib.request.urlopen(f"http://{mon}:9090/api/v1/query?query={q}", timeout=10) as r:
                series = json.load(r)["data"]["result"]
            time.sleep(2)
        log(f"Prometheus on the monitoring host has {len(series)} case series: "
            + ", ".join(f"{x['metric'].get('direction')}={x['value'][1]}" for x in series))
        return rc if series else (rc or 1)

    # -- gtplab pairs: both generator port pairs in one case --
    def pairs_check(self, name: str, direction: str, out: Path) -> tuple[bool, str]:
        """Every trial of `gtplab pairs` (its -o file): both pairs drove packets, conservation exact
        over the sums, each pair's packets came back on that pair (rx == tx: the DUT's routes of the
        dut role's dut_pairs), and the background the hook wrote on each link counted on its pair:
        what the TRex host sent on a pair's tx link as to_dut_ingress, on its rx link as
        to_dut_other_port, what the DUT host sent on the rx link as that pair's generator_rx."""
        log_file = self.dir / f"{name}-background.jsonl"
        sent = [json.loads(x) for x in log_file.read_text().splitlines() if x.strip()] if log_file.exists() else []
        trials = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.exists() else []
        bad, exact, figures = [], 0, []
        if len(trials) != PAIRS_TRIALS or len(sent) < len(trials):
            bad.append(f"{len(trials)} trials recorded (want {PAIRS_TRIALS}), background written in {len(sent)}")
        for i, t in enumerate(trials):
            cons, pairs = t["conservation"], t["pairs"]
            errs = [] if cons["ok"] else [f"conservation: {cons['errors']}"]
            if [p["pair"] for p in pairs] != [0, 1]:
                errs.append(f"pairs {[p['pair'] for p in pairs]}, want [0, 1]")
            for p in pairs:
                if not p["tx_packets"] or p["rx_packets"] != p["tx_packets"]:
                    errs.append(f"pair {p['pair']}: tx {p['tx_packets']} rx {p['rx_packets']}")
                if not sent:
                    continue
                # TRex port n is ethN+1; the hook's log: {host: {ifname: {kind: frames}}}
                tx_if, rx_if = f"eth{p['tx_port'] + 1}", f"eth{p['rx_port'] + 1}"
                bg = p["background"]
                want = {"to_dut_ingress": sent[0]["trex"][tx_if], "to_dut_other_port": sent[0]["trex"][rx_if],
                        "generator_rx": sent[0]["dut"][rx_if]}
                short = {place: {k: (n, (bg.get(place) or {}).get(k, 0)) for k, n in kinds.items()
                                 if (bg.get(place) or {}).get(k, 0) < n} for place, kinds in want.items()}
                short = {k: v for k, v in short.items() if v}
                if short:
                    errs.append(f"pair {p['pair']}: background sent, counted {short}")
            if errs:
                bad.append(f"trial {i + 1}: " + "; ".join(errs))
            else:
                exact += 1
            figures.append(f"trial {i + 1}: tx {t['tx_packets']} = DUT rx {t['dut']['rx_packets']} - background, "
                           f"forwarded {t['dut']['fwd_packets']}, rx {t['rx_packets']}, offered "
                           f"{t['offered_pps']:.0f} pps, start skew {t['start_skew_s'] * 1e3:.1f} ms, "
                           + ", ".join(f"pair {p['pair']} {p['tx_packets']}/{p['rx_packets']}" for p in pairs)
                           + f", dut_background {cons.get('dut_background')}")
        return not bad, (f"{direction}: {len(trials)} trials over both pairs, exact with the background of all four "
                         f"links counted on its pair: {exact}; " + "; ".join(figures)
                         + (f"; FAILED: {bad}" if bad else ""))

    def pairs(self) -> int:
        """`gtplab pairs` from the controller through the TRex host's four ports (two pairs) against
        the DUT host (dut.metrics_url, bearers by dut.ssh), uplink and downlink, background frames
        on all four data links in every trial."""
        cfg = self.lab_config(pairs=True)
        (self.dir / "pairs.json").write_text(json.dumps(cfg, indent=1))
        t0 = time.monotonic()
        rc = 0
        for direction in ("uplink", "downlink"):
            name = f"pairs_{direction}"
            out = self.dir / f"{name}.jsonl"
            with open(self.dir / f"{name}.log", "w") as f:
                r = subprocess.run([str(REPO / ".venv/bin/gtplab"), "pairs", "--lab-config", str(self.dir / "pairs.json"),
                                    "--direction", direction, "--rate", str(PAIRS_RATE_PPS), "--duration", "3",
                                    "--trials", str(PAIRS_TRIALS), "--size", "128", "--flows", "16", "-o", str(out),
                                    "--on-trial-start", self.background_hook(name, SIDES)],
                                   cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
            ok, msg = self.pairs_check(name, direction, out)
            log(f"{name} rc={r}: {(self.dir / f'{name}.log').read_text()[-1500:]}")
            log(f"gtplab pairs {msg}")
            rc = rc or r or (0 if ok else 1)
        self.times["pairs"] = time.monotonic() - t0
        return rc

    def pairs_one_attached(self) -> int:
        """The check fails when only one pair is attached on the DUT host: pair 1's access interface
        (eth3) detached (its pinned XDP link removed), one uplink trial of `gtplab pairs`: pair 1's
        packets reach the DUT host's kernel, not pgwu, and the balance over both pairs must say so.
        Returns 0 when the check failed as it should (run last: the lab is removed after it)."""
        pin = "/sys/fs/bpf/pgwu/link_xdp_eth3"
        cp = sh(*self.ssh_argv("dut"), f"rm {pin} && ip -d link show dev eth3", check=False)
        attached = "prog/xdp" in cp.stdout or cp.returncode
        name = "pairs_one_attached"
        out = self.dir / f"{name}.jsonl"
        with open(self.dir / f"{name}.log", "w") as f:
            r = subprocess.run([str(REPO / ".venv/bin/gtplab"), "pairs", "--lab-config", str(self.dir / "pairs.json"),
                                "--direction", "uplink", "--rate", str(PAIRS_RATE_PPS), "--duration", "3",
                                "--trials", "1", "--size", "128", "--flows", "16", "-o", str(out)],
                               cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
        trials = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.exists() else []
        cons = trials[0]["conservation"] if trials else {}
        log(f"{name}: pair 1's access eth3 detached on the DUT host ({'still attached' if attached else 'detached'}), "
            f"gtplab pairs rc={r}, conservation {'exact' if cons.get('ok') else 'NOT exact'}: "
            f"{cons.get('errors')}; " + (", ".join(f"pair {p['pair']} {p['tx_packets']}/{p['rx_packets']}"
                                                    for p in trials[0]["pairs"]) if trials else "no trial"))
        return 0 if (not attached and r == 1 and trials and not cons.get("ok")) else 1

    # -- down --
    def down(self) -> None:
        # the containers' init processes, found before nspawn goes: an nspawn stopped while its
        # container still boots can leave the init (and its pid namespace) behind
        inits = set(self.leaders.values())
        for p in self.procs.values():
            inits.update(int(x) for x in sh("ps", "-o", "pid=", "--ppid", str(p.pid), check=False).stdout.split())
        for host, p in self.procs.items():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)      # nspawn: powers the container off
        for host, p in self.procs.items():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        time.sleep(1)
        for pid in inits:               # PID 1 of a pid namespace: SIGKILL ends the namespace
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proxy:
            self.proxy.shutdown()
            self.proxy.server_close()
        for side in SIDES:
            sh("ip", "link", "del", f"{self.tag}-t{side}", check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        sh("umount", str(self.bpffs), check=False)
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        log(f"{self.tag} removed" + (f" (kept {self.dir})" if self.keep else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["run", "cache"])
    ap.add_argument("--keep", action="store_true", help="keep the run's directory (logs, roots) after")
    ap.add_argument("--no-sweep", action="store_true", help="only build the hosts and run site.yml")
    args = ap.parse_args()
    if os.geteuid():
        sys.exit("needs root")
    if args.command == "cache":
        print(base_rootfs())
        return 0
    lab = Lab(keep=args.keep)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    t0 = time.monotonic()
    try:
        lab.up()
        rc = lab.site()
        if rc == 0 and not args.no_sweep:
            rc = lab.sweep()
            rc = lab.sweep_pfcp() or rc
            rc = lab.pairs() or rc
            rc = lab.pairs_one_attached() or rc
    finally:
        lab.down()
        lab.times["total"] = time.monotonic() - t0
        log("times: " + json.dumps({k: round(v) for k, v in lab.times.items()}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
