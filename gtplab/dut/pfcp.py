"""A DUT whose bearers are provisioned over PFCP (lab config `dut.provision: pfcp`, docs/pfcp.md).

    PfcpDut        wraps the probe that reads the counters (local, metrics, prometheus, none,
                   external); install_bearers() establishes one session per bearer through gtplab.pfcp
    EmbeddedAgent  the embedded lab's `pgwu pfcp --listen` (`upf: embedded`)
    in_lab         `upf: lab`: an external UPF's N4 in the namespace lab (gtplab/lab/external.py),
                   the addresses filled in from the lab, the node run in its control-plane namespace

gtplab.dut.probe.make_dut puts a PfcpDut around the counters' probe when the lab config says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from gtplab import bounded
from gtplab.dut.dataplane import pgwu_binary
from gtplab.errors import UserError
from gtplab.kernel.netns import route_problem, run_in
from gtplab.pfcp import provision as prov
from gtplab.pfcp.errors import PfcpError

PFCP_PORT = 8805


def in_lab(cfg: prov.PfcpConfig, lab) -> tuple[prov.PfcpConfig, str | None]:
    """cfg with `upf: lab` resolved against a namespace lab with an external UPF: the UPF's N4
    address (port 8805), gtplab's N4 address as local, the lab's N3 and N6 addresses where not
    given; and the namespace gtplab's node must run in (the lab's control-plane namespace, whose
    only way out is the N4 link: checked here). Any other upf: cfg as it is, no namespace."""
    if cfg.upf != prov.LAB:
        return cfg, None
    if lab is None or not getattr(lab, "cp_ns", None):
        raise UserError("dut.pfcp.upf: lab is the N4 address of an external UPF in the namespace lab "
                        "(dut.mode: external), and this run has no such lab")
    a, n4 = lab.addressing, lab.external["n4"]
    why = route_problem(lab.cp_ns, a.dut_n4, n4["cp_ifname"])
    if why:
        raise UserError(f"dut.pfcp: N4: {why}")
    return dataclasses.replace(cfg, upf=(a.dut_n4, PFCP_PORT), local=cfg.local or a.cp_n4,
                               n3=cfg.n3 or a.dut_access, n3_6=cfg.n3_6 or a.dut_access6,
                               n6=cfg.n6 or a.dut_sgi), lab.cp_ns


def provisioner(cfg: prov.PfcpConfig, netns: str | None, upf=None) -> prov.Provisioner:
    """prov.Provisioner(cfg, upf), its node's socket made in netns (None: here). A socket keeps the
    namespace it was made in, so the node's thread may run anywhere afterwards."""
    if netns is None:
        return prov.Provisioner(cfg, upf)
    return run_in(netns, prov.Provisioner, cfg, upf)

def agent_supported(pgwu: Path) -> bool:
    """Whether this pgwu binary has the PFCP agent (`pgwu pfcp --help` succeeds)."""
    if not os.access(pgwu, os.X_OK):
        return False
    p = subprocess.run([str(pgwu), "pfcp", "--help"], capture_output=True, text=True, timeout=30)
    return p.returncode == 0 and "--listen" in (p.stdout + p.stderr)


def _has_option(pgwu: Path, option: str) -> bool:
    p = subprocess.run([str(pgwu), "pfcp", "--help"], capture_output=True, text=True, timeout=30)
    return option in p.stdout + p.stderr


