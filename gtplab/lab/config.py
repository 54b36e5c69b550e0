"""Lab configurations: one YAML file per lab with its connection details and throughput thresholds.

    gtplab/lab/labs/embedded.yaml      this machine: the namespace lab + the embedded engine (default)
    gtplab/lab/labs/example-trex.yaml  a lab of real servers: a TRex server, a PGW-U host, its metrics

Chosen with `--lab-config NAME|FILE` or $GTPLAB_LAB_CONFIG (a name is a file of gtplab/lab/labs/). The
same tests and the same sweep run on any lab; only this file says what "fast enough" means there
(docs/testing.md, docs/sweep.md).

Used by gtplab.measure.sweep (`--lab-config`) and the throughput tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gtplab.dut import prometheus, upf_counters
from gtplab.dut.sock import SocketKnobs
from gtplab.errors import UserError
from gtplab.lab import external
from gtplab.lab.awake import METHODS as AWAKE_METHODS
from gtplab.lab.cpu import CpuLayout
from gtplab.pfcp import provision as prov
from gtplab.rates import line_rate_pps

LABS_DIR = Path(__file__).resolve().parent / "labs"
DEFAULT_LAB = "embedded"
DIRECTIONS = ("uplink", "downlink")

_TOP_KEYS = {"name", "description", "backend", "trex_server", "ports", "port_speed_bps",
             "max_rate_pps", "cpu_shared_with_generator", "cpus", "lab", "dut", "thresholds", "measured",
             "trex"}
_DUT_KEYS = {"mode", "metrics_url", "node_exporter_url", "ssh", "pgwu", "pin_dir",
             "provision", "counters", "pfcp", "prometheus", "socket", "external", "eupf", "name",
             "max_bearers"}
# what the embedded lab runs as the DUT (gtplab/lab/topology.py): the XDP PGW-U, the socket-path
# PGW-U (`pgwu socket`, with the knobs of dut.socket: gtplab/dut/sock.py), the reference forwarder,
# or any UPF the lab starts (dut.external, gtplab/lab/external.py)
DUT_MODES = ("pgwu", "socket", "fwd", "external")
_LAB_KEYS = {"mtu", "generator", "awake", "share_cpus"}
_TREX_KEYS = {"runtime"}
GENERATORS = ("engine", "trex")  # what generates the embedded lab's traffic (gtplab/lab/topology.py)
_THRESHOLD_KEYS = {"pdr_loss", "ndr_pps", "pdr_pps"}


@dataclass
class LabConfig:
    name: str
    path: str
    backend: str = "local"                      # local | trex
    description: str = ""
    trex_server: str | None = None
    ports: dict[str, int] = field(default_factory=lambda: {"access": 0, "sgi": 1})
    port_speed_bps: float = 10e9
    max_rate_pps: float | None = None           # NDR search start; None: measure (100% line rate)
    cpu_shared_with_generator: bool = False
    cpus: Any = None                            # local labs: {generator: CPUS, dut: CPUS} | "auto" | None
    lab: dict[str, Any] = field(default_factory=dict)
    dut: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    measured: Any = None
    trex: dict[str, Any] = field(default_factory=dict)

    @property
    def generator(self) -> str:
        """The namespace lab's generator: engine (embedded) or trex (a TRex server on its veths)."""
        return self.lab.get("generator", "engine")

    def trex_runtime(self) -> str | None:
        """trex.runtime (a TRex directory or release tarball), relative to this file's folder; None:
        gtplab.lab.trex_server's default."""
        r = self.trex.get("runtime")
        if not r:
            return None
        p = Path(os.path.expanduser(str(r)))
        return str(p if p.is_absolute() else (Path(self.path).parent / p).resolve())

    def threshold(self, kind: str, direction: str, frame_size: int) -> float | None:
        """Minimum rate (pps) kind ("ndr_pps" | "pdr_pps") must reach for direction and frame size:
        the entry for the size, else the direction's "default", else None (nothing to assert). An
        entry "N%" is N % of the line rate at that frame size."""
        table = (self.thresholds.get(kind) or {}).get(direction) or {}
        v = table.get(frame_size, table.get(str(frame_size), table.get("default")))
        if v is None:
            return None
        if isinstance(v, str):
            return float(v.rstrip("%")) / 100 * line_rate_pps(self.port_speed_bps, frame_size)
        return float(v)

    @property
    def pdr_loss(self) -> float:
        return float(self.thresholds.get("pdr_loss", 0.001))

    def port(self, side: str) -> int:
        return int(self.ports[side])

    @property
    def dut_mode(self) -> str:
        return self.dut.get("mode", "pgwu")

    @property
    def socket_knobs(self):
        """dut.socket as gtplab.dut.sock.SocketKnobs (the socket path's knobs; defaults if absent)."""
        return SocketKnobs.parse(self.dut.get("socket"), f"lab config {self.path}: dut.socket")

    @property
    def dut_name(self) -> str | None:
        """dut.name: what the report calls the DUT (e.g. "eUPF a8d774a"); None: by its mode."""
        n = self.dut.get("name")
        return str(n) if n else None

    @property
    def max_bearers(self) -> int | None:
        """dut.max_bearers: the most bearers (sessions) the DUT holds; the sweep skips cases that
        need more (None: no limit known)."""
        v = self.dut.get("max_bearers")
        return int(v) if v is not None else None

    @property
    def provision(self) -> str:
        """How the bearers reach the DUT: pgwu (session load), pfcp (Sx/N4), none (already there)."""
        return self.dut.get("provision", "pgwu")

    @property
    def counters(self) -> str:
        """How the DUT's counters are read: pgwu, prometheus (dut.prometheus mapping), none."""
        return self.dut.get("counters", "pgwu")

    def external_spec(self) -> "external.ExternalSpec | None":
        """dut.external as gtplab.lab.external.ExternalSpec (dut.mode external), else None."""
        if self.dut_mode != "external":
            return None
        return external.parse_spec(self.dut.get("external"), f"lab config {self.path}", Path(self.path).parent)

    def cpu_layout(self):
        """The local lab's gtplab.lab.cpu.CpuLayout (checked against this host's CPUs)."""
        return CpuLayout.parse(self.cpus, f"lab config {self.path}: cpus")


