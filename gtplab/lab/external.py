"""Any UPF process as the namespace lab's DUT (`dut.mode: external`, docs/lab.md "An external UPF").

The lab builds its namespaces and veths as for the PGW-U, attaches nothing to the DUT ports, and
starts the UPF the lab config names in the DUT namespace, with its config rendered from the lab's
addresses and interfaces. gtplab's control plane reaches the UPF's N4 address through a link of its
own, from a third namespace, never through the host:

    gtplab-N-cp  (gtplab's PFCP node)            gtplab-N-dut  (the UPF)
    c<N>n4  10.203.0.2/29  ======= veth =======  d<N>n4  10.203.0.1/29   N4 (PFCP, the UPF's API)
                                                 d<N>p0  10.201.0.1       N3 (access)  XDP: the UPF's
                                                 d<N>p1  10.202.0.1       N6 (SGi)     XDP: the UPF's

The control-plane namespace has that one link and no default route, so nothing addressed to the
lab's N4 can leave the machine (check_n4_route, at lab up and before the association).

    dut:
      mode: external
      external:
        runtime: ../shared/eupf/eupf-a8d774a-runtime.tgz   # a directory or a tarball (unpacked into
        runtime_env: GTPLAB_EUPF_TARBALL                   # the cache); the variable overrides it
        config_file: eupf.yml                 # the UPF's config, rendered into the lab's work dir
        config: |                             #   from this template ({placeholders}, below)
          interface_name: [{n3_if}, {n6_if}]
          pfcp_address: {n4}:8805
        setup: [ip tuntap add name t0 mode tun]   # shell commands run in the DUT netns before start
        start: "{runtime}/bin/eupf --config {config}"   # run in the DUT netns; none: the user starts it
        stop: null                            # a command run in the DUT netns; null: SIGTERM to it
        vars: {feature_ftup: "false"}         # more placeholders, e.g. for a test to change
        cpus: dut                             # where its process runs: dut (default) | generator | all
        xdp: true                             # it attaches XDP to both DUT ports: up waits for them
                                              # (false: the lab attaches XDP_PASS to both, so the
                                              # generator's redirected frames reach the UPF's
                                              # sockets; up waits SETTLE s and checks it still runs)
        ready_timeout: 30

Placeholders: {runtime} {workdir} {config} (the rendered file); the DUT's interfaces {n3_if} {n6_if}
{n4_if}; addresses {n3} {n6} {n4} (the UPF's), {n3_6} (the UPF's N3 IPv6 address: GTP-U over
IPv6), {cp} (gtplab's N4 address), {n3_peer} {n6_peer} (the generator's ports), {n3_prefixlen} {n6_prefixlen} {n4_prefixlen}, {ue_pool} {pdn_net} {sgw_base};
{dut_cpus}; {mtu} (the lab's links'); and each of `vars`. Literal braces are doubled ({{ }}).

The UPF runs as `ip netns exec <dut ns> sh -c 'mount -t bpf bpf /sys/fs/bpf && exec taskset -c
<cpus> <start>'`: `ip netns exec` gives it a private /sys, so a bpffs is mounted there, its own and
gone with it. Its pid and start time go into the lab's state before the lab waits for it (it is
followed by those, never by its name: is_upf); teardown stops its process group (a `sh -c` or a
wrapper and what it started) or what is left of that group in the DUT namespace (the stop
command or SIGTERM, then SIGKILL after STOP_GRACE s) before the namespaces go, also after a crash
of the lab's creator. Its output, and the setup commands', is <workdir>/upf.log.

Used by gtplab.lab.topology (Lab.up with dut="external", teardown) and gtplab.lab.config (the
`dut.external` section is checked when a lab config is read).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import string
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gtplab import bounded
from gtplab.errors import LabError, UserError
from gtplab.kernel.netns import route_problem as netns_route_problem
from gtplab.kernel.sched import live_stat
from gtplab.lab import runtime

_KEYS = {"runtime", "runtime_env", "config_file", "config", "setup", "start", "stop", "vars", "cpus", "xdp",
         "ready_timeout"}
CPU_CHOICES = ("dut", "generator", "all")
PLACEHOLDERS = ("runtime", "workdir", "config", "n3_if", "n6_if", "n4_if", "n3", "n6", "n4", "cp", "n3_6",
                "n3_peer", "n6_peer", "n3_prefixlen", "n6_prefixlen", "n4_prefixlen", "ue_pool",
                "pdn_net", "sgw_base", "dut_cpus", "mtu")
STOP_GRACE = 10.0           # s between the stop (command or SIGTERM) and SIGKILL
SETTLE = 1.0                # s a UPF without XDP (xdp: false) must stay up to count as started
SETUP_TIMEOUT = 60.0        # s one dut.external.setup command may take
PFCP_PORT = 8805


@dataclass
class ExternalSpec:
    """dut.external of a lab config, checked. runtime is absolute (resolved against the config's
    folder) or None."""
    start: str | None = None
    stop: str | None = None
    config: str | None = None
    config_file: str = "upf.conf"
    setup: list[str] = field(default_factory=list)
    runtime: str | None = None
    runtime_env: str | None = None
    vars: dict[str, str] = field(default_factory=dict)
    cpus: str = "dut"
    xdp: bool = True
    ready_timeout: float = 30.0

    @property
    def user_started(self) -> bool:
        """No start command: the user starts the UPF in the lab's DUT namespace."""
        return not self.start


