"""gtplab lab: a reproducible two-namespace lab (traffic generator + PGW-U) on this machine.

    gen netns (traffic generator)                    dut netns (PGW-U, XDP native)
    port 0  g<name>p0  10.201.0.2/24 ==== veth ====  d<name>p0  10.201.0.1/24  access (GTP-U)
    port 1  g<name>p1  10.202.0.2/24 ==== veth ====  d<name>p1  10.202.0.1/24  SGi (plain IP)
    g<name>k0 ==== veth ==== g<name>k1   (spares: the engine parks its transmit programs there)

CPU layout (docs/lab.md, "The measurement model"): every lab veth gets threaded NAPI, so the DUT's
receive work runs in kthreads napi/d<name>pN-* pinned to the DUT's CPUs, and the generator's receive
work (napi/g<name>pN-*) and engine threads run on the generator's CPUs: the DUT never runs in the
generator's softirq, and a DUT that is too slow loses packets instead of slowing the generator.

Every namespace, interface and bpffs path carries the lab's name, and everything created is listed in
/run/gtplab/labs/<name>.json *before* it is created, so `gtplab lab down` removes a lab after a crash
too. See docs/lab.md for the why (MTU, the generator's XDP program, nsenter instead of ip netns exec).

With generator="trex" (`gtplab lab up --generator trex`) a TRex server replaces the engine on the
generator side: DPDK af_packet on g<name>p0/p1, inside the generator netns, on the generator CPUs;
its pid is recorded in the state file as soon as it exists (docs/trex.md).

Python API:
    with Lab.up() as lab:              # tears the lab down on exit, also on an exception
        lab.pgwu("session", "add", ...)
        c = backend.engine_client(lab) # gtplab.traffic.engine.LocalClient on ports 0 and 1

Used by gtplab.traffic.backend (which builds the generator's client from a lab's ports and
namespaces), gtplab.lab.cli (`gtplab lab`), tests and bench/; what only tests and bench/ do with a
lab (bearers of the addressing contract, AF_PACKET frames, the DUT's counters) is tests/lib/lab.py.
The lab imports nothing of traffic/.
The CPU layout is gtplab.lab.cpu. Over 600 lines because the Lab class is one unit (~400 lines):
up() records every name before it creates it and builds in an order that down() and a crash-time
teardown() undo; splitting it would spread that contract over files.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gtplab.kernel.netns import run_in as run_in_netns

from gtplab.dut import fwd, sockdrop
from gtplab.dut.dataplane import PGWU_DIR, pgwu_binary
from gtplab.dut.sock import SocketKnobs
from gtplab.errors import LabError, NotBuilt, UserError, require_built
from gtplab.kernel import bpf
from gtplab.kernel.sched import live_stat
from gtplab.kernel.libbpf import tcx_ingress_link
from gtplab.kernel.threads import affinity, napi_threads
from gtplab.lab import awake, claims, external, trex_server
from gtplab.lab.cpu import CpuLayout, cpu_text

STATE_DIR = Path(os.environ.get("GTPLAB_RUN_DIR", "/run/gtplab")) / "labs"
BPFFS = Path("/sys/fs/bpf")
NETNS_DIR = Path("/run/netns")

# 3200 carries a 3024-byte frame (3020 bytes without FCS) plus GTP-U encapsulation (36) and a VLAN tag
# with room to spare, and stays below what veth accepts with a non-frags XDP program attached to the
# peer: PAGE_SIZE - XDP headroom - skb_shared_info - Ethernet header = 3506 on x86_64 (checked: 3507
# gives "veth: Peer MTU is too large to set XDP").
DEFAULT_MTU = 3200
VETH_XDP_MAX_MTU = 3506

NAME_RE = re.compile(r"^[a-z0-9]{1,10}$")  # "g" + name + "p0" must fit IFNAMSIZ-1 = 15
DUT_MODES = ("pgwu", "socket", "fwd", "external", "drop", "pass", "tx", "none")
GENERATORS = ("engine", "trex")   # the embedded BPF engine, or a TRex server on the generator veths
NAPI_RT_PRIORITY = 50     # SCHED_FIFO priority of the lab's NAPI kthreads (threaded IRQs run at 50)
XDP_MODES = {0: None, 1: "native", 2: "generic", 3: "offload", 4: "multi"}


@dataclass
class Addressing:
    """The lab addressing contract (docs/lab.md, the brief); every field can be overridden."""
    access_net: str = "10.201.0.0/24"
    dut_access: str = "10.201.0.1"      # the PGW-U's GTP-U address (pgwu --local-addr)
    gen_access: str = "10.201.0.2"
    sgw_base: str = "10.201.0.16"       # SGW k = sgw_base + k, on-link, k < sgws
    sgws: int = 64
    sgi_net: str = "10.202.0.0/24"
    dut_sgi: str = "10.202.0.1"
    gen_sgi: str = "10.202.0.2"
    ue_pool: str = "10.64.0.0/12"       # UE i = first + 1 + i
    pdn_net: str = "198.18.0.0/15"      # routed on the DUT via gen_sgi
    # IPv6 user traffic (issue 32): UE i has fd47:7470:XXXX:YYYY::/64 (XXXX:YYYY = i), the N6 servers
    # are hosts of fd47:7471::/64, routed on the DUT via gen_sgi6 (a permanent neighbour: the
    # generator's N6 MAC), on the N6 link fd47:7472::/64. Never fd00::/64 (this host's eth0).
    ue6_range: str = "fd47:7470::/32"
    pdn6_net: str = "fd47:7471::/64"
    sgi6_net: str = "fd47:7472::/64"
    dut_sgi6: str = "fd47:7472::1"
    gen_sgi6: str = "fd47:7472::2"     # never configured on the generator: the neighbour entry's name
    # N3 over IPv6 (issue 32, sweep --n3 6): the N3 link fd47:7473::/64 beside 10.201.0.0/24, the DUT's
    # GTP-U address ::1 on its access port, SGW k = sgw6_base + k (permanent neighbours -> the
    # generator's N3 MAC, as the IPv4 SGWs); gen_access6 is never configured on the generator either
    access6_net: str = "fd47:7473::/64"
    dut_access6: str = "fd47:7473::1"
    gen_access6: str = "fd47:7473::2"
    sgw6_base: str = "fd47:7473::10"
    local_teid_base: int = 0x00010000
    sgw_teid_base: int = 0x80000000
    n4_net: str = "10.203.0.0/29"      # an external UPF's N4 link (gtplab/lab/external.py): room
                                       # for a second control plane (.3 to .6)
    dut_n4: str = "10.203.0.1"         # the UPF's PFCP (and API) address
    cp_n4: str = "10.203.0.2"          # gtplab's, in the lab's control-plane namespace

    def ue(self, i: int) -> str:
        return str(ipaddress.ip_network(self.ue_pool).network_address + 1 + i)

    def sgw(self, i: int) -> str:
        """The SGW of bearer i."""
        return str(ipaddress.ip_address(self.sgw_base) + (i % self.sgws))

    def local_teid(self, i: int) -> int:
        return self.local_teid_base + i

    def sgw_teid(self, i: int) -> int:
        return self.sgw_teid_base + i

    def pdn(self, i: int = 0) -> str:
        return str(ipaddress.ip_network(self.pdn_net).network_address + 1 + i)

    def sgw6(self, i: int) -> str:
        """The SGW (gNB) IPv6 address of bearer i (N3 over IPv6)."""
        return str(ipaddress.ip_address(self.sgw6_base) + (i % self.sgws))

    def bearer(self, i: int) -> dict:
        """Bearer i as `pgwu session add` wants it."""
        return {"teid": self.local_teid(i), "ue": self.ue(i), "sgw": self.sgw(i),
                "sgw_teid": self.sgw_teid(i)}

    def prefixlen(self, side: str) -> int:
        net = {"access": self.access_net, "sgi": self.sgi_net, "n4": self.n4_net}[side]
        return ipaddress.ip_network(net).prefixlen


@dataclass
class Port:
    """One generator port and the DUT interface at the other end of its veth."""
    port_id: int            # TRex numbering: 0 = access, 1 = SGi
    side: str               # "access" | "sgi"
    netns: str              # generator namespace
    ifname: str
    mac: str
    addr: str
    prefixlen: int
    mtu: int
    dut_netns: str
    dut_ifname: str
    dut_mac: str
    dut_addr: str


def _mac(name: str, dut: bool, port: int) -> str:
    """Deterministic, locally administered MACs: 02:67:<name hash>:<0 gen | 1 dut>:<port>."""
    h = hashlib.sha256(name.encode()).digest()
    return f"02:67:{h[0]:02x}:{h[1]:02x}:{int(dut):02x}:{port:02x}"


def _run(argv: list[str], what: str, *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        msg = [ln.strip() for ln in (p.stderr.strip() or p.stdout.strip()).splitlines() if ln.strip()]
        raise LabError(f"Couldn't {what}: {'; '.join(msg[:4]) if msg else f'exit status {p.returncode}'}")
    return p


def _in_netns(ns: str) -> list[str]:
    """Command prefix that runs in netns ns. nsenter and not `ip netns exec`: the latter remounts /sys
    in a private mount namespace, which hides /sys/fs/bpf and with it every pinned program and map."""
    return ["nsenter", f"--net={NETNS_DIR / ns}", "--"]


def _alive(pid: int) -> bool:
    """pid is a process that has not exited (a zombie has)."""
    return live_stat(pid) is not None


def require_lab_built(dut: str, knobs: SocketKnobs | dict | None = None) -> None:
    """NotBuilt (one line, exit 2) for the first file ./setup.sh builds that a lab of this DUT mode
    and socket knobs would load or run and that is missing: the PGW-U's program (its BPF object is
    in it, as a skeleton: dataplane/pgwu.bpf.o is not needed at run time), the socket path's tc
    program and, with the gro knob, its drop probe, the reference forwarder. Checked before anything
    is built, so that nothing is left to undo. The traffic engine's object is the generator's
    (gtplab.traffic.backend.require_built_for): a lab runs without it."""
    pgwu = pgwu_binary()
    if dut in ("pgwu", "socket") and not os.access(pgwu, os.X_OK):
        if pgwu != PGWU_DIR / "pgwu":      # $GTPLAB_PGWU names another program
            raise NotBuilt(pgwu, "$GTPLAB_PGWU names it: build it there, or unset GTPLAB_PGWU")
        raise NotBuilt(pgwu)
    need = []
    if dut == "socket":
        need.append(bpf.TC_DROP_DST_OBJ)
        if SocketKnobs.parse(knobs, "socket_knobs").gro:
            need.append(sockdrop.OBJ)
    if dut == "fwd":
        need.append(fwd.FWD_OBJ)
    require_built(*need)


def _is_pgwu(pid: int) -> bool:
    """pid is a live pgwu process (not a zombie, not a reused pid)."""
    st = live_stat(pid)
    return st is not None and st.comm.startswith("pgwu")


def _pgwu_on_pins(pin_dir: str) -> list[int]:
    """The live pgwu processes run on this pin dir (`pgwu -d PIN ...`: the PFCP agent of a PGW-U
    provisioned over PFCP, `pgwu metrics`), in any namespace: they outlive an owner killed before
    its teardown, and only their own argv says which lab they serve."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if any(args[i] == "-d" and args[i + 1] == pin_dir for i in range(len(args) - 1)) and \
                _is_pgwu(int(d.name)):
            out.append(int(d.name))
    return out