def _percent(v) -> float | None:
    if isinstance(v, str) and v.endswith("%"):
        try:
            x = float(v[:-1])
        except ValueError:
            return None
        return x if 0 < x <= 100 else None
    return None


def _fail(path, msg: str):
    raise UserError(f"lab config {path}: {msg}")


def _check_external(path, dut: dict, local_lab: bool) -> None:
    """dut.mode external: a namespace lab, its dut.external section, bearers over PFCP (or already
    there) and counters an external UPF has; dut.pfcp.upf: lab only there."""
    mode = dut.get("mode", "pgwu")
    if mode != "external":
        if "external" in dut:
            _fail(path, f"dut.external is given but dut.mode is {mode!r} (set mode: external)")
        if (dut.get("pfcp") or {}).get("upf") == prov.LAB:
            _fail(path, "dut.pfcp.upf: lab is an external UPF's N4 in the namespace lab (dut.mode: external)")
        return
    if not local_lab:
        _fail(path, "dut.mode external runs the UPF in the namespace lab: backend local, or lab.generator trex")
    external.parse_spec(dut.get("external"), f"lab config {path}", Path(path).parent)
    if (dut.get("pfcp") or {}).get("upf") == prov.EMBEDDED:
        _fail(path, "dut.pfcp.upf: embedded is the PGW-U's own agent; an external UPF's is `lab`")
    if dut.get("provision", "pgwu") not in ("pfcp", "none"):
        _fail(path, "dut.mode external: dut.provision pfcp (gtplab provisions it over N4) or none (you do)")
    if dut.get("counters", "pgwu") not in ("eupf", "kernel", "kernelpath", "prometheus", "none"):
        _fail(path, "dut.mode external: dut.counters eupf, prometheus (the UPF's own), kernel (the XDP "
                    "verdicts the kernel counts on its veths), kernelpath (a UPF on sockets and TUN: its "
                    "namespace's UDP, IP, veth and TUN counters) or none")


