"""Two generator hosts on one machine for gtplab.measure.pairs (tests/trex/test_pairs.py): two TRex
servers, each in a network namespace of its own with one port pair (af_packet), cabled by veths to
one PGW-U in a third namespace, attached to both pairs (`pgwu attach --access a0,a1 --sgi s0,s1`,
generic XDP: its egress is the FIB's, per route):

    gen0: pa0 (TRex port 0) <-> da0 (access, 10.201.0.1/24; SGWs 10.201.0.16.. behind it)
          ps0 (TRex port 1) <-> ds0 (SGi,   10.202.0.1/24; 198.18.0.0/18 via 10.202.0.2)
    gen1: pa1 (TRex port 0) <-> da1 (access, 10.201.1.1/24; SGWs 10.201.1.16.. behind it)
          ps1 (TRex port 1) <-> ds1 (SGi,   10.202.1.1/24; 198.18.64.0/18 via 10.202.1.2)

The PGW-U's GTP-U address is 10.201.0.1 for both pairs. Names carry "pairs" and a per-run id;
everything is removed by down(), also after a failed up()."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

from gtplab.dut.dataplane import Dataplane, pgwu_binary
from gtplab.lab import trex_server
from gtplab.lab.generators import Pair

SGWS = 4


def _run(*argv: str, input: str | None = None) -> str:
    cp = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=60)
    if cp.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {cp.stderr.strip()}")
    return cp.stdout


def _mac(run: str, k: int, side: str, dut: bool) -> str:
    return f"02:{'d' if dut else 'a'}{k}:{int(run[:2], 16):02x}:{int(run[2:4], 16):02x}:{'5a' if side == 's' else 'aa'}:0{k}"


class PairsLab:
    def __init__(self, runtime: Path):
        self.id = uuid.uuid4().hex[:6]
        self.gen = [f"gtpl-pairs-{self.id}-g{k}" for k in range(2)]
        self.dut = f"gtpl-pairs-{self.id}-dut"
        self.pin = f"/sys/fs/bpf/gtpl-pairs-{self.id}"
        self.runtime = runtime
        self.trex: list[trex_server.TrexProcess] = []
        self.dp: Dataplane | None = None

    def pgwu(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # nsenter, not `ip netns exec`: that remounts /sys, hiding /sys/fs/bpf
        cp = subprocess.run(["nsenter", f"--net=/run/netns/{self.dut}", "--", str(pgwu_binary()), "-d", self.pin, *args],
                            capture_output=True, text=True, timeout=120)
        if check and cp.returncode:
            raise RuntimeError(f"pgwu {' '.join(args)}: {cp.stderr.strip()}")
        return cp

    def up(self) -> "PairsLab":
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _build(self) -> None:
        for ns in self.gen + [self.dut]:
            _run("ip", "netns", "add", ns)
            for key in ("all", "default"):
                _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        batch = ""
        for k, g in enumerate(self.gen):
            for side in ("a", "s"):
                _run("ip", "-n", g, "link", "add", f"p{side}{k}", "address", _mac(self.id, k, side, False),
                     "type", "veth", "peer", "name", f"d{side}{k}", "netns", self.dut,
                     "address", _mac(self.id, k, side, True))
                _run("ip", "-n", g, "link", "set", f"p{side}{k}", "up")
                _run("ip", "-n", self.dut, "link", "set", f"d{side}{k}", "up")
            batch += f"addr add 10.201.{k}.1/24 dev da{k}\naddr add 10.202.{k}.1/24 dev ds{k}\n"
            batch += "".join(f"neigh replace 10.201.{k}.{16 + j} lladdr {_mac(self.id, k, 'a', False)} "
                             f"nud permanent dev da{k}\n" for j in range(SGWS))
            batch += (f"neigh replace 10.202.{k}.2 lladdr {_mac(self.id, k, 's', False)} nud permanent dev ds{k}\n"
                      f"route replace 198.18.{64 * k}.0/18 via 10.202.{k}.2 dev ds{k}\n")
        _run("ip", "-n", self.dut, "-batch", "-", input=batch)
        _run("ip", "netns", "exec", self.dut, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.pgwu("load", "--local-addr", "10.201.0.1", "--ue-pool", "10.64.0.0/12")
        self.attach_out = self.pgwu("attach", "--access", "da0,da1", "--sgi", "ds0,ds1", "--mode", "generic",
                                    "--no-watch").stdout
        self.dp = Dataplane(self.pin)
        ncpu = len(os.sched_getaffinity(0))
        for k, g in enumerate(self.gen):
            self.trex.append(trex_server.TrexProcess(
                self.runtime, g, [f"pa{k}", f"ps{k}"], [k % ncpu],
                [{"src_mac": _mac(self.id, k, s, False), "dest_mac": _mac(self.id, k, s, True)} for s in ("a", "s")],
                prefix=f"gtpl_pairs_{self.id}_{k}"))
        # both servers start at once (each waits for its RPC port): the lab's setup is one start long
        errors: list[BaseException] = []

        def start(t):
            try:
                t.start(timeout=180)
            except BaseException as e:      # noqa: BLE001 -- raised below, in the builder's thread
                errors.append(e)
        threads = [threading.Thread(target=start, args=(t,)) for t in self.trex]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]

    def pairs(self) -> list[Pair]:
        """The generator pairs as a lab config's generators: would give them (each server in its netns)."""
        return [Pair(k, "127.0.0.1", 0, 1, f"10.201.{k}.16", f"198.18.{64 * k}.1", netns=g)
                for k, g in enumerate(self.gen)]

    METRICS = "127.0.0.1:19464"         # `pgwu metrics` in the DUT's namespace (metrics())

    @contextlib.contextmanager
    def metrics(self):
        """`pgwu metrics` of the lab's PGW-U on METRICS in the DUT's namespace, where gtplab commands
        run to reach it (gtplab(); the lab config's dut.metrics_url)."""
        proc = subprocess.Popen(["nsenter", f"--net=/run/netns/{self.dut}", "--", str(pgwu_binary()),
                                 "-d", self.pin, "metrics", "--listen", self.METRICS],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            yield
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    def lab_config(self, path: Path) -> Path:
        """A lab config at path whose generators: name the two servers (each in its netns), the DUT
        read through metrics() (no dut.ssh: the bearers are loaded with install_bearers)."""
        path.write_text(f"backend: trex\ndut: {{metrics_url: 'http://{self.METRICS}/metrics'}}\ngenerators:\n"
                        + "".join(f"  - {{trex_server: 127.0.0.1, ports: {{access: 0, sgi: 1}}, netns: {g}, "
                                  f"sgw_base: 10.201.{k}.16, pdn_base: 198.18.{64 * k}.1}}\n"
                                  for k, g in enumerate(self.gen)))
        return path

    def gtplab(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """`gtplab ARGS` in the DUT's namespace (where metrics() listens)."""
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.dut}", "--", sys.executable, "-m", "gtplab",
                               *args], capture_output=True, text=True, timeout=timeout,
                              cwd=Path(__file__).resolve().parents[2])

    def counters(self) -> dict:
        return {k: p for k, (p, _) in self.dp.stats().items()}

    def install_bearers(self, path: str) -> None:
        self.pgwu("session", "flush")
        self.pgwu("session", "load", path)

    def down(self) -> list[str]:
        left = []
        for t in self.trex:
            t.stop()
        if self.dp is not None:
            self.dp.close()
            self.dp = None
        if Path(self.pin).exists():
            self.pgwu("unload", check=False)
        for ns in self.gen + [self.dut]:
            if Path(f"/run/netns/{ns}").exists():
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if Path(self.pin).exists():
            subprocess.run(["rm", "-rf", self.pin])
        left += [ns for ns in self.gen + [self.dut] if Path(f"/run/netns/{ns}").exists()]
        left += [self.pin] if Path(self.pin).exists() else []
        return left