def parse_spec(d: Any, where: str, base: Path | None = None) -> ExternalSpec:
    """dut.external, checked (UserError naming the key); base: the lab config's folder, against
    which a relative runtime path is resolved. Every template is rendered once with dummy values,
    so an unknown placeholder is found here, not when the lab is built."""
    if d is None:
        d = {}
    if not isinstance(d, dict):
        raise UserError(f"{where}: dut.external must be a mapping (start, config, runtime, ...)")
    bad = set(d) - _KEYS
    if bad:
        raise UserError(f"{where}: unknown key(s) in dut.external: {', '.join(sorted(bad))} "
                        f"(allowed: {', '.join(sorted(_KEYS))})")
    for k in ("start", "stop", "config", "config_file", "runtime", "runtime_env"):
        if d.get(k) is not None and not isinstance(d[k], str):
            raise UserError(f"{where}: dut.external.{k} must be a string")
    setup = d.get("setup") or []
    if not isinstance(setup, list) or not all(isinstance(c, str) and c.strip() for c in setup):
        raise UserError(f"{where}: dut.external.setup must be a list of shell commands (strings)")
    vars_ = d.get("vars") or {}
    if not isinstance(vars_, dict) or not all(isinstance(k, str) and k.isidentifier() for k in vars_):
        raise UserError(f"{where}: dut.external.vars must map names to values")
    clash = set(vars_) & set(PLACEHOLDERS)
    if clash:
        raise UserError(f"{where}: dut.external.vars {', '.join(sorted(clash))}: the lab sets those")
    cpus = d.get("cpus", "dut")
    if cpus not in CPU_CHOICES:
        raise UserError(f"{where}: dut.external.cpus {cpus!r}: one of {', '.join(CPU_CHOICES)}")
    if "xdp" in d and not isinstance(d["xdp"], bool):
        raise UserError(f"{where}: dut.external.xdp must be true or false")
    rt = d.get("ready_timeout", 30)
    if isinstance(rt, bool) or not isinstance(rt, (int, float)) or rt <= 0:
        raise UserError(f"{where}: dut.external.ready_timeout {rt!r} must be a number of seconds > 0")
    cf = d.get("config_file") or "upf.conf"
    if "/" in cf or cf in (".", "..", "upf.log"):
        raise UserError(f"{where}: dut.external.config_file {cf!r}: a file name (written in the lab's work dir)")
    r = d.get("runtime")
    if r:
        p = Path(os.path.expanduser(r))
        r = str(p if p.is_absolute() or base is None else (base / p).resolve())
    spec = ExternalSpec(start=d.get("start") or None, stop=d.get("stop") or None, config=d.get("config"),
                        config_file=cf, setup=list(setup), runtime=r, runtime_env=d.get("runtime_env") or None,
                        vars={k: str(v) for k, v in vars_.items()}, cpus=cpus, xdp=d.get("xdp", True),
                        ready_timeout=float(rt))
    if spec.config is not None and spec.start is None:
        raise UserError(f"{where}: dut.external.config is rendered for the start command: give start "
                        "(or drop config and start the UPF yourself)")
    dummy = {k: "x" for k in PLACEHOLDERS} | spec.vars
    for k in ("start", "stop", "config"):
        v = getattr(spec, k)
        if v is not None:
            try:
                render(v, dummy)
            except UserError as e:
                raise UserError(f"{where}: dut.external.{k}: {e}") from None
    for i, c in enumerate(spec.setup):
        try:
            render(c, dummy)
        except UserError as e:
            raise UserError(f"{where}: dut.external.setup[{i}]: {e}") from None
    return spec