class EmbeddedAgent:
    """`pgwu -d PIN pfcp --listen 127.0.0.1:0` for the embedded lab (the PGW-U's tables are pinned,
    so the agent needs no namespace; it prints the port it got): started here, stopped by close(),
    which also makes it delete the bearers of its sessions."""

    def __init__(self, pin_dir: str):
        self.pgwu = pgwu_binary()
        if not agent_supported(self.pgwu):
            raise UserError(f"dut.provision pfcp with upf: embedded needs the PGW-U's PFCP agent, and "
                            f"{self.pgwu} has no `pfcp --listen` command (issue 14, branch pfcp-up; "
                            "build it with `make -C dataplane`)")
        # End Markers (SNDEM) leave from the data path's namespace, where the GTP-U address is: the
        # lab's DUT netns, gtplab-<n>-dut beside the pin dir gtplab-<n> (without it, the agent in the
        # host's namespace sends none: it finds no GTP-U address there)
        dut_ns = Path("/run/netns") / f"{Path(pin_dir).name}-dut"
        extra = ["--gtpu-netns", str(dut_ns)] if dut_ns.exists() and _has_option(self.pgwu, "--gtpu-netns") else []
        self.proc = subprocess.Popen([str(self.pgwu), "-d", pin_dir, "pfcp", "--listen", "127.0.0.1:0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline(4096)          # its first line: where it listens
        mt = re.search(r"listening on ([\d.]+):(\d+)", line)
        if not mt:
            self.close()
            raise UserError(f"pgwu pfcp --listen 127.0.0.1:0 did not start (status {self.proc.returncode}): "
                            f"{(line + self.err)[-300:].strip()}")
        self.addr = (mt.group(1), int(mt.group(2)))

    def close(self) -> None:
        self.err = ""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self.err = self.proc.stderr.read()
        for f in (self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError):
                f.close()


def _provisioned(path: str) -> str:
    """The bearer file written from the UPF's answers, as text for the results: at most
    bounded.BEARER_FILE_BYTES (UserError in one line beyond)."""
    return bounded.read_file(path, bounded.BEARER_FILE_BYTES, f"provisioned bearer file {path}").decode(errors="replace")


class PfcpDut:
    """Another DUT (for its counters) whose bearers are provisioned over PFCP. install_bearers()
    establishes the sessions and writes the bearer file as the UPF returned it (teid_file): the
    runner passes it to the uplink profile as --teid-file. close() deletes the sessions; their
    usage reports stay in usage."""

    def __init__(self, counters_dut, cfg, pin_dir: str | None = None, lab=None):
        self.inner = counters_dut
        self.kind = getattr(counters_dut, "kind", "pfcp")
        self.cfg, netns = in_lab(prov.parse_config(cfg.dut.get("pfcp"), f"lab config {cfg.path}"), lab)
        self.agent = None
        self.prov = None
        self.usage: dict = {}
        self.teid_file: str | None = None
        self.provisioned_text: str | None = None
        self._n = 0
        self._dir = Path(f"/tmp/gtplab-pfcp-{os.getpid()}")
        upf = None
        if self.cfg.upf == prov.EMBEDDED:
            if pin_dir is None:
                raise UserError("dut.pfcp.upf: embedded is for the embedded lab")
            self.agent = EmbeddedAgent(pin_dir)
            upf = self.agent.addr
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    self.prov = provisioner(self.cfg, netns, upf)
                    break
                except PfcpError:
                    # a UPF started with the lab may still be opening its PFCP socket
                    if (self.agent is None and netns is None) or time.monotonic() > deadline:
                        raise
            self.cfg = self.prov.cfg                 # with `choose` as resolved at association
            self._dir.mkdir(exist_ok=True)
            # after a UPF restart the sessions are established again (sessions.py); with CHOOSE the
            # TEIDs may differ: a new bearer file, which the next case's uplink streams take
            self.prov.node.restart_handlers.append(self._after_restart)
        except BaseException:
            if self.agent:
                self.agent.close()
            raise

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def install_bearers(self, path: str) -> None:
        self._n += 1
        out = str(self._dir / f"bearers-{self._n}.txt")
        self.prov.install(path, out)
        self.teid_file = out
        self.provisioned_text = _provisioned(out)         # kept for the results (the file goes at close)

    def _after_restart(self) -> None:
        if not self.prov.sessions.sessions:
            return
        self._n += 1
        out = str(self._dir / f"bearers-{self._n}.txt")
        prov.write_bearer_file(list(self.prov.sessions.sessions.values()), out, self.prov.upf_label)
        self.teid_file = out
        self.provisioned_text = _provisioned(out)

    @property
    def warnings(self) -> list[str]:
        """What did not fail the run but goes in its notes (a release the UPF did not answer)."""
        return self.prov.warnings if self.prov else []

    @property
    def reports(self) -> dict | None:
        """The UPF's Session and Node Reports (provision.Provisioner.reports_summary)."""
        return self.prov.reports_summary() if self.prov else None

    @property
    def restarts(self) -> int:
        """UPF restarts seen (new Recovery Time Stamp), each followed by re-establishment."""
        return self.prov.node.restarts if self.prov else 0

    def close(self) -> None:
        try:
            if self.prov is not None:
                self.usage = self.prov.close()
        finally:
            if self.agent:
                self.agent.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            self.inner.close()