def _stop_pgwu_on_pins(pin_dir: str, grace: float = 5.0) -> list[str]:
    """SIGTERM to every pgwu process on pin_dir (the agent deletes its sessions' bearers on it),
    SIGKILL to what is left after grace s; returns what was stopped."""
    pids = _pgwu_on_pins(pin_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.02)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return [f"pgwu process {pid} on {pin_dir}" for pid in pids]


def _state_path(name: str) -> Path:
    return STATE_DIR / f"{name}.json"


def _write_state(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def _netns_exists(ns: str) -> bool:
    return (NETNS_DIR / ns).exists()


class Lab:
    """A running lab. Create with Lab.up(); attach to an existing one with Lab.open(name)."""

    def __init__(self, state: dict):
        self.state = state
        self.name: str = state["name"]
        self.gen_ns: str = state["netns"]["gen"]
        self.dut_ns: str = state["netns"]["dut"]
        self.pin_dir: str = state["pin_dirs"]["pgwu"]
        self.gen_pin_dir: str = state["pin_dirs"]["gen"]
        self.dut_mode: str = state["dut"]
        self.generator: str = state.get("generator", "engine")
        self.addressing = Addressing(**state["addressing"])
        self.ports = [Port(**p) for p in state["ports"]]
        self.park_ifnames: list[str] = state.get("park", [])
        c = state.get("cpus") or {}
        self.cpus = CpuLayout(c["generator"], c["dut"]) if c else None
        self.state_path = _state_path(self.name)
        self.external: dict | None = state.get("external")   # dut.mode external (lab/external.py)
        self.cp_ns: str | None = state["netns"].get("cp")      # its control plane's namespace
        self._external_proc = None

    # ---------------------------------------------------------------- create / destroy

    @classmethod
    def up(cls, name: str | None = None, *, dut: str = "pgwu", mtu: int = DEFAULT_MTU,
           addressing: Addressing | None = None, gen_pass: bool = True,
           pgwu_load_args: tuple[str, ...] = (), cpus: CpuLayout | None = None,
           generator: str = "engine", trex_runtime: str | None = None,
           external_spec: "external.ExternalSpec | None" = None,
           share_cpus: bool | None = None,
           socket_knobs: SocketKnobs | dict | None = None, standalone: bool = False) -> "Lab":
        """Build a lab; on any failure or Ctrl-C, remove what was built and re-raise.

        standalone: made to outlive its creator (`gtplab lab up`): its `pgwu socket` runs until the lab
        is torn down; otherwise it stops when the creator ends (--owner), as the whole lab is its.

        share_cpus: run on CPUs another live lab holds (gtplab.lab.claims), and say so in every result;
        None: $GTPLAB_SHARE_CPUS (unset: no, a lab that would overlap another is refused, naming it).

        cpus: the CPU layout (default CpuLayout.default(): generator 0, DUT 1 on two CPUs); whether
        it could be honoured, and why not, is in state["cpus"] (lab status, run.json, the report).
        dut: "pgwu" (load + attach dataplane/pgwu in native mode), "socket" (pgwu loaded for its
        tables, `pgwu socket` with socket_knobs as the data plane: docs/socket.md), "fwd" (the reference forwarder,
        gtplab/dut/fwd.py: MAC rewrite + redirect between the DUT ports), "drop"/"pass" (a one-instruction
        XDP sink on both DUT ports, e.g. to measure the generator alone), "tx" (a reflector: every
        frame goes back out of the port it came in, to measure the generator's receive side too),
        "none" (no XDP on the DUT), "external" (any UPF: external_spec, a gtplab.lab.external
        ExternalSpec, says how to start it in the DUT netns; an N4 link from a control-plane netns).
        gen_pass: attach an XDP_PASS program to the generator ports so frames the DUT redirects to
        them are received while no engine is connected (backend.engine_client(lab) removes it again)."""
        if dut not in DUT_MODES:
            raise LabError(f"unknown DUT mode {dut!r} (use one of {', '.join(DUT_MODES)})")
        if generator not in GENERATORS:
            raise LabError(f"unknown generator {generator!r} (use one of {', '.join(GENERATORS)})")
        trex_dir = None
        if generator == "trex":
            trex_dir = trex_server.resolve(trex_runtime)       # unpacked (once) before anything is built
            gen_pass = True     # frames the DUT redirects to a veth are received only with XDP on it
        if not 1280 <= mtu <= VETH_XDP_MAX_MTU:
            raise LabError(f"MTU {mtu} out of range: 1280..{VETH_XDP_MAX_MTU} (veth native XDP limit)")
        if os.geteuid() != 0:
            raise LabError("must run as root (network namespaces, veth, XDP)")
        if dut == "external" and external_spec is None:
            raise LabError("DUT mode external needs the UPF's description (a lab config's dut.external)")
        a = addressing or Addressing()
        knobs = SocketKnobs.parse(socket_knobs, "socket_knobs")
        require_lab_built(dut, knobs)       # before anything is reserved or built
        share = claims.share_from_env() if share_cpus is None else bool(share_cpus)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        state = cls._reserve(name, a, dut, mtu, cpus or CpuLayout.default(), generator, trex_dir, external_spec)
        if dut == "socket":
            state["socket"] = {"knobs": knobs.as_dict(), "pid": None,
                               "log": str(STATE_DIR / f"{state['name']}-socket.log"),
                               # the process it must not outlive (None: the lab's teardown ends it)
                               "owner": None if standalone else os.getpid()}
        lab = cls(state)
        old = None
        try:
            lab._claim(share)           # before anything is pinned to the CPUs
            lab._build(gen_pass, pgwu_load_args)
            state["status"] = "up"
            _write_state(lab.state_path, state)
        except BaseException:
            # Ctrl-C during the rollback would leave a half-removed lab: hold it off until done.
            if threading.current_thread() is threading.main_thread():
                old = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                teardown(state)
            finally:
                if old is not None:
                    signal.signal(signal.SIGINT, old)
            raise
        return lab

    @classmethod
    def _reserve(cls, name: str | None, a: Addressing, dut: str, mtu: int,
                 cpus: CpuLayout | None = None, generator: str = "engine",
                 trex_dir: Path | None = None, external_spec=None) -> dict:
        """Pick the name and write the state file (O_EXCL: two concurrent `up`s can't take one name)."""
        for _ in range(20 if name is None else 1):
            n = name if name is not None else secrets.token_hex(3)
            if not NAME_RE.match(n):
                raise LabError(f"bad lab name {n!r}: 1-10 characters of a-z and 0-9")
            state = cls._plan(n, a, dut, mtu, cpus, generator, trex_dir, external_spec)
            taken = [ns for ns in state["netns"].values() if _netns_exists(ns)]
            taken += [d for d in state["pin_dirs"].values() if Path(d).exists()]
            try:
                fd = os.open(_state_path(n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                taken.append(str(_state_path(n)))
                fd = -1
            if not taken:
                os.close(fd)
                _write_state(_state_path(n), state)
                return state
            if fd >= 0:
                os.close(fd)
                os.unlink(_state_path(n))
            if name is not None:
                raise LabError(f"lab {n!r} exists already ({', '.join(taken)}); "
                               f"remove it with `gtplab lab down --name {n}`")
        raise LabError("Couldn't find a free lab name")

    @staticmethod
    def _plan(n: str, a: Addressing, dut: str, mtu: int, cpus: CpuLayout | None = None,
              generator: str = "engine", trex_dir: Path | None = None, external_spec=None) -> dict:
        gen_ns, dut_ns = f"gtplab-{n}-gen", f"gtplab-{n}-dut"
        ports = []
        for pid, side, gen_addr, dut_addr in ((0, "access", a.gen_access, a.dut_access),
                                              (1, "sgi", a.gen_sgi, a.dut_sgi)):
            ports.append(asdict(Port(
                port_id=pid, side=side, netns=gen_ns, ifname=f"g{n}p{pid}", mac=_mac(n, False, pid),
                addr=gen_addr, prefixlen=a.prefixlen(side), mtu=mtu, dut_netns=dut_ns,
                dut_ifname=f"d{n}p{pid}", dut_mac=_mac(n, True, pid), dut_addr=dut_addr)))
        ext = external.plan(n, external_spec, STATE_DIR) if dut == "external" else None
        return {
            "name": n, "status": "creating", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "pid": os.getpid(), "dut": dut,
            "netns": {"gen": gen_ns, "dut": dut_ns, **({"cp": ext["cp_netns"]} if ext else {})},
            "pin_dirs": {"pgwu": str(BPFFS / f"gtplab-{n}"), "gen": str(BPFFS / f"gtplab-{n}-gen")},
            "ports": ports, "addressing": asdict(a),
            # one spare veth pair per generator CPU: a parking place for each transmit program
            "park": [f"g{n}k{j}" for j in range(2 * max(1, len(cpus.generator) if cpus else 1))]
            if generator == "engine" else [],
            "cpus": asdict(cpus) if cpus else None,
            "generator": generator,
            # TRex: where it runs from, its work dir (config, log), its DPDK file prefix, and its pid
            # (recorded as soon as it exists: teardown stops it even if the creator died)
            "trex": {"runtime": str(trex_dir), "workdir": str(STATE_DIR / f"{n}-trex"),
                     "prefix": f"gtplab_{n}_trex", "pid": None} if generator == "trex" else None,
            # an external UPF: its N4 link, work dir, runtime and pid (recorded as soon as it exists)
            "external": ext,
        }

    def _claim(self, share: bool) -> None:
        """Claim the layout's CPUs machine-wide (gtplab.lab.claims): LabError naming the lab that
        holds one of them, unless share; the claim (and whom it shares with) goes in the state."""
        if self.cpus is None:
            return
        self.state["claim"] = claims.claim(self.name, self.cpus.generator + self.cpus.dut, self.state_path, share)
        _write_state(self.state_path, self.state)

    def shared_with(self) -> list[dict]:
        """The other live labs holding any of this lab's CPUs now (gtplab.lab.claims.holders)."""
        if self.cpus is None:
            return []
        return claims.holders(self.cpus.generator + self.cpus.dut, but=self.name)

    def _build(self, gen_pass: bool, pgwu_load_args: tuple[str, ...]) -> None:
        a = self.addressing
        g, d = self.gen_ns, self.dut_ns
        for ns in (g, d):
            _run(["ip", "netns", "add", ns], f"create netns {ns}")
            # No IPv6: router solicitations and DAD would show up in the DUT's counters.
            for key in ("all", "default"):
                _run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1"],
                     f"disable IPv6 in {ns}")
            _run(["ip", "-n", ns, "link", "set", "lo", "up"], f"bring up lo in {ns}")
        for p in self.ports:
            # Created inside the namespaces: no interface ever appears in the host's namespace.
            _run(["ip", "-n", g, "link", "add", p.ifname, "address", p.mac, "mtu", str(p.mtu),
                  "type", "veth", "peer", "name", p.dut_ifname, "netns", d,
                  "address", p.dut_mac, "mtu", str(p.mtu)], f"create veth {p.ifname}/{p.dut_ifname}")
            _run(["ip", "-n", g, "addr", "add", f"{p.addr}/{p.prefixlen}", "dev", p.ifname],
                 f"address {p.ifname}")
            _run(["ip", "-n", d, "addr", "add", f"{p.dut_addr}/{p.prefixlen}", "dev", p.dut_ifname],
                 f"address {p.dut_ifname}")
            _run(["ip", "-n", g, "link", "set", p.ifname, "up"], f"bring up {p.ifname}")
            _run(["ip", "-n", d, "link", "set", p.dut_ifname, "up"], f"bring up {p.dut_ifname}")
            # Permanent neighbours both ways: the engine's XDP program answers no ARP.
            _run(["ip", "-n", g, "neigh", "replace", p.dut_addr, "lladdr", p.dut_mac, "nud", "permanent",
                  "dev", p.ifname], f"add neighbour on {p.ifname}")
            _run(["ip", "-n", d, "neigh", "replace", p.addr, "lladdr", p.mac, "nud", "permanent",
                  "dev", p.dut_ifname], f"add neighbour on {p.dut_ifname}")
        acc, sgi = self.ports
        batch = "".join(f"neigh replace {a.sgw(k)} lladdr {acc.mac} nud permanent dev {acc.dut_ifname}\n"
                        for k in range(a.sgws))
        batch += f"route replace {a.pdn_net} via {a.gen_sgi} dev {sgi.dut_ifname}\n"
        p = subprocess.run(["ip", "-n", d, "-batch", "-"], input=batch, capture_output=True, text=True)
        if p.returncode:
            raise LabError(f"Couldn't add SGW neighbours and the PDN route: {p.stderr.strip()}")
        _run(["ip", "netns", "exec", d, "sysctl", "-qw", "net.ipv4.ip_forward=1"], "enable forwarding")
        self._build_ipv6_n6()
        self._build_ipv6_n3()
        for j in range(0, len(self.park_ifnames), 2):
            # never up, never carries a frame: only holds an XDP program (Engine: LocalClient(park=))
            _run(["ip", "-n", g, "link", "add", self.park_ifnames[j], "type", "veth", "peer", "name",
                  self.park_ifnames[j + 1]], f"create spare veth {self.park_ifnames[j]}")

        if self.dut_mode == "pgwu":
            # --local-addr6: the N6 address, the source of the PGW-U's ICMPv6 errors; --n3-addr6: the
            # N3 one, GTP-U over IPv6 (sweep --n3 6; docs/ipv6.md)
            self.pgwu("load", "--local-addr", a.dut_access, "--local-addr6", a.dut_sgi6, "--n3-addr6", a.dut_access6,
                      "--ue-pool", a.ue_pool, *pgwu_load_args)
            self.pgwu("attach", "--access", acc.dut_ifname, "--sgi", sgi.dut_ifname, "--mode", "native")
            self._start_reassembler()
        elif self.dut_mode == "socket":
            # --n3-addr6: its N3 IPv6 socket (GTP-U over IPv6, sweep --n3 6), as the XDP PGW-U's
            self.pgwu("load", "--local-addr", a.dut_access, "--local-addr6", a.dut_sgi6, "--n3-addr6", a.dut_access6,
                      "--ue-pool", a.ue_pool, *pgwu_load_args)
            self._setup_socket_path()
        elif self.dut_mode == "fwd":
            self._attach_fwd()
        elif self.dut_mode in ("drop", "pass", "tx"):
            verdict = {"drop": bpf.XDP_DROP, "pass": bpf.XDP_PASS, "tx": bpf.XDP_TX}[self.dut_mode]
            self._attach_verdict_prog(d, [acc.dut_ifname, sgi.dut_ifname], verdict)
        if self.dut_mode == "external":
            external.build_n4(self, self.external)
            if not self.external["spec"].get("xdp", True):
                # A UPF without XDP (sockets, TUN): the generator's XDP-redirected frames reach a
                # veth only through its NAPI, which exists only with an XDP program on it; without,
                # they vanish with no counter. XDP_PASS on both ports, as for the socket-path PGW-U
                # (_setup_socket_path), before the UPF starts; teardown detaches it.
                self.external["xdp_pass"] = [acc.dut_ifname, sgi.dut_ifname]
                _write_state(self.state_path, self.state)
                self._attach_verdict_prog(d, self.external["xdp_pass"], bpf.XDP_PASS)
        if gen_pass:
            self.attach_gen_pass()
        if self.dut_mode == "external":
            # after the generator's XDP: a native XDP program's redirects into a veth need one on its peer
            external.start(self, self.external, lambda: _write_state(self.state_path, self.state))
        self.apply_cpu_layout()
        if self.generator == "trex":
            self._start_trex()

    def _build_ipv6_n6(self) -> None:
        """What the PGW-U's bpf_fib_lookup(AF_INET6) needs for the IPv6 servers (issue 32), and no
        more: IPv6 stays disabled everywhere but on the DUT's N6 (SGi) port, which gets the address
        dut_sgi6 (nodad), a route to pdn6_net via gen_sgi6 and a permanent neighbour gen_sgi6 -> the
        generator's N6 MAC, as the IPv4 path has for 198.18.0.0/15. No link-local address
        (addr_gen_mode 1), no DAD, no router solicitations, no autoconf, accept_ra 0; the kernel
        forwards no IPv6 (all.forwarding 0: a frame the PGW-U passes to it is dropped, never routed
        out of the lab). bpf_fib_lookup wants forwarding on the ingress device only: on the access
        port (the IPv6 uplink) and on this one (the downlink to an IPv6 peer, N3 over IPv6, looks its
        route up with this port as ingress). What the kernel still sends: a few MLDv2 reports for
        dut_sgi6's solicited-node group and, forwarding, the all-routers groups, within milliseconds
        of the address being added at build, none after (docs/lab.md). The generator needs nothing: its XDP program counts
        every frame that reaches its port."""
        a, d = self.addressing, self.dut_ns
        acc, sgi = self.ports
        # the MLD reports' intervals 0: the few the address's group join sends leave at once, at build
        knobs = {"addr_gen_mode": 1, "accept_ra": 0, "autoconf": 0, "accept_dad": 0,
                 "router_solicitations": 0, "forwarding": 1, "mldv1_unsolicited_report_interval": 0,
                 "mldv2_unsolicited_report_interval": 0, "disable_ipv6": 0}
        _run(["ip", "netns", "exec", d, "sysctl", "-qw"]
             + [f"net.ipv6.conf.{sgi.dut_ifname}.{k}={v}" for k, v in knobs.items()]
             + [f"net.ipv6.conf.{acc.dut_ifname}.forwarding=1"], "IPv6 on the DUT's N6 port")
        batch = (f"addr replace {a.dut_sgi6}/{ipaddress.ip_network(a.sgi6_net).prefixlen} dev "
                 f"{sgi.dut_ifname} nodad\n"
                 f"neigh replace {a.gen_sgi6} lladdr {sgi.mac} nud permanent dev {sgi.dut_ifname}\n"
                 f"route replace {a.pdn6_net} via {a.gen_sgi6} dev {sgi.dut_ifname}\n")
        p = subprocess.run(["ip", "-n", d, "-batch", "-"], input=batch, capture_output=True, text=True)
        if p.returncode:
            raise LabError(f"Couldn't add the IPv6 N6 address, neighbour and server route: {p.stderr.strip()}")

    def _build_ipv6_n3(self) -> None:
        """The DUT's N3 (access) port dual stack (issue 32, GTP-U over IPv6): the address dut_access6
        (nodad) on the N3 link access6_net and a permanent neighbour for each SGW's IPv6 address
        (sgw6_base + k, k < sgws) -> the generator's N3 MAC, as the IPv4 SGWs have: the generator's
        XDP program answers no Neighbor Solicitation. The same quiet knobs as the N6 port (no
        link-local address, DAD, router solicitation, autoconf; MLD report intervals 0); forwarding
        stays on on this port (bpf_fib_lookup's ingress, _build_ipv6_n6) and off for all, so the
        kernel routes nothing of the lab's IPv6 anywhere. What the kernel sends of its own: a few
        MLDv2 reports at build (the address's solicited-node group; with forwarding on, the
        all-routers groups), none after (tests/lab/test_lab_ipv6.py). The generator's port has no
        IPv6 address (gen_access6 names nothing configured), as on N6: its XDP program counts every
        frame, and an address would only make its kernel send MLD reports into the DUT."""
        a, d = self.addressing, self.dut_ns
        acc = self.ports[0]
        knobs = {"addr_gen_mode": 1, "accept_ra": 0, "autoconf": 0, "accept_dad": 0,
                 "router_solicitations": 0, "mldv1_unsolicited_report_interval": 0,
                 "mldv2_unsolicited_report_interval": 0, "disable_ipv6": 0}
        _run(["ip", "netns", "exec", d, "sysctl", "-qw"]
             + [f"net.ipv6.conf.{acc.dut_ifname}.{k}={v}" for k, v in knobs.items()], "IPv6 on the DUT's N3 port")
        batch = (f"addr replace {a.dut_access6}/{ipaddress.ip_network(a.access6_net).prefixlen} dev "
                 f"{acc.dut_ifname} nodad\n"
                 + "".join(f"neigh replace {a.sgw6(k)} lladdr {acc.mac} nud permanent dev {acc.dut_ifname}\n"
                           for k in range(a.sgws)))
        p = subprocess.run(["ip", "-n", d, "-batch", "-"], input=batch, capture_output=True, text=True)
        if p.returncode:
            raise LabError(f"Couldn't add the IPv6 N3 address and SGW neighbours: {p.stderr.strip()}")

    def _start_reassembler(self) -> None:
        """`pgwu reassemble --daemon` in the DUT netns: G-PDUs that arrive in outer fragments are
        reassembled by the kernel and forwarded (docs/dataplane.md). Like the `pgwu watch` that attach
        starts, it lives in the DUT netns, so teardown (which kills every process there) stops it,
        whatever ended the lab. A kernel without the tracing programs it registers with can't run it:
        the lab comes up without it (outer fragments dropped), and state["reassembler"] says why."""
        p = _run(_in_netns(self.dut_ns) + [str(pgwu_binary()), "-d", self.pin_dir, "reassemble", "--daemon"],
                 "start pgwu reassemble", check=False)
        m = re.search(r"running as pid (\d+)", p.stdout)
        self.state["reassembler"] = ({"pid": int(m.group(1))} if p.returncode == 0 and m else
                                     {"pid": None, "error": (p.stderr.strip() or p.stdout.strip())[:500]})
        _write_state(self.state_path, self.state)

    def _setup_socket_path(self) -> None:
        """What `pgwu socket` needs of the DUT namespace (docs/socket.md), then the program: an
        XDP_PASS program on both DUT ports (frames the generator's XDP sends reach a veth only
        through its NAPI, which then runs threaded on the DUT CPUs, as for every other DUT: the
        kernel's receive path, GRO included, runs there); GRO off on SGi (its packet socket would
        read merged TCP segments) and on access only with the gro knob; the UE pool's packets
        dropped at SGi's tc ingress, after the packet socket (a tap) has its copy, and so are the
        IPv6 packets to the UEs' range (ue6_range): the kernel's own stack never sees them (without
        a route it would answer them as unroutable, with ICMP or ICMPv6 that reaches the generator;
        and it would count a bad header a second time)."""
        a = self.addressing
        acc, sgi = self.ports
        self._attach_verdict_prog(self.dut_ns, [acc.dut_ifname, sgi.dut_ifname], bpf.XDP_PASS)
        prog = bpf.tc_drop_dst_prog(a.ue_pool, "sgi_drop_pool", prefix6=a.ue6_range)
        try:
            def attach():
                fd = tcx_ingress_link(prog.fd, socket.if_nametoindex(sgi.dut_ifname))
                try:
                    bpf.obj_pin(fd, os.path.join(self.pin_dir, "link_tcx_sgi_drop_pool"))
                finally:
                    os.close(fd)
            try:
                run_in_netns(self.dut_ns, attach)
            except OSError as e:
                raise LabError(f"Couldn't drop the UE pool at {sgi.dut_ifname}'s tc ingress: {e}") from None
        finally:
            prog.close()
        self.start_socket(SocketKnobs.parse(self.state["socket"]["knobs"]))

    def start_socket(self, knobs: SocketKnobs) -> int:
        """(Re)start `pgwu socket --daemon` in the DUT netns with these knobs, its workers on the DUT
        CPUs; the bearers stay (they are the pinned tables'). It stops by itself when the lab's owner
        ends (--owner; not for a standalone lab), and teardown ends it in any case (the DUT netns's
        processes). Returns its pid; LabError saying why it could not start."""
        if self.dut_mode != "socket":
            raise LabError(f"lab {self.name} runs {self.dut_mode}, not the socket path")
        self.stop_socket()
        acc, sgi = self.ports
        st = self.state["socket"]
        for ifname, on in ((sgi.dut_ifname, False), (acc.dut_ifname, knobs.gro)):
            _run(_in_netns(self.dut_ns) + ["ethtool", "-K", ifname, "gro", "on" if on else "off"],
                 f"set GRO on {ifname}")
        cpus = self.cpus.dut if self.cpus else None
        p = _run(_in_netns(self.dut_ns) + [str(pgwu_binary()), "-d", self.pin_dir, "socket", "--daemon",
                                           "--access", acc.dut_ifname, "--sgi", sgi.dut_ifname,
                                           "--log", st["log"], *knobs.argv(cpus),
                                           *(["--owner", str(st["owner"])] if st.get("owner") else [])],
                 "start pgwu socket", check=False)
        m = re.search(r"running as pid (\d+)", p.stdout)
        if p.returncode or not m:
            raise LabError("Couldn't start pgwu socket: " + (p.stderr.strip() or p.stdout.strip())[-500:])
        st.update(pid=int(m.group(1)), knobs=knobs.as_dict())
        _write_state(self.state_path, self.state)
        return st["pid"]

    def stop_socket(self) -> None:
        """End the lab's `pgwu socket` (SIGTERM, then SIGKILL after 5 s) and wait for it."""
        st = self.state.get("socket") or {}
        pid = st.get("pid")
        if not pid or not _is_pgwu(pid):
            return
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 5
        while _is_pgwu(pid) and time.monotonic() < end:
            time.sleep(0.02)
        if _is_pgwu(pid):
            os.kill(pid, signal.SIGKILL)
        st["pid"] = None
        _write_state(self.state_path, self.state)

    def socket_pid(self) -> int | None:
        return (self.state.get("socket") or {}).get("pid")

    def socket_knobs(self) -> SocketKnobs | None:
        st = self.state.get("socket")
        return SocketKnobs.parse(st["knobs"]) if st else None

    def _start_trex(self) -> None:
        """TRex in the generator namespace, DPDK af_packet on ports 0 and 1 (TRex's port numbers are
        the lab's), low_end on the first generator CPU and confined to the generator CPUs, its ports
        in L2 mode with the lab's MACs (the profiles take their MACs from the port configuration)."""
        t = self.state["trex"]
        cpus = self.cpus.generator if self.cpus else sorted(os.sched_getaffinity(0))[:1]
        proc = trex_server.TrexProcess(Path(t["runtime"]), self.gen_ns, [p.ifname for p in self.ports], cpus,
                               [{"src_mac": p.mac, "dest_mac": p.dut_mac} for p in self.ports],
                               prefix=t["prefix"], workdir=Path(t["workdir"]))

        def record(pid: int) -> None:
            t["pid"] = pid
            _write_state(self.state_path, self.state)
        try:
            proc.start(on_pid=record)
        except UserError as e:
            raise LabError(f"Couldn't start TRex in {self.gen_ns}: {e}") from None
        t["cpus"] = cpus
        t["log"] = str(proc.log)
        _write_state(self.state_path, self.state)

    def trex_pid(self) -> int | None:
        return (self.state.get("trex") or {}).get("pid")

    def _attach_fwd(self) -> None:
        """The reference forwarder on both DUT ports: each forwards to the other, towards the
        generator port behind it."""
        pin = fwd.load(self.pin_dir)
        idx = run_in_netns(self.dut_ns, lambda: [socket.if_nametoindex(p.dut_ifname) for p in self.ports])
        for (i, p), q in zip(enumerate(self.ports), reversed(self.ports)):
            fwd.set_port(self.pin_dir, idx[i], idx[1 - i], q.dut_mac, q.mac)
            _run(_in_netns(self.dut_ns) + ["ip", "link", "set", "dev", p.dut_ifname, "xdpdrv", "pinned", pin],
                 f"attach the forwarder to {p.dut_ifname}")

    # ---------------------------------------------------------------- CPU layout

    def apply_cpu_layout(self) -> dict:
        """Threaded NAPI on every lab veth that has one (an XDP program attached), its kthreads
        pinned: the DUT ports' to the DUT CPUs, the generator ports' to the generator CPUs.
        Idempotent; call it again whenever an XDP program is (re)attached to a lab port (the
        engine's connect does): a veth's NAPI kthread is made anew at each attach. Records what it
        did in state["cpu_layout"] and returns it."""
        if self.cpus is None:
            return {}
        lay: dict[str, Any] = {"generator": self.cpus.generator, "dut": self.cpus.dut,
                               "threads": {}, "notes": []}
        prev = self.state.get("cpu_layout") or {}
        if "awake" in prev:
            lay["awake"] = prev["awake"]
        cl = self.state.get("claim")
        if cl:
            lay["claim"] = {k: cl.get(k) for k in ("cpus", "shared", "shared_with")}
            if cl.get("shared_with"):
                lay["notes"].append("CPU(s) shared with " + "; ".join(map(claims.holder_text, cl["shared_with"]))
                                    + " (asked to share): what they run is in this lab's numbers")
        if self.cpus.shared():
            lay["notes"].append(f"CPU(s) {cpu_text(self.cpus.shared())} run both generator and DUT: "
                                "rates and CPU costs are the chain's, not the DUT's alone")
        sides = [(self.gen_ns, p.ifname, self.cpus.generator, "generator") for p in self.ports]
        sides += [(self.dut_ns, p.dut_ifname, self.cpus.dut, "dut") for p in self.ports]
        for ns, ifname, cpus, side in sides:
            threads = napi_threads(ifname)
            if not threads:
                r = _run(["ip", "netns", "exec", ns, "sh", "-c", f"echo 1 > /sys/class/net/{ifname}/threaded"],
                         f"turn on threaded NAPI on {ifname}", check=False)
                threads = napi_threads(ifname)
                if not threads:
                    why = (r.stderr.strip().splitlines() or ["no NAPI kthread appeared"])[-1]
                    if side == "dut" and self.dut_mode == "none":
                        why = "no XDP program on it (DUT mode none): the kernel's stack receives"
                    elif side == "dut" and self.dut_mode == "external":
                        why = "the external UPF attached no XDP program to it (or not yet)"
                    lay["notes"].append(f"{ifname} ({side}): no threaded NAPI ({why}); its receive "
                                        "work runs in the sender's softirq")
                    continue
            for pid in threads:
                try:
                    os.sched_setaffinity(pid, cpus)
                    # Real-time, as NIC interrupts and softirqs are: a receive thread that waits
                    # behind ordinary tasks overflows its 256-frame veth ring within milliseconds,
                    # and that loss would be the scheduler's, not the DUT's (docs/lab.md).
                    os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(NAPI_RT_PRIORITY))
                except OSError as e:
                    lay["notes"].append(f"{ifname} ({side}): Couldn't pin napi thread {pid}: {e.strerror}")
            lay["threads"][ifname] = [{"pid": pid, "side": side, "cpus": affinity(pid)} for pid in threads]
        if self.dut_mode == "external":
            lay["upf"] = external.process_info(self.external)
            if lay["upf"] is None and (self.external or {}).get("spec", {}).get("start"):
                lay["notes"].append("the external UPF's process is not running")
        dut_pinned = all(self.dut_mode == "none" or lay["threads"].get(p.dut_ifname) for p in self.ports)
        lay["honoured"] = dut_pinned and not self.cpus.shared()
        self.state["cpu_layout"] = lay
        if self.state_path.exists():
            _write_state(self.state_path, self.state)
        return lay

    def dut_threads(self) -> list[int]:
        """The DUT's receive kthreads now (the threads its XDP programs run in)."""
        return [pid for p in self.ports for pid in napi_threads(p.dut_ifname)]

    def keep_cpus_awake(self, method: str = "auto") -> dict:
        """Keep the DUT's CPUs out of halt until restore_cpu_idle() or teardown, by the first way this
        host allows (gtplab.lab.awake: its idle states off, as on a UPF host tuned with C-states off;
        without a cpuidle driver a SCHED_IDLE spinner; method "none": nothing). (The generator's CPUs
        are busy while they send: the engine paces in the kernel, it does not sleep.) On a VM, waking
        a halted vCPU costs from ~10 us (this Intel VM) to milliseconds (the AMD host measured in
        docs/lab.md), and a 256-frame veth ring lasts 0.25 ms at 1 Mpps. The DUT's CPU cost is read
        from its own threads' run time, which neither method touches. What it changed is recorded in
        the lab's state before the change, so teardown restores it even after a crash; the record
        (state["awake"], also in cpu_layout["awake"]) says what was and was not applied."""
        if self.cpus is None:
            return {}
        if "awake" in self.state:            # kept awake already (until restore_cpu_idle)
            return self.state["awake"]

        def save(rec: dict) -> None:
            self.state["awake"] = rec
            _write_state(self.state_path, self.state)
        rec = awake.keep_awake(self.cpus.dut, method, save)
        self.state["awake"] = rec
        self.state.setdefault("cpu_layout", {})["awake"] = _awake_summary(rec)
        _write_state(self.state_path, self.state)
        return rec

    def awake_threads(self) -> list[int]:
        """The threads that keep the DUT CPUs awake now (the spinners; none for idle states): the
        lab's own CPU time on the DUT's CPUs, never the DUT's."""
        return awake.spinner_tids(self.state.get("awake"))

    def restore_cpu_idle(self) -> None:
        restore_cpu_idle(self.state)
        if "awake" in self.state.get("cpu_layout") or {}:
            self.state["cpu_layout"]["awake"]["restored"] = True
        if self.state_path.exists():
            _write_state(self.state_path, self.state)

    def pin_generator(self) -> list[int] | None:
        """Pin the calling thread (and what it starts later) to the generator CPUs; returns the
        affinity it had, for restore_affinity()."""
        if self.cpus is None:
            return None
        old = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, self.cpus.generator)
        return old

    def _attach_verdict_prog(self, ns: str, ifnames: list[str], verdict: int) -> None:
        """Load (once) a one-instruction XDP program, pin it in the generator's pin dir, attach it in
        native mode to ifnames in ns (netlink attachment: it stays until detached or the veth goes)."""
        pin_dir = Path(self.gen_pin_dir)
        pin = pin_dir / f"xdp_{bpf.XDP_VERDICTS[verdict]}"
        if not pin.exists():
            pin_dir.mkdir(exist_ok=True)
            prog = bpf.xdp_verdict_prog(verdict, f"gtplab_{bpf.XDP_VERDICTS[verdict]}")
            try:
                bpf.obj_pin(prog.fd, str(pin))
            finally:
                prog.close()
        for ifname in ifnames:
            _run(_in_netns(ns) + ["ip", "link", "set", "dev", ifname, "xdpdrv", "pinned", str(pin)],
                 f"attach {pin.name} to {ifname} in {ns}")

    def attach_gen_pass(self) -> None:
        """XDP_PASS on both generator ports: a frame redirected into a veth in native XDP mode is only
        received if the peer has an XDP program, so without it the DUT's XDP_REDIRECTs vanish."""
        self._attach_verdict_prog(self.gen_ns, [p.ifname for p in self.ports], bpf.XDP_PASS)

    def detach_gen_xdp(self) -> None:
        """Remove whatever XDP program the generator ports have (ours or a crashed engine's)."""
        for p in self.ports:
            _run(_in_netns(self.gen_ns) + ["ip", "link", "set", "dev", p.ifname, "xdpdrv", "off"],
                 f"detach XDP from {p.ifname}")

    def down(self) -> None:
        teardown(self.state, self._external_proc)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    @classmethod
    def open(cls, name: str) -> "Lab":
        """The lab `name` made by an earlier Lab.up() (in this or another process)."""
        try:
            return cls(json.loads(_state_path(name).read_text()))
        except FileNotFoundError:
            raise LabError(f"no lab named {name!r} (see `gtplab lab status`)") from None

    # ---------------------------------------------------------------- use

    def pgwu(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        """Run `pgwu -d <pin dir> args...` in the DUT netns; returns stdout, raises LabError on failure."""
        p = _run(_in_netns(self.dut_ns) + [str(pgwu_binary()), "-d", self.pin_dir, *map(str, args)],
                 f"run pgwu {' '.join(map(str, args[:2]))}", check=check, timeout=timeout)
        return p.stdout

    def pgwu_json(self, *args: str) -> Any:
        return json.loads(self.pgwu(*args, "--json"))

    def links(self) -> list[dict]:
        """`ip -d -j link` of the lab's veths in both namespaces (empty for a namespace that is gone)."""
        out = []
        for ns in (self.gen_ns, self.dut_ns):
            if not _netns_exists(ns):
                continue
            p = _run(["ip", "-n", ns, "-d", "-j", "link", "show", "type", "veth"], f"list links in {ns}",
                     check=False)
            for link in json.loads(p.stdout or "[]"):
                link["netns"] = ns
                out.append(link)
        return out


def restore_cpu_idle(state: dict) -> list[str]:
    """Give back what Lab.keep_cpus_awake() changed (idle states, spinners); returns what it did."""
    done = awake.restore(state.pop("awake", None))
    # a state file written before gtplab.lab.awake: {path: value} of the idle states turned off
    for path, value in (state.pop("cpuidle_saved", None) or {}).items():
        try:
            Path(path).write_text(value)
            done.append(f"idle state {path} restored")
        except OSError:
            pass
    return done


def _awake_summary(rec: dict) -> dict:
    """What the layout (run.json, lab status, the report) says of keeping the DUT CPUs awake."""
    return {k: rec.get(k) for k in ("asked", "method", "applied", "notes", "cpus")}


def teardown(state: dict, external_proc=None) -> list[str]:
    """Remove everything a lab's state lists that still exists; returns what was removed.
    Safe to run again, and after a crash at any point of Lab.up()."""
    removed = restore_cpu_idle(state)
    if state.get("external"):
        # stopped first, as it asks to be (its stop command, or SIGTERM): it may detach its programs
        removed += external.stop(state, external_proc)
        dut_ns = state["netns"]["dut"]
        for ifname in state["external"].get("xdp_pass") or []:
            # the XDP_PASS of a UPF without XDP (Lab._build), detached before its namespace goes
            if _netns_exists(dut_ns) and _run(["ip", "-n", dut_ns, "link", "set", "dev", ifname, "xdpdrv", "off"],
                                              f"detach XDP from {ifname}", check=False).returncode == 0:
                removed.append(f"XDP_PASS on {ifname}")
    removed += claims.release(state["name"])
    t = state.get("trex")
    if t:
        removed += trex_server.kill_recorded(t.get("pid"), t.get("prefix"))
    for ns in state["netns"].values():
        if not _netns_exists(ns):
            continue
        # Processes left inside (an engine worker, `pgwu metrics`) would keep the netns alive.
        pids = _run(["ip", "netns", "pids", ns], f"list processes in {ns}", check=False).stdout.split()
        killed = []
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
            except (ProcessLookupError, ValueError):
                pass
        # gone (or a zombie) before teardown returns: `pgwu socket` never outlives its lab's `down`
        end = time.monotonic() + 2.0
        while any(_alive(p) for p in killed) and time.monotonic() < end:
            time.sleep(0.01)
        _run(["ip", "netns", "del", ns], f"delete netns {ns}")
        removed.append(f"netns {ns}")
    for d in state["pin_dirs"].values():
        # a `pgwu pfcp` agent (or `pgwu metrics`) left by an owner that died before its teardown
        removed += _stop_pgwu_on_pins(d)
        if os.path.lexists(d):
            shutil.rmtree(d)
            removed.append(f"bpffs {d}")
    log = (state.get("socket") or {}).get("log")
    if log and os.path.exists(log):
        os.unlink(log)
        removed.append(f"pgwu socket log {log}")
    if t and t.get("workdir") and os.path.isdir(t["workdir"]):
        shutil.rmtree(t["workdir"], ignore_errors=True)
        removed.append(f"TRex work dir {t['workdir']}")
    ext = state.get("external")
    if ext and ext.get("workdir") and os.path.isdir(ext["workdir"]):
        shutil.rmtree(ext["workdir"], ignore_errors=True)
        removed.append(f"external UPF work dir {ext['workdir']}")
    sp = _state_path(state["name"])
    for f in (sp, sp.with_suffix(".tmp")):
        if f.exists():
            f.unlink()
            removed.append(f"state {f}")
    return removed


def lab_names() -> list[str]:
    if not STATE_DIR.is_dir():
        return []
    return sorted(p.stem for p in STATE_DIR.glob("*.json"))


# ---------------------------------------------------------------- status

def _owner_alive(state: dict) -> bool:
    try:
        os.kill(int(state.get("pid", 0)), 0)
        return True
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    except PermissionError:
        return True


def cpu_layout_now(lab: Lab) -> dict | None:
    """The lab's CPU layout as recorded at its last apply, with each NAPI kthread's affinity now."""
    lay = lab.state.get("cpu_layout")
    if not lay:
        return None
    out = {**lay, "threads": {}}
    for p in lab.ports:
        for ifname, side, cpus in ((p.ifname, "generator", lay["generator"]), (p.dut_ifname, "dut", lay["dut"])):
            out["threads"][ifname] = [{"pid": pid, "side": side, "cpus": affinity(pid),
                                       "pinned": affinity(pid) == sorted(cpus)} for pid in napi_threads(ifname)]
    return out


def lab_status(name: str) -> dict:
    lab = Lab.open(name)
    st: dict[str, Any] = {"name": name, "status": lab.state["status"], "created": lab.state["created"],
                          "dut": lab.dut_mode, "pin_dir": lab.pin_dir,
                          "netns": {k: {"name": v, "exists": _netns_exists(v)}
                                    for k, v in lab.state["netns"].items()},
                          "ports": [asdict(p) for p in lab.ports], "links": [],
                          "park": lab.park_ifnames, "cpu_layout": cpu_layout_now(lab),
                          "generator": lab.generator, "shared_with": lab.shared_with()}
    if lab.dut_mode == "pgwu":
        st["reassembler"] = lab.state.get("reassembler")
    if lab.dut_mode == "socket":
        st["socket"] = {**lab.state["socket"], "running": bool(lab.socket_pid()) and _is_pgwu(lab.socket_pid())}
    if lab.external:
        x = lab.external
        st["external"] = {"pid": x.get("pid"), "running": external.process_info(x) is not None,
                          "log": x.get("log"), "runtime": x.get("runtime"), "workdir": x.get("workdir"),
                          "n4": {"upf": f"{lab.addressing.dut_n4} on {x['n4']['dut_ifname']}",
                                 "cp": f"{lab.addressing.cp_n4} on {x['n4']['cp_ifname']} in {x['cp_netns']}"},
                          "user_started": not (x.get("spec") or {}).get("start")}
    if lab.generator == "trex":
        t = lab.state["trex"]
        st["trex"] = {**t, "running": bool(t.get("pid")) and trex_server.is_trex(t["pid"])}
    if lab.state["status"] == "creating" and not _owner_alive(lab.state):
        st["status"] = "broken (creator died; remove with `gtplab lab down --name %s`)" % name
    elif not lab.state.get("standalone") and not _owner_alive(lab.state):
        # made by a sweep or a test that is gone: nobody will tear it down
        st["status"] = "orphaned (its creator, pid %s, is gone; remove with `gtplab lab down --name %s`)" % (
            lab.state.get("pid"), name)
    for link in lab.links():
        xdp = link.get("xdp") or {}
        prog = xdp.get("prog") or {}
        st["links"].append({"netns": link["netns"], "ifname": link["ifname"], "mtu": link.get("mtu"),
                            "state": link.get("operstate"), "mac": link.get("address"),
                            "xdp": {"mode": XDP_MODES.get(xdp.get("mode"), xdp.get("mode")), "prog_id": prog.get("id"),
                                    "prog_name": prog.get("name")} if xdp else None})
    if lab.dut_mode in ("pgwu", "socket") and _netns_exists(lab.dut_ns) and Path(lab.pin_dir).exists():
        try:
            st["dut_stats"] = lab.pgwu_json("stats")
        except (LabError, ValueError) as e:
            st["dut_stats_error"] = str(e)
    return st