def render(template: str, values: dict[str, str]) -> str:
    """template with {name} replaced (str.format); UserError naming an unknown placeholder."""
    try:
        names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise UserError(f"bad template ({e}; literal braces are written {{{{ and }}}})") from None
    for n in names:
        if n not in values:
            raise UserError(f"unknown placeholder {{{n}}} (known: "
                            f"{', '.join('{' + k + '}' for k in sorted(values))})")
    return template.format_map(values)


def spec_dict(spec: ExternalSpec) -> dict:
    return asdict(spec)


# ------------------------------------------------------------------------------------------ names

def plan(name: str, spec: ExternalSpec, state_dir: Path) -> dict:
    """What an external DUT adds to a lab's state, before anything exists: the control plane's
    namespace and the N4 link's names (teardown removes them), the UPF's work dir, and its pid once
    started."""
    return {"spec": spec_dict(spec), "cp_netns": f"gtplab-{name}-cp",
            "n4": {"cp_ifname": f"c{name}n4", "dut_ifname": f"d{name}n4"},
            "workdir": str(state_dir / f"{name}-upf"), "runtime": None, "pid": None, "start_ticks": None, "argv0": None}


def values(lab, ext: dict) -> dict[str, str]:
    """The placeholders of the lab's templates (module doc)."""
    a, (acc, sgi) = lab.addressing, lab.ports
    spec = ExternalSpec(**ext["spec"])
    cpus = lab.cpus.dut if lab.cpus is not None else sorted(os.sched_getaffinity(0))
    v = {"runtime": ext.get("runtime") or "", "workdir": ext["workdir"],
         "config": str(Path(ext["workdir"]) / spec.config_file),
         "n3_if": acc.dut_ifname, "n6_if": sgi.dut_ifname, "n4_if": ext["n4"]["dut_ifname"],
         "n3": a.dut_access, "n6": a.dut_sgi, "n4": a.dut_n4, "cp": a.cp_n4, "n3_6": a.dut_access6,
         "n3_peer": a.gen_access, "n6_peer": a.gen_sgi, "n3_prefixlen": str(a.prefixlen("access")),
         "n6_prefixlen": str(a.prefixlen("sgi")), "n4_prefixlen": str(a.prefixlen("n4")),
         "ue_pool": a.ue_pool, "pdn_net": a.pdn_net, "sgw_base": a.sgw_base,
         "dut_cpus": ",".join(map(str, cpus)), "mtu": str(acc.mtu)}
    return v | spec.vars


