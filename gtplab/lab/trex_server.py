"""TRex as an installed tool: where its runtime is, and one TRex server process on DPDK af_packet,
the namespace lab's generator with `gtplab lab up --generator trex` (gtplab/lab/topology.py starts it,
records its pid and stops it; gtplab/traffic/trex/client.py drives it).

    d = trex_server.resolve("/opt/trex-v3.08.tgz")     # a tarball (unpacked once) or a directory
    srv = trex_server.TrexProcess(d, netns="gtplab-x-gen", ifaces=["gxp0", "gxp1"], cpus=[0],
                                  port_info=[{"src_mac": ..., "dest_mac": ...}, ...])
    srv.start(on_pid=lambda pid: ...)                   # waits for its RPC port; srv.stop() always

The runtime (docs/trex.md): a TRex directory (the folder holding `t-rex-64`, or one whose `scripts/`
holds it), or a release tarball. A tarball is unpacked once into a cache directory
($GTPLAB_TREX_CACHE, default /var/cache/gtplab) named after it and the first 16 hex digits of its
sha256, atomically (unpacked beside, then renamed), so every lab and test run shares one copy and a
changed tarball gets a directory of its own. Without a source given: $GTPLAB_TREX_DIR, else
$GTPLAB_TREX_TARBALL, else ../shared/trex/trex-v3.08-runtime.tgz next to the repo clone (CI).
Nothing of TRex is written into the repo.

The server runs inside a network namespace (`ip netns exec`: TRex listens on every address of its
namespace, TCP 4501 RPC, 4500 publisher), with DPDK's af_packet on the given interfaces, `low_end`
on the first of its CPUs (master, rx and tx share that core; TRex busy-polls it), under `taskset` on
its CPUs, `--no-scapy-server`, a DPDK file prefix of its own, no hugepages (af_packet needs none).
stop() kills its process group (TERM, then KILL) and removes DPDK's runtime directory;
kill_recorded() does the same from a recorded pid, for a lab torn down after its creator died.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from gtplab.errors import UserError
from gtplab.kernel.netns import run_in
from gtplab.lab import runtime

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TARBALL = REPO.parent / "shared" / "trex" / "trex-v3.08-runtime.tgz"
DEFAULT_CACHE = "/var/cache/gtplab"
RPC_PORT = 4501
DPDK_RUN_DIR = Path("/var/run/dpdk")

# framesz bounds the frame size (4096: a 3024 B frame plus GTP-U and a VLAN tag); framecnt 4096: with
# af_packet's default ring (256) the receiving port lost ~18 % above ~100 kpps (../shared/trex/README.md)
VDEV = "--vdev=net_af_packet{i},iface={iface},blocksz=4096,framesz=4096,framecnt=4096"


class TrexUnavailable(UserError):
    """No TRex runtime where it was looked for (the message says where)."""


def unpack(tgz: Path, cache: str | os.PathLike | None = None) -> Path:
    """The tarball unpacked into the cache (once; reused while its sha256 is the same): the folder
    holding t-rex-64 (gtplab.lab.runtime.unpack, with TRex's cache variable and content check)."""
    return runtime.unpack(tgz, cache or os.environ.get("GTPLAB_TREX_CACHE") or DEFAULT_CACHE,
                          find=_scripts, holds="t-rex-64 (in its top folder or scripts/)",
                          error=TrexUnavailable)


def _scripts(d: Path) -> Path | None:
    for cand in (d, d / "scripts"):
        if (cand / "t-rex-64").is_file():
            return cand
    return None


def default_source() -> Path:
    return Path(os.environ.get("GTPLAB_TREX_DIR") or os.environ.get("GTPLAB_TREX_TARBALL")
                or DEFAULT_TARBALL)


def resolve(source: str | os.PathLike | None = None, cache: str | os.PathLike | None = None) -> Path:
    """The folder holding t-rex-64, from a TRex directory or a release tarball (unpacked once into
    the cache); source None: default_source()."""
    src = Path(source) if source else default_source()
    if src.is_dir():
        found = _scripts(src)
        if not found:
            raise TrexUnavailable(f"TRex directory {src} holds no t-rex-64 (in it or in scripts/)")
        return found
    if src.is_file():
        return unpack(src, cache)
    how = "" if source else " (set GTPLAB_TREX_TARBALL or GTPLAB_TREX_DIR, or trex.runtime in the lab config)"
    raise TrexUnavailable(f"no TRex runtime: {src} does not exist{how}")


def config_yaml(ifaces: list[str], core: int, prefix: str, port_info: list[dict]) -> str:
    """TRex's platform config (trex_cfg.yaml) for DPDK af_packet on ifaces, low_end on core."""
    vdevs = ", ".join(f'"{VDEV.format(i=i, iface=f)}"' for i, f in enumerate(ifaces))
    info = ", ".join("{" + ", ".join(f"{k}: {v}" for k, v in p.items()) + "}" for p in port_info)
    return (f"- version: 2\n  prefix: {prefix}\n  interfaces: [{vdevs}]\n  low_end: true\n"
            f"  low_end_core: {core}\n  port_info: [{info}]\n")


def _ns_pids(ns: str) -> list[int]:
    cp = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(x) for x in cp.stdout.split()] if cp.returncode == 0 else []


