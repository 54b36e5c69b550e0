"""A PGW-U on another host seen by a measurement: MetricsDut reads its `pgwu metrics` URL (counters)
and, optionally, its node-exporter (CPU), and installs bearers over ssh. Used by
gtplab.measure.runner.Runner when the lab config names a remote DUT. The same methods as
gtplab.dut.local.LocalDut (both are a gtplab.dut.probe.DutProbe).
"""

from __future__ import annotations

import os
import subprocess
import sys

from gtplab.dut.prometheus import ScrapedDut, scrape
from gtplab.errors import UserError


class MetricsDut(ScrapedDut):
    """A PGW-U on another host: counters from its `pgwu metrics` URL, CPU from its node-exporter
    (optional); no per-program run time and no link counters (losses on the wire are unexplained)."""

    kind = "metrics"

    def __init__(self, cfg):
        self.cfg = cfg
        self.metrics_url = cfg.dut.get("metrics_url")
        self.node_url = cfg.dut.get("node_exporter_url")
        if not self.metrics_url:
            raise UserError(f"lab config {cfg.path}: dut.metrics_url is needed to read the DUT's counters")

    def counters(self) -> dict[tuple[str, str], int]:
        try:
            rows = scrape(self.metrics_url)
        except OSError as e:
            raise UserError(f"Couldn't read the DUT's counters from {self.metrics_url}: {e}") from None
        return {(lb["reason"], lb["verdict"]): int(v) for n, lb, v in rows if n == "pgwu_packets_total"}

    def cpu_seconds(self) -> dict[str, float] | None:
        """{"cpus": busy seconds of the DUT host's CPUs} from its node-exporter (None without one)."""
        if not self.node_url:
            return None
        try:
            rows = scrape(self.node_url)
        except OSError:
            return None
        return {"cpus": sum(v for n, lb, v in rows if n == "node_cpu_seconds_total"
                            and lb.get("mode") not in ("idle", "iowait", "steal"))}

    def _pgwu(self) -> list[str]:
        pin = self.cfg.dut.get("pin_dir")
        return [self.cfg.dut.get("pgwu", "pgwu")] + (["-d", pin] if pin else [])

    def install_bearers(self, path: str) -> None:
        """The case's bearers on the DUT host over ssh: its bearer table flushed, then loaded from a
        copy of the file (removed once loaded). close() flushes them again: the host is left with
        no bearer of the run (a control plane provisioning it next finds its UEs free)."""
        ssh = self.cfg.dut.get("ssh")
        if not ssh:
            print(f"gtplab: load the bearers on the DUT yourself: pgwu session flush && pgwu session load {path}"
                  " (or set dut.ssh in the lab config)", file=sys.stderr)
            return
        ssh_cmd, scp_cmd, target = ssh_commands(ssh)
        base = " ".join(self._pgwu())
        remote = f"/tmp/gtplab-bearers-{os.getpid()}.txt"
        self._installed = True
        for argv in (scp_cmd + ["-q", path, f"{target}:{remote}"],
                     ssh_cmd + [target, f"{base} session flush"],
                     ssh_cmd + [target, f"{base} session load {remote}; rc=$?; rm -f {remote}; exit $rc"]):
            p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if p.returncode:
                raise UserError(f"Couldn't install the bearers on {target} ({' '.join(argv[:2])}): "
                                f"{p.stderr.strip()[-200:]}")

    def close(self) -> None:
        if not getattr(self, "_installed", False):
            return
        self._installed = False
        ssh_cmd, _, target = ssh_commands(self.cfg.dut["ssh"])
        try:
            p = subprocess.run(ssh_cmd + [target, " ".join(self._pgwu() + ["session", "flush"])],
                               capture_output=True, text=True, timeout=60)
            err = p.stderr.strip()[-200:] if p.returncode else ""
        except (OSError, subprocess.TimeoutExpired) as e:
            err = str(e)
        if err:
            print(f"gtplab: warning: the run's bearers are still on {target} (pgwu session flush: {err})",
                  file=sys.stderr)


def ssh_commands(ssh) -> tuple[list[str], list[str], str]:
    """(ssh argv, scp argv, target) for dut.ssh: "user@host", or a mapping {host, user, port, key,
    options} (options: extra ssh/scp arguments, e.g. ["-o", "StrictHostKeyChecking=no"]). The argv
    lists end before the target: ssh's port flag is -p, scp's -P."""
    if isinstance(ssh, str):
        return ["ssh"], ["scp"], ssh
    opts = [str(o) for o in ssh.get("options") or []]
    if ssh.get("key"):
        opts = ["-i", str(ssh["key"])] + opts
    port = ssh.get("port")
    target = f"{ssh['user']}@{ssh['host']}" if ssh.get("user") else str(ssh["host"])
    return (["ssh"] + (["-p", str(port)] if port else []) + opts,
            ["scp"] + (["-P", str(port)] if port else []) + opts, target)