def _ip(argv: list[str], what: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise LabError(f"Couldn't {what}: {(p.stderr.strip() or p.stdout.strip() or f'status {p.returncode}')[:300]}")
    return p


# ------------------------------------------------------------------------------------------ N4

def build_n4(lab, ext: dict) -> None:
    """The control plane's namespace and the N4 veth into the DUT namespace (created inside the
    namespaces: nothing appears in the host's), addressed from the lab's addressing."""
    a, cp, n4 = lab.addressing, ext["cp_netns"], ext["n4"]
    _ip(["ip", "netns", "add", cp], f"create netns {cp}")
    _ip(["ip", "netns", "exec", cp, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], f"disable IPv6 in {cp}")
    _ip(["ip", "-n", cp, "link", "set", "lo", "up"], f"bring up lo in {cp}")
    _ip(["ip", "-n", cp, "link", "add", n4["cp_ifname"], "type", "veth", "peer", "name", n4["dut_ifname"],
         "netns", lab.dut_ns], f"create the N4 veth {n4['cp_ifname']}/{n4['dut_ifname']}")
    plen = a.prefixlen("n4")
    _ip(["ip", "-n", cp, "addr", "add", f"{a.cp_n4}/{plen}", "dev", n4["cp_ifname"]], "address the CP's N4 link")
    _ip(["ip", "-n", lab.dut_ns, "addr", "add", f"{a.dut_n4}/{plen}", "dev", n4["dut_ifname"]],
        "address the UPF's N4 link")
    _ip(["ip", "-n", cp, "link", "set", n4["cp_ifname"], "up"], "bring up the CP's N4 link")
    _ip(["ip", "-n", lab.dut_ns, "link", "set", n4["dut_ifname"], "up"], "bring up the UPF's N4 link")
    check_n4_route(cp, a.dut_n4, n4["cp_ifname"])


def check_n4_route(netns: str, upf_addr: str, ifname: str) -> None:
    """The UPF's N4 address is reached from the control plane's namespace through the lab's N4
    link only: the route to it leaves by ifname, and that namespace has no default route (nothing
    addressed to N4 can take the host's way out). LabError saying which part does not hold."""
    why = netns_route_problem(netns, upf_addr, ifname)
    if why:
        raise LabError(f"N4: {why}")


# ------------------------------------------------------------------------------------------ the UPF

def xdp_progs(netns: str, ifnames: list[str]) -> dict[str, dict | None]:
    """{ifname: {"id", "name", "mode"} of the XDP program attached to it, or None}."""
    p = _ip(["ip", "-n", netns, "-d", "-j", "link", "show"], f"list links in {netns}", check=False)
    out: dict[str, dict | None] = {i: None for i in ifnames}
    for link in json.loads(p.stdout or "[]") if p.returncode == 0 else []:
        if link.get("ifname") in out and link.get("xdp"):
            x = link["xdp"]
            prog = x.get("prog") or {}
            out[link["ifname"]] = {"id": prog.get("id"), "name": prog.get("name"),
                                   "mode": {1: "native", 2: "generic", 3: "offload"}.get(x.get("mode"), x.get("mode"))}
    return out


def upf_cpus(lab, spec: ExternalSpec) -> list[int]:
    if lab.cpus is None or spec.cpus == "all":
        return sorted(os.sched_getaffinity(0))
    return list(lab.cpus.dut if spec.cpus == "dut" else lab.cpus.generator)


def start(lab, ext: dict, write_state) -> None:
    """Resolve the runtime, render the UPF's config, start it in the DUT namespace on its CPUs,
    record its pid (write_state()) and wait until it is ready: alive, and with `xdp`, an XDP program
    on both DUT ports. LabError with the tail of its log when it exits or is not ready in time."""
    spec = ExternalSpec(**ext["spec"])
    wd = Path(ext["workdir"])
    wd.mkdir(parents=True, exist_ok=True)
    if spec.runtime or spec.runtime_env:
        ext["runtime"] = str(runtime.resolve(spec.runtime, spec.runtime_env, "the external UPF's"))
    v = values(lab, ext)
    if spec.config is not None:
        Path(v["config"]).write_text(render(spec.config, v))
    run_setup(lab.dut_ns, spec, v, wd)
    if spec.user_started:
        write_state()
        return
    argv = shlex.split(render(spec.start, v))
    if not argv:
        raise LabError("dut.external.start renders to an empty command")
    exe = argv[0]
    if "/" in exe and not os.access(exe, os.X_OK):
        raise LabError(f"dut.external.start: {exe} is not an executable file")
    cpus = upf_cpus(lab, spec)
    log = open(wd / "upf.log", "ab")
    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.dut_ns, "sh", "-c", 'mount -t bpf bpf /sys/fs/bpf && exec "$@"', "sh",
             "taskset", "-c", ",".join(map(str, cpus)), *argv],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=wd, start_new_session=True)
    finally:
        log.close()
    # followed by pid and start time (not by name: a wrapper script or a renamed process is still it,
    # a reused pid is not); the pid leads its own process group (start_new_session), which stop() ends
    ext.update(pid=proc.pid, start_ticks=proc_start_ticks(proc.pid), argv0=os.path.basename(exe), cpus=cpus,
               log=str(wd / "upf.log"), started=time.time())
    write_state()
    lab._external_proc = proc           # reaped by stop() in this process
    ports = [p.dut_ifname for p in lab.ports]
    t0 = time.monotonic()
    deadline = t0 + spec.ready_timeout
    while True:
        if proc.poll() is not None:
            raise LabError(f"the external UPF exited (status {proc.returncode}) before it was ready: "
                           f"{log_tail(ext)}")
        progs = xdp_progs(lab.dut_ns, ports) if spec.xdp else {}
        # ready: its XDP programs on both DUT ports; a UPF without XDP: still running after SETTLE s
        if all(progs.values()) if spec.xdp else time.monotonic() - t0 >= min(SETTLE, spec.ready_timeout):
            ext["xdp"] = progs
            write_state()
            return
        if time.monotonic() > deadline:
            missing = ", ".join(i for i, x in progs.items() if not x)
            raise LabError(f"the external UPF attached no XDP program to {missing} within "
                           f"{spec.ready_timeout:g} s (dut.external.ready_timeout; xdp: false for a UPF "
                           f"without XDP): {log_tail(ext)}")
        time.sleep(0.1)