def port_open(ns: str, port: int = RPC_PORT) -> bool:

    def probe():
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0
    return run_in(ns, probe)


def is_trex(pid: int) -> bool:
    """pid still runs TRex (its start script or server), not a process that reused the pid."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return b"t-rex-64" in cmd or b"_t-rex-64" in cmd


def kill_recorded(pid: int | None, prefix: str | None, grace: float = 5.0) -> list[str]:
    """Stop a TRex started by TrexProcess from its recorded pid (a process group leader: the start
    script, the server and its helpers) and remove DPDK's runtime directory of its file prefix.
    Returns what it did. Safe when it is gone already."""
    done = []
    if pid and is_trex(pid):
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            end = time.monotonic() + wait
            while is_trex(pid) and time.monotonic() < end:
                time.sleep(0.05)
            if not is_trex(pid):
                break
        done.append(f"TRex (pid {pid})")
    if prefix and (DPDK_RUN_DIR / prefix).exists():
        subprocess.run(["rm", "-rf", str(DPDK_RUN_DIR / prefix)], check=False)
        done.append(f"DPDK runtime dir {DPDK_RUN_DIR / prefix}")
    return done


class TrexProcess:
    """One TRex server in network namespace `netns` on interfaces `ifaces` (DPDK af_packet)."""

    def __init__(self, directory: Path, netns: str, ifaces: list[str], cpus: list[int],
                 port_info: list[dict], prefix: str | None = None, workdir: Path | None = None):
        self.dir = Path(directory)
        self.netns = netns
        self.ifaces = list(ifaces)
        self.cpus = list(cpus)
        self.port_info = port_info
        self.prefix = prefix or netns.replace("-", "_")
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gtplab-trex-"))
        self._own_workdir = workdir is None
        self.cfg = self.workdir / "trex_cfg.yaml"
        self.log = self.workdir / "trex.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0, on_pid: Callable[[int], None] | None = None) -> None:
        """Start TRex and wait until its RPC port answers in the namespace. on_pid(pid) runs right
        after the process exists (a lab records it before waiting). On failure it is stopped."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cfg.write_text(config_yaml(self.ifaces, self.cpus[0], self.prefix, self.port_info))
        env = dict(os.environ, PYTHON3="/usr/bin/python3")
        cpus = ",".join(map(str, self.cpus))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, "taskset", "-c", cpus, "./t-rex-64", "-i",
                 "--cfg", str(self.cfg), "--iom", "0", "--no-scapy-server"],
                cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        try:
            if on_pid:
                on_pid(self.proc.pid)
            end = time.monotonic() + timeout
            while not port_open(self.netns):
                if self.proc.poll() is not None:
                    raise UserError(f"TRex exited ({self.proc.returncode}) before listening on "
                                    f"{RPC_PORT}:\n{self.log_tail()}")
                if time.monotonic() > end:
                    raise UserError(f"TRex not listening on {RPC_PORT} after {timeout:.0f} s:\n"
                                    + self.log_tail())
                time.sleep(0.3)
        except BaseException:
            self.stop()
            raise

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop TRex (its whole process group) and remove DPDK's runtime dir; idempotent."""
        try:
            if self.proc is not None:
                kill_recorded(self.proc.pid, None)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        finally:
            kill_recorded(None, self.prefix)
            if self._own_workdir:
                subprocess.run(["rm", "-rf", str(self.workdir)], check=False)
