"""The DUT as the runner sees it, for the lab config's dut.provision and dut.counters
(docs/pfcp.md): how bearers get there (pgwu | pfcp | none) and how its counters are read
(pgwu | prometheus | none).

    counters pgwu        the embedded lab's pinned maps (runner.LocalDut) or `pgwu metrics`
                         (runner.MetricsDut)
    counters prometheus  any UPF's Prometheus endpoint, through a mapping of metric selectors to
                         the conservation terms: rx, fwd, drop (each a sum over matching series)
    counters none        nothing: conservation is generator-side only, and the results say so
    provision pfcp       sessions over Sx/N4 (provision.Provisioner); on the embedded lab with
                         `upf: embedded`, the PGW-U's own agent (`pgwu pfcp --listen`) is started
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from gtplab.cli import UserError
from gtplab.pfcp import provision as prov
from gtplab.pfcp.errors import PfcpError

_SELECTOR = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(\s*\w+\s*=\s*"[^"]*"\s*,?)*\})?$')
PROM_TERMS = ("rx", "fwd", "drop")


def parse_prometheus(d, where: str) -> dict:
    """dut.prometheus: {url: http://HOST:PORT/metrics, metrics: {fwd: SEL, drop: SEL, rx: SEL}}; fwd
    is required; SEL is a selector `name` or `name{label="value",...}`, or a list of them (summed)."""
    if not isinstance(d, dict) or set(d) - {"url", "metrics"}:
        raise UserError(f"{where}: dut.prometheus must be {{url: ..., metrics: {{fwd: ..., drop: ..., rx: ...}}}}")
    url = d.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise UserError(f"{where}: dut.prometheus.url {url!r}: an http(s) URL of the UPF's metrics")
    mp = d.get("metrics")
    if not isinstance(mp, dict) or "fwd" not in mp or set(mp) - set(PROM_TERMS):
        raise UserError(f"{where}: dut.prometheus.metrics maps {', '.join(PROM_TERMS)} (fwd required) "
                        "to metric selectors")
    out = {}
    for k, sels in mp.items():
        sels = [sels] if isinstance(sels, str) else sels
        if not isinstance(sels, list) or not sels:
            raise UserError(f"{where}: dut.prometheus.metrics.{k}: a selector or a list of selectors (summed)")
        for sel in sels:
            if not isinstance(sel, str) or not _SELECTOR.match(sel.strip()):
                raise UserError(f"{where}: dut.prometheus.metrics.{k} {sel!r}: use name or name{{label=\"value\"}}")
        out[k] = [x.strip() for x in sels]
    return {"url": url, "metrics": out}


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)')


def scrape(url: str, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a Prometheus text exposition, with or without labels."""
    import urllib.request
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        mt = _SAMPLE.match(line)
        if mt:
            try:
                out.append((mt.group(1), dict(re.findall(r'(\w+)="([^"]*)"', mt.group(2) or "")),
                            float(mt.group(3))))
            except ValueError:
                continue
    return out


def _match(selector: str):
    name, _, rest = selector.partition("{")
    want = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', rest))
    return name, want


class PrometheusDut:
    """Counters of any UPF from its Prometheus endpoint: {(term, verdict): packets} in the shape
    conservation.DutDelta reads (fwd as ("upf_fwd", "tx"), drop as ("upf", "drop"), what rx
    counts beyond fwd + drop as ("upf_unaccounted", "other"))."""

    kind = "prometheus"

    def __init__(self, cfg):
        self.p = parse_prometheus(cfg.dut.get("prometheus"), f"lab config {cfg.path}")
        self.sel = {k: [_match(x) for x in v] for k, v in self.p["metrics"].items()}

    def _sum(self, rows, term) -> int | None:
        if term not in self.sel:
            return None
        return int(sum(v for name, want in self.sel[term] for n, lb, v in rows
                       if n == name and all(lb.get(k) == x for k, x in want.items())))

    def counters(self) -> dict[tuple[str, str], int]:
        try:
            rows = scrape(self.p["url"])
        except OSError as e:
            raise UserError(f"Couldn't read the DUT's counters from {self.p['url']}: {e}") from None
        fwd, drop, rx = (self._sum(rows, t) for t in ("fwd", "drop", "rx"))
        out = {("upf_fwd", "tx"): fwd or 0, ("upf", "drop"): drop or 0}
        if rx is not None:
            out[("upf_unaccounted", "other")] = rx - (fwd or 0) - (drop or 0)
        return out

    def close(self):
        pass

    def link(self):
        return None

    @staticmethod
    def link_delta(before, after, direction):
        return None

    def prog_stats(self):
        return None

    def layout(self):
        return None

    def cpu_seconds(self):
        return None

    @contextlib.contextmanager
    def bpf_stats(self):
        yield

    def install_bearers(self, path: str) -> None:
        pass


class NoCountersDut(PrometheusDut):
    """A DUT whose counters are not read: counters() is None, and the runner checks conservation on
    the generator's side only (conservation.generator_only)."""

    kind = "none"

    def __init__(self, cfg=None):
        pass

    def counters(self):
        return None


def agent_supported(pgwu: Path) -> bool:
    """Whether this pgwu binary has the PFCP agent (`pgwu pfcp --help` succeeds)."""
    if not os.access(pgwu, os.X_OK):
        return False
    p = subprocess.run([str(pgwu), "pfcp", "--help"], capture_output=True, text=True, timeout=30)
    return p.returncode == 0 and "--listen" in (p.stdout + p.stderr)


class EmbeddedAgent:
    """`pgwu -d PIN pfcp --listen 127.0.0.1:0` for the embedded lab (the PGW-U's tables are pinned,
    so the agent needs no namespace; it prints the port it got): started here, stopped by close(),
    which also makes it delete the bearers of its sessions."""

    def __init__(self, pin_dir: str):
        from gtplab.lab import pgwu_binary
        self.pgwu = pgwu_binary()
        if not agent_supported(self.pgwu):
            raise UserError(f"dut.provision pfcp with upf: embedded needs the PGW-U's PFCP agent, and "
                            f"{self.pgwu} has no `pfcp --listen` command (issue 14, branch pfcp-up; "
                            "build it with `make -C dataplane`)")
        self.proc = subprocess.Popen([str(self.pgwu), "-d", pin_dir, "pfcp", "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
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


class PfcpDut:
    """Another DUT (for its counters) whose bearers are provisioned over PFCP. install_bearers()
    establishes the sessions and writes the bearer file as the UPF returned it (teid_file): the
    runner passes it to the uplink profile as --teid-file. close() deletes the sessions; their
    usage reports stay in usage."""

    def __init__(self, counters_dut, cfg, pin_dir: str | None = None):
        self.inner = counters_dut
        self.kind = getattr(counters_dut, "kind", "pfcp")
        self.cfg = prov.parse_config(cfg.dut.get("pfcp"), f"lab config {cfg.path}")
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
                    self.prov = prov.Provisioner(self.cfg, upf)
                    break
                except PfcpError:
                    if self.agent is None or time.monotonic() > deadline:
                        raise
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
        self.provisioned_text = Path(out).read_text()     # kept for the results (the file goes at close)

    def _after_restart(self) -> None:
        if not self.prov.sessions.sessions:
            return
        self._n += 1
        out = str(self._dir / f"bearers-{self._n}.txt")
        prov.write_bearer_file(list(self.prov.sessions.sessions.values()), out, self.prov.upf_label)
        self.teid_file = out
        self.provisioned_text = Path(out).read_text()

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


def make_dut(backend, cfg):
    """The runner's DUT object for the lab config's provision and counters."""
    from gtplab.runner import LocalDut, MetricsDut
    lab = getattr(backend, "lab", None)
    if cfg.counters == "none":
        inner = NoCountersDut()
    elif cfg.counters == "prometheus":
        inner = PrometheusDut(cfg)
    else:
        inner = LocalDut(lab) if backend.kind == "local" else MetricsDut(cfg)
    if cfg.provision == "pfcp":
        return PfcpDut(inner, cfg, pin_dir=getattr(lab, "pin_dir", None))
    if cfg.provision == "none":
        inner.install_bearers = lambda path: None
    return inner