def run_setup(netns: str, spec: ExternalSpec, v: dict[str, str], wd: Path) -> None:
    """dut.external.setup: each command rendered and run with `sh -c` in the DUT namespace, in
    order, before the UPF starts (what it makes there, a TUN device, routes, goes with the namespace).
    Their output goes to the UPF's log. LabError naming the first that fails and its stderr."""
    for tmpl in spec.setup:
        cmd = render(tmpl, v)
        try:
            p = subprocess.run(["ip", "netns", "exec", netns, "sh", "-c", cmd], capture_output=True, text=True,
                               timeout=SETUP_TIMEOUT, cwd=wd)
        except subprocess.TimeoutExpired:
            raise LabError(f"dut.external.setup command `{cmd}` did not end within {SETUP_TIMEOUT:g} s") from None
        with open(wd / "upf.log", "a") as log:
            log.write(f"setup: {cmd}\n{p.stdout}{p.stderr}")
        if p.returncode != 0:
            err = (p.stderr.strip() or p.stdout.strip() or "no output").replace("\n", " | ")[:300]
            raise LabError(f"dut.external.setup command `{cmd}` failed (status {p.returncode}): {err}")


def log_tail(ext: dict, n: int = 600) -> str:
    log = ext.get("log") or ""
    if not os.path.isfile(log):
        return "(no log)"
    text = bounded.read_tail(log)       # its end: a UPF's log may be gigabytes
    lines = [ln for ln in text.strip().splitlines() if ln.strip()][-6:]
    return (" | ".join(lines))[-n:] or "(empty log)"


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time (/proc/PID/stat field 22, clock ticks since boot): with the pid, it
    names one process for the machine's uptime (a reused pid has another)."""
    st = live_stat(pid)
    return st.start_ticks if st else None


def is_upf(pid: int | None, start_ticks: int | None) -> bool:
    """Whether pid is still the UPF the lab started: the same pid with the same start time (not a
    reused pid, whatever its name; a wrapper that exec'd the UPF, or renamed itself, is still it)."""
    return bool(pid) and start_ticks is not None and proc_start_ticks(pid) == start_ticks


