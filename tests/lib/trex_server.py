"""A real TRex server for the tests: the runtime of gtplab.lab.trex_server, run in a namespace of its own.

    with TrexServer.start() as srv:          # or the `trex_server` fixture (tests/conftest.py)
        c = TrexClient(srv.server, netns=srv.netns)

- The runtime: gtplab.lab.trex_server.resolve() (the lab uses the same code): $GTPLAB_TREX_DIR, else
  $GTPLAB_TREX_TARBALL, else ../shared/trex/trex-v3.08-runtime.tgz next to the repo clone, unpacked
  once into $GTPLAB_TREX_CACHE (default /var/cache/gtplab) keyed by its sha256.
- A network namespace `gtplab-trex-<pid>-<hex>` with a veth pair `trex0`/`trex1` (MTU 3200) inside
  it; TRex runs there (gtplab.lab.trex_server.TrexProcess: DPDK af_packet on both veths, low_end on
  CPU 0, `--no-scapy-server`, its own DPDK file prefix). It listens on the namespace's addresses
  only, so the client runs in the namespace too (TrexClient(netns=...)) and connects to 127.0.0.1.
- stop(): TRex stopped, every process left in the namespace killed (TERM, then KILL), the namespace
  deleted, also on failure, Ctrl-C and (inside the context) SIGTERM. start() first removes namespaces
  this module left behind for processes that no longer exist.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from gtplab.lab import trex_server
from gtplab.lab.trex_server import TrexUnavailable  # noqa: F401  (the fixture catches it)

NS_PREFIX = "gtplab-trex-"
PORTS = ("trex0", "trex1")
MTU = 3200


def trex_dir() -> Path:
    """The folder holding t-rex-64 (TrexUnavailable, with where it looked, when there is none)."""
    return trex_server.resolve()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _ns_pids(ns: str) -> list[int]:
    cp = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in cp.stdout.split()] if cp.returncode == 0 else []


def remove_ns(ns: str, grace: float = 10.0) -> None:
    """Kill every process in namespace `ns` (ours: TRex and its helpers), then delete it."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = _ns_pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + wait
        while _ns_pids(ns) and time.monotonic() < end:
            time.sleep(0.1)
    _ip("netns", "del", ns, check=False)


def clean_stale() -> None:
    """Namespaces of this module whose creating process is gone (a killed test run)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        if not ns.startswith(NS_PREFIX):
            continue
        try:
            pid = int(ns[len(NS_PREFIX):].split("-")[0])
        except ValueError:
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            remove_ns(ns, grace=3.0)
            subprocess.run(["rm", "-rf", f"/var/run/dpdk/{ns.replace('-', '_')}"], check=False)


class TrexServer:
    """One TRex server in its own namespace; `server`, `netns`, `ports`, `log` while running."""

    server = "127.0.0.1"

    def __init__(self, directory: Path, core: int = 0):
        self.dir = Path(directory)
        self.core = core
        self.netns = f"{NS_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.ports = PORTS
        self.prefix = self.netns.replace("-", "_")
        self.tmp = Path(tempfile.mkdtemp(prefix="gtplab-trex-"))
        self.trex = trex_server.TrexProcess(
            self.dir, self.netns, list(PORTS), [core],
            [{"ip": "1.1.1.1", "default_gw": "2.2.2.2"}, {"ip": "2.2.2.2", "default_gw": "1.1.1.1"}],
            prefix=self.prefix, workdir=self.tmp)
        self.log = self.trex.log
        self._old_term = None

    @classmethod
    def start(cls, timeout: float = 90.0, core: int = 0) -> "TrexServer":
        """Unpack if needed, build the namespace, start TRex, wait for its RPC port."""
        d = trex_dir()
        clean_stale()
        srv = cls(d, core)
        try:
            srv._up(timeout)
        except BaseException:
            srv.stop()
            raise
        return srv

    def _up(self, timeout: float) -> None:
        ns = self.netns
        _ip("netns", "add", ns)
        # no IPv6 on the veths: their router/neighbour solicitations would be extra packets
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                        "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"],
                       check=True, capture_output=True)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "add", PORTS[0], "mtu", str(MTU), "type", "veth",
            "peer", "name", PORTS[1], "mtu", str(MTU))
        for p in PORTS:
            _ip("-n", ns, "link", "set", p, "up")
        self.trex.start(timeout)

    def log_tail(self, n: int = 30) -> str:
        return self.trex.log_tail(n)

    def running(self) -> bool:
        return self.trex.running()

    def stop(self) -> None:
        """Stop TRex and every process of the namespace, delete the namespace; idempotent."""
        try:
            self.trex.stop()
            remove_ns(self.netns)
        finally:
            subprocess.run(["rm", "-rf", str(self.tmp), f"/var/run/dpdk/{self.prefix}"], check=False)

    # SIGTERM inside the context becomes KeyboardInterrupt, so the cleanup runs
    def __enter__(self) -> "TrexServer":
        def on_term(signum, frame):
            raise KeyboardInterrupt("SIGTERM")
        try:
            self._old_term = signal.signal(signal.SIGTERM, on_term)
        except ValueError:   # not the main thread
            self._old_term = None
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            if self._old_term is not None:
                signal.signal(signal.SIGTERM, self._old_term)