def _check_dut_access(path, backend: str, dut: dict, local_lab: bool) -> None:
    """dut.provision (how bearers reach the DUT) and dut.counters (how its counters are read), with
    their sections: pfcp for provision pfcp, prometheus for counters prometheus (docs/pfcp.md).
    local_lab: the lab holds the DUT in a namespace (the embedded lab, or TRex's namespace lab),
    so its agent and counters are at hand; otherwise the DUT is another host."""
    provision = dut.get("provision", "pgwu")
    counters = dut.get("counters", "pgwu")
    if provision not in prov.PROVISION:
        _fail(path, f"dut.provision {provision!r}: one of {', '.join(prov.PROVISION)}")
    if counters not in prov.COUNTERS:
        _fail(path, f"dut.counters {counters!r}: one of {', '.join(prov.COUNTERS)}")
    if provision == "pfcp":
        cfg = prov.parse_config(dut.get("pfcp"), f"lab config {path}")
        if cfg.upf == prov.EMBEDDED and not local_lab:
            _fail(path, "dut.pfcp.upf: embedded is the namespace lab's agent; a lab of other hosts names "
                        "its UPF (HOST[:PORT])")
    elif "pfcp" in dut:
        _fail(path, f"dut.pfcp is given but dut.provision is {provision!r} (set provision: pfcp)")
    if counters == "prometheus":
        prometheus.parse_prometheus(dut.get("prometheus"), f"lab config {path}")
    elif "prometheus" in dut:
        _fail(path, f"dut.prometheus is given but dut.counters is {counters!r} (set counters: prometheus)")
    if counters == "eupf":
        upf_counters.parse_eupf(dut.get("eupf"), f"lab config {path}")
    elif "eupf" in dut:
        _fail(path, f"dut.eupf is given but dut.counters is {counters!r} (set counters: eupf)")
    if counters == "kernelpath" and dut.get("mode") != "external":
        _fail(path, "dut.counters kernelpath reads the namespace of an external UPF on sockets and TUN in the "
                    "namespace lab (dut.mode: external)")
    if counters == "kernel" and dut.get("mode") != "external":
        _fail(path, "dut.counters kernel counts an external UPF's XDP verdicts on the lab's veths (dut.mode: external)")
    if counters == "pgwu" and not local_lab and not dut.get("metrics_url"):
        _fail(path, "dut.counters pgwu on a lab of other hosts reads `pgwu metrics`: give "
                    "dut.metrics_url (or counters: prometheus / none)")


def resolve(name_or_path: str | None = None) -> Path:
    """A lab config file from a name (gtplab/lab/labs/NAME.yaml), a path, or $GTPLAB_LAB_CONFIG."""
    ref = name_or_path or os.environ.get("GTPLAB_LAB_CONFIG") or DEFAULT_LAB
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") or os.sep in ref:
        if not p.is_file():
            raise UserError(f"lab config {ref}: no such file")
        return p
    cand = LABS_DIR / f"{ref}.yaml"
    if not cand.is_file():
        have = ", ".join(sorted(f.stem for f in LABS_DIR.glob("*.yaml")))
        raise UserError(f"no lab config named {ref!r} (have: {have}; or give a file)")
    return cand


