"""A real TRex server for the tests: unpacked once into a cache, run in a namespace of its own.

    with TrexServer.start() as srv:          # or the `trex_server` fixture (tests/conftest.py)
        c = TrexClient(srv.server, netns=srv.netns)

- The runtime tarball (docs/trex.md): $GTPLAB_TREX_TARBALL, else ../shared/trex/trex-v3.08-runtime.tgz
  next to the repo clone. It is unpacked once into $GTPLAB_TREX_CACHE (default /var/cache/gtplab),
  in a directory named after the first 16 hex digits of its sha256, atomically (unpacked beside,
  then renamed). $GTPLAB_TREX_DIR names an already unpacked TRex (the folder holding `t-rex-64`)
  instead. Nothing of TRex is written into the repo.
- A network namespace `gtplab-trex-<pid>-<hex>` with a veth pair `trex0`/`trex1` (MTU 3200) inside
  it; TRex runs there (`ip netns exec`) with DPDK's af_packet on both veths, low_end on CPU 0,
  `--no-scapy-server`, its own DPDK file prefix (the namespace's name, so
  several servers can run); no hugepages (af_packet does not need them). It listens on the namespace's
  addresses only, so the client runs in the namespace too (TrexClient(netns=...)) and connects to
  127.0.0.1.
- stop(): every process in the namespace is killed (TERM, then KILL), then the namespace is deleted,
  also on failure, Ctrl-C and (inside the context) SIGTERM. start() first removes namespaces this
  module left behind for processes that no longer exist.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TARBALL = ROOT.parent / "shared" / "trex" / "trex-v3.08-runtime.tgz"
NS_PREFIX = "gtplab-trex-"
PORTS = ("trex0", "trex1")
MTU = 3200

CFG = """\
- version: 2
  prefix: {prefix}
  interfaces: ["--vdev=net_af_packet0,iface={p0},blocksz=4096,framesz=4096,framecnt=4096",
               "--vdev=net_af_packet1,iface={p1},blocksz=4096,framesz=4096,framecnt=4096"]
  low_end: true
  low_end_core: {core}
  port_info: [{{ip: 1.1.1.1, default_gw: 2.2.2.2}}, {{ip: 2.2.2.2, default_gw: 1.1.1.1}}]
"""


class TrexUnavailable(Exception):
    """No TRex runtime here (the reason says where it was looked for)."""


def tarball() -> Path:
    return Path(os.environ.get("GTPLAB_TREX_TARBALL") or DEFAULT_TARBALL)


def trex_dir() -> Path:
    """The folder holding t-rex-64: $GTPLAB_TREX_DIR, else the tarball unpacked into the cache."""
    if os.environ.get("GTPLAB_TREX_DIR"):
        d = Path(os.environ["GTPLAB_TREX_DIR"])
        if not (d / "t-rex-64").exists():
            raise TrexUnavailable(f"GTPLAB_TREX_DIR={d} holds no t-rex-64")
        return d
    tgz = tarball()
    if not tgz.is_file():
        raise TrexUnavailable(f"no TRex runtime: {tgz} does not exist (set GTPLAB_TREX_TARBALL or "
                              f"GTPLAB_TREX_DIR)")
    h = hashlib.sha256()
    with open(tgz, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    cache = Path(os.environ.get("GTPLAB_TREX_CACHE") or "/var/cache/gtplab")
    dest = cache / f"{tgz.name.removesuffix('.tgz').removesuffix('.tar.gz')}-{h.hexdigest()[:16]}"
    if not (dest / "scripts" / "t-rex-64").exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=cache))
        try:
            with tarfile.open(tgz) as t:
                t.extractall(tmp, filter="tar") if hasattr(tarfile, "data_filter") else t.extractall(tmp)
            try:
                os.rename(tmp, dest)
            except OSError:   # another process was faster
                if not (dest / "scripts" / "t-rex-64").exists():
                    raise
        finally:
            if tmp.exists():
                subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return dest / "scripts"


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


def _port_open(ns: str, port: int) -> bool:
    from gtplab.kernel.netns import run_in

    def probe():
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", port)) == 0
    return run_in(ns, probe)


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
        self.log = self.tmp / "trex.log"
        self.proc: subprocess.Popen | None = None
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
        cfg = self.tmp / "trex_cfg.yaml"
        cfg.write_text(CFG.format(p0=PORTS[0], p1=PORTS[1], core=self.core,
                                  prefix=self.prefix))
        env = dict(os.environ, PYTHON3="/usr/bin/python3")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, "./t-rex-64", "-i", "--cfg", str(cfg), "--iom", "0",
                 "--no-scapy-server"],
                cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        end = time.monotonic() + timeout
        while not _port_open(ns, 4501):
            if self.proc.poll() is not None:
                raise RuntimeError(f"TRex exited ({self.proc.returncode}) before listening:\n"
                                   + self.log_tail())
            if time.monotonic() > end:
                raise RuntimeError(f"TRex not listening on 4501 after {timeout:.0f} s:\n"
                                   + self.log_tail())
            time.sleep(0.3)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop TRex (every process of the namespace) and delete the namespace; idempotent."""
        try:
            remove_ns(self.netns)
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        finally:
            # DPDK's runtime dir for our file prefix
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