def _netns_ino(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def group_members(pgid: int | None, netns: str | None) -> list[int]:
    """The live processes of process group pgid inside the lab's namespace netns: what the UPF's
    start command started (a wrapper's children) that still runs, even after its leader has gone.
    The namespace check keeps a group that reused the pid out. A member in its exit path (signalled,
    not yet a zombie: state D while it releases what it held) has already let go of its namespaces,
    so /proc/PID/ns/net no longer resolves: it still counts, or a stop would return while it runs."""
    ino = _netns_ino(f"/run/netns/{netns}") if pgid and netns else None
    if ino is None:
        return []
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = live_stat(int(d))
            if st and st.pgrp == pgid and _netns_ino(f"/proc/{d}/ns/net") in (ino, None):
                out.append(int(d))
    return out


def upf_pids(ext: dict | None, netns: str | None) -> list[int]:
    """The processes of the running external UPF: its recorded pid (if still it) and what else runs
    in its process group in the DUT namespace (a wrapper's children). Their time on the DUT CPUs is
    the DUT's own work (gtplab.observe.host), not another task's."""
    if not ext or not ext.get("pid"):
        return []
    pid = ext["pid"]
    lead = [pid] if is_upf(pid, ext.get("start_ticks")) else []
    return lead + [p for p in group_members(pid, netns) if p != pid]


def process_info(ext: dict | None) -> dict | None:
    """The UPF's process as it runs now: pid, CPUs allowed, threads (for the CPU layout)."""
    if not ext or not is_upf(ext.get("pid"), ext.get("start_ticks")):
        return None
    pid = ext["pid"]
    try:
        cpus = sorted(os.sched_getaffinity(pid))
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None
    return {"pid": pid, "cpus": cpus, "threads": threads}


def stop(state: dict, proc=None) -> list[str]:
    """Stop the external UPF of a lab's state: its stop command in the DUT namespace, or SIGTERM to
    its process group; SIGKILL after STOP_GRACE s. The process is the recorded pid with its start
    time, and its group: what a start command through a shell (`sh -c`, a wrapper script) started
    is stopped with it, also when the leader has already gone. Returns what it did (for teardown's
    list)."""
    ext = state.get("external") or {}
    pid, done = ext.get("pid"), []
    dut_ns = (state.get("netns") or {}).get("dut")
    spec = ExternalSpec(**ext["spec"]) if ext.get("spec") else ExternalSpec()

    def leader() -> bool:
        return (proc is None or proc.poll() is None) and is_upf(pid, ext.get("start_ticks"))

    def running() -> bool:
        return leader() or bool(group_members(pid, dut_ns))

    def signal_all(sig: int) -> None:
        try:
            if leader():
                os.killpg(pid, sig)                              # the whole group
                return
        except OSError:
            pass
        for m in group_members(pid, dut_ns):                     # the leader is gone: what is left of it
            try:
                os.kill(m, sig)
            except OSError:
                pass

    alive = running()
    if spec.stop and os.path.exists(f"/run/netns/{state['netns']['dut']}"):
        v = {k: "" for k in PLACEHOLDERS} | {"workdir": ext.get("workdir", ""), "runtime": ext.get("runtime") or ""}
        v |= spec.vars
        try:
            cmd = render(spec.stop, v)
        except UserError:
            cmd = None
        if cmd:
            subprocess.run(["ip", "netns", "exec", state["netns"]["dut"], "sh", "-c", cmd],
                           capture_output=True, timeout=60)
            done.append(f"external UPF stop command: {cmd}")
    elif alive:
        signal_all(signal.SIGTERM)
    if alive:
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline and running():
            time.sleep(0.05)
        if running():
            signal_all(signal.SIGKILL)
            done.append(f"external UPF pid {pid} killed (no exit within {STOP_GRACE:g} s)")
        else:
            done.append(f"external UPF pid {pid} stopped")
    if proc is not None:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
    return done