def load(name_or_path: str | None = None) -> LabConfig:
    """Read and check a lab config; UserError (one line) on anything wrong."""
    path = resolve(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        _fail(path, "not a text (YAML) file")
    except OSError as e:
        _fail(path, e.strerror or str(e))
    except yaml.YAMLError as e:
        _fail(path, f"not YAML: {str(e).splitlines()[0]}")
    if not isinstance(data, dict):
        _fail(path, "must be a mapping")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        _fail(path, f"unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    for key, allowed in (("dut", _DUT_KEYS), ("lab", _LAB_KEYS), ("thresholds", _THRESHOLD_KEYS),
                         ("trex", _TREX_KEYS)):
        sub = data.get(key) or {}
        if not isinstance(sub, dict):
            _fail(path, f"{key} must be a mapping")
        bad = set(sub) - allowed
        if bad:
            _fail(path, f"unknown key(s) in {key}: {', '.join(sorted(bad))} (allowed: {', '.join(sorted(allowed))})")
    backend = data.get("backend", "local")
    if backend not in ("local", "trex"):
        _fail(path, f"backend {backend!r}: use local or trex")
    ports = data.get("ports") or {"access": 0, "sgi": 1}
    if set(ports) != {"access", "sgi"} or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                   for v in ports.values()):
        _fail(path, "ports must be {access: N, sgi: M} with port numbers")
    if ports["access"] == ports["sgi"]:
        _fail(path, f"ports: access and sgi are both port {ports['access']}: they must be two ports")
    speed = data.get("port_speed_bps", 10e9)
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or speed <= 0:
        _fail(path, f"port_speed_bps {speed!r} must be a positive number (bits per second, e.g. 10000000000)")
    th = data.get("thresholds") or {}
    for kind in ("ndr_pps", "pdr_pps"):
        table = th.get(kind) or {}
        if not isinstance(table, dict) or set(table) - set(DIRECTIONS):
            _fail(path, f"thresholds.{kind} must map uplink/downlink to {{frame size|default: pps}}")
        for d, sizes in table.items():
            if not isinstance(sizes, dict):
                _fail(path, f"thresholds.{kind}.{d} must map frame sizes (or default) to pps")
            for k, v in sizes.items():
                if not (k == "default" or isinstance(k, int)):
                    _fail(path, f"thresholds.{kind}.{d}: bad key {k!r} (a frame size or default)")
                if _percent(v) is not None:
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    _fail(path, f"thresholds.{kind}.{d}: bad entry {k!r}: {v!r} (pps, or \"N%\" of line rate)")
                # a threshold above line rate can never be met; a default applies up to the largest frame
                size = k if k != "default" else 3024
                top = line_rate_pps(float(speed), size)
                if v > top:
                    _fail(path, f"thresholds.{kind}.{d}.{k}: {v:.0f} pps is above the line rate at {size} B "
                                f"({top:.0f} pps at port_speed_bps {float(speed):.0f})"
                          + ("; give a default as a fraction of line rate, e.g. \"50%\"" if k == "default" else ""))
    pdr = th.get("pdr_loss", 0.001)
    if not isinstance(pdr, (int, float)) or not 0 <= pdr < 1:
        _fail(path, f"thresholds.pdr_loss {pdr!r} must be a ratio 0..1 (0.001 = 0.1 %)")
    mode = (data.get("dut") or {}).get("mode", "pgwu")
    if mode not in DUT_MODES:
        _fail(path, f"dut.mode {mode!r}: one of {', '.join(DUT_MODES)} (the reference forwarder is fwd)")
    if "socket" in (data.get("dut") or {}):
        if mode != "socket":
            _fail(path, f"dut.socket is given but dut.mode is {mode!r} (set mode: socket)")
        SocketKnobs.parse(data["dut"]["socket"], f"lab config {path}: dut.socket")
    gen = (data.get("lab") or {}).get("generator", "engine")
    if gen not in GENERATORS:
        _fail(path, f"lab.generator {gen!r}: one of {', '.join(GENERATORS)}")
    mb = (data.get("dut") or {}).get("max_bearers")
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb < 1):
        _fail(path, f"dut.max_bearers {mb!r} must be a number of bearers >= 1")
    _check_dut_access(path, backend, data.get("dut") or {}, local_lab=backend == "local" or gen == "trex")
    _check_external(path, data.get("dut") or {}, local_lab=backend == "local" or gen == "trex")
    aw = (data.get("lab") or {}).get("awake", "auto")
    if aw not in AWAKE_METHODS:
        _fail(path, f"lab.awake {aw!r}: one of {', '.join(AWAKE_METHODS)} (how the DUT CPUs are kept out of halt)")
    share = (data.get("lab") or {}).get("share_cpus", False)
    if not isinstance(share, bool):
        _fail(path, f"lab.share_cpus {share!r}: true or false (run on CPUs another lab holds, and say so)")
    rt = (data.get("trex") or {}).get("runtime")
    if rt is not None and not isinstance(rt, str):
        _fail(path, f"trex.runtime {rt!r}: a TRex directory or release tarball (a path)")
    if backend == "local" or gen == "trex":
        CpuLayout.parse(data.get("cpus"), f"lab config {path}: cpus")
    mr = data.get("max_rate_pps")
    if mr is not None and (not isinstance(mr, (int, float)) or mr <= 0):
        _fail(path, f"max_rate_pps {mr!r} must be a positive number")
    return LabConfig(name=str(data.get("name") or path.stem), path=str(path), backend=backend,
                     description=str(data.get("description") or ""),
                     trex_server=data.get("trex_server"), ports=dict(ports),
                     port_speed_bps=float(speed), max_rate_pps=mr,
                     cpu_shared_with_generator=bool(data.get("cpu_shared_with_generator", False)),
                     cpus=data.get("cpus"),
                     lab=dict(data.get("lab") or {}), dut=dict(data.get("dut") or {}),
                     thresholds=dict(th), measured=data.get("measured"),
                     trex=dict(data.get("trex") or {}))
