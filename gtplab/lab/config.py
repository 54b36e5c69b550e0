"""Lab configurations: one YAML file per lab with its connection details and throughput thresholds.

    gtplab/lab/labs/embedded.yaml      this machine: the namespace lab + the embedded engine (default)
    gtplab/lab/labs/example-trex.yaml  a lab of real servers: a TRex server, a PGW-U host, its metrics

Chosen with `--lab-config NAME|FILE` or $GTPLAB_LAB_CONFIG (a name is a file of gtplab/lab/labs/). The
same tests and the same sweep run on any lab; only this file says what "fast enough" means there
(docs/testing.md, docs/sweep.md).

load() reads it as data first (docs/lab.md, "The lab config, read as data"): the YAML itself, then
the schema of gtplab/lab/config_schema.py, then what one key means for another; one line for the
first problem, before anything is built.

Used by gtplab.measure.sweep (`--lab-config`) and the throughput tests.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gtplab import bounded
from gtplab.dut import prometheus, upf_counters
from gtplab.dut.sock import SocketKnobs
from gtplab.errors import UserError
from gtplab.lab import external
from gtplab.lab.config_schema import DUT_MODES, GENERATORS, show, validate  # noqa: F401  (DUT_MODES, GENERATORS: the lab's API)
from gtplab.lab.cpu import CpuLayout
from gtplab.lab import generators as pairs
from gtplab.pfcp import provision as prov
from gtplab.rates import line_rate_pps

LABS_DIR = Path(__file__).resolve().parent / "labs"
DEFAULT_LAB = "embedded"
DIRECTIONS = ("uplink", "downlink")
MAX_BYTES = bounded.LAB_CONFIG_BYTES   # a lab config is a few kB: a larger file is not one (read no further)
MAX_DEPTH = 32              # nesting of mappings and lists (the shipped ones: 5)


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
    # the generator port pairs (gtplab.lab.generators.Pair): one from ports/trex_server, or generators:
    generators: list = field(default_factory=list)

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


def _fail(path, msg: str, what: str = "lab config"):
    raise UserError(f"{what} {path}: {msg}")


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
            raise UserError(f"lab config {ref}: {'not a regular file' if p.exists() else 'no such file'}")
        return p
    cand = LABS_DIR / f"{ref}.yaml"
    if not cand.is_file():
        have = ", ".join(sorted(f.stem for f in LABS_DIR.glob("*.yaml")))
        raise UserError(f"no lab config named {ref!r} (have: {have}; or give a file)")
    return cand


def read_yaml(path: Path, what: str = "lab config") -> Any:
    """The YAML of a lab config, read as data: at most MAX_BYTES, no duplicate key, no alias (a lab
    config has no use for them, and they let a small file expand into a huge one), no
    nesting deeper than MAX_DEPTH, every number finite. UserError naming the line or the key path,
    prefixed `<what> <path>:` (the sweep spec is read the same way: gtplab.measure.plan)."""
    # a FIFO, a socket, a directory: refused by open_file, in one line (a FIFO would hang the open)
    with bounded.open_file(path, f"{what} {path}", error=UserError) as f:
        try:
            raw = f.read(MAX_BYTES + 1)
        except OSError as e:
            _fail(path, e.strerror or str(e), what)
    if len(raw) > MAX_BYTES:
        _fail(path, f"larger than {MAX_BYTES >> 10} KiB: not a {what}", what)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        _fail(path, "not a text (YAML) file", what)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        _fail(path, f"not YAML: {str(e).splitlines()[0]}", what)
    except RecursionError:
        _fail(path, f"nested deeper than {MAX_DEPTH} levels: not a {what}", what)
    _check_nodes(path, node, set(), what=what)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        _fail(path, f"not YAML: {str(e).splitlines()[0]}", what)
    _check_finite(path, data, "", what)
    return data


def _check_nodes(path: Path, node, visited: set[int], where: str = "", depth: int = 0,
                 what: str = "lab config") -> None:
    """Duplicate keys, aliases and depth, on the YAML's nodes (where the lines are known). An alias
    is the node it names, met a second time."""
    if node is None:
        return
    line = node.start_mark.line + 1
    if depth > MAX_DEPTH:
        _fail(path, f"line {line}: nested deeper than {MAX_DEPTH} levels: not a {what}", what)
    if id(node) in visited:
        _fail(path, f"{where or 'the file'}: an alias of line {line}: YAML aliases (*, <<) are not read "
                    f"in a {what}: write the value out", what)
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k, v in node.value:
            _check_nodes(path, k, visited, where, depth + 1, what)
            kpath = where               # a mapping or list as a key: YAML itself refuses it, below
            if isinstance(k, yaml.ScalarNode):
                if k.tag == "tag:yaml.org,2002:merge":
                    _fail(path, f"line {k.start_mark.line + 1}: {where or 'the file'}: YAML merge keys (<<) are "
                                f"not read in a {what}: write the keys out", what)
                key = (k.tag, k.value)  # 1518 and "1518" are two keys
                kpath = f"{where}.{k.value}" if where else str(k.value)
                if key in seen:
                    _fail(path, f"line {k.start_mark.line + 1}: {kpath} is given twice (first on line {seen[key]}): "
                                "YAML would keep the last silently; give it once", what)
                seen[key] = k.start_mark.line + 1
            _check_nodes(path, v, visited, kpath, depth + 1, what)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _check_nodes(path, v, visited, f"{where}[{i}]", depth + 1, what)


def _check_finite(path: Path, v: Any, where: str, what: str = "lab config") -> None:
    """Every float of the config finite: YAML reads .nan, .inf and 1.0e999 as numbers, which pass
    every comparison a range check makes (a NaN timer made the PFCP node spin, an infinite wait
    overflowed)."""
    if isinstance(v, float) and not math.isfinite(v):
        _fail(path, f"{where or 'the file'} {show(v)}: not a finite number", what)
    if isinstance(v, dict):
        for k, x in v.items():
            _check_finite(path, x, f"{where}.{k}" if where else str(k), what)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _check_finite(path, x, f"{where}[{i}]", what)


def load(name_or_path: str | None = None) -> LabConfig:
    """Read and check a lab config; UserError (one line) on anything wrong. Nothing is built here:
    every command that takes --lab-config calls this first, so a bad config costs nothing.

    Three passes: the YAML as data (read_yaml: size, duplicate keys, anchors, finite numbers), the
    schema (gtplab/lab/config_schema.py: every key, its type and range, unknown keys), then what
    one key means for another (below, and the parsers of dut.pfcp, dut.external, ...)."""
    path = resolve(name_or_path)
    data = read_yaml(path)
    problem = validate(data)
    if problem:
        _fail(path, problem)
    backend = data.get("backend", "local")
    ports = data.get("ports") or {"access": 0, "sgi": 1}
    lab = data.get("lab") or {}
    gen = lab.get("generator", "engine")
    if data.get("generators") is not None:
        if backend != "trex":
            _fail(path, "generators (several port pairs) need backend: trex (TRex servers; gtplab/measure/pairs.py)")
    generators = pairs.parse_generators(data, f"lab config {path}", single_server=gen == "trex")
    if data.get("generators") is not None:
        ports = {"access": generators[0].access, "sgi": generators[0].sgi}
    if ports["access"] == ports["sgi"]:
        _fail(path, f"ports: access and sgi are both port {ports['access']}: they must be two ports")
    speed = data.get("port_speed_bps", 10e9)
    th = data.get("thresholds") or {}
    for kind in ("ndr_pps", "pdr_pps"):
        for d, sizes in (th.get(kind) or {}).items():
            for k, v in (sizes or {}).items():
                if isinstance(v, str):
                    if _percent(v) is None:
                        _fail(path, f"thresholds.{kind}.{d}: bad entry {k!r}: {v!r} (pps, or \"N%\" of line rate)")
                    continue
                # a threshold above line rate can never be met; a default applies up to the largest frame
                size = k if k != "default" else 3024
                top = line_rate_pps(float(speed), size)
                if v > top:
                    _fail(path, f"thresholds.{kind}.{d}.{k}: {v:.0f} pps is above the line rate at {size} B "
                                f"({top:.0f} pps at port_speed_bps {float(speed):.0f})"
                          + ("; give a default as a fraction of line rate, e.g. \"50%\"" if k == "default" else ""))
    dut = data.get("dut") or {}
    mode = dut.get("mode", "pgwu")
    if "socket" in dut:
        if mode != "socket":
            _fail(path, f"dut.socket is given but dut.mode is {mode!r} (set mode: socket)")
        SocketKnobs.parse(dut["socket"], f"lab config {path}: dut.socket")
    _check_dut_access(path, backend, dut, local_lab=backend == "local" or gen == "trex")
    _check_external(path, dut, local_lab=backend == "local" or gen == "trex")
    if backend == "local" or gen == "trex":
        CpuLayout.parse(data.get("cpus"), f"lab config {path}: cpus")
    return LabConfig(name=str(data.get("name") or path.stem), path=str(path), backend=backend,
                     description=str(data.get("description") or ""),
                     trex_server=data.get("trex_server"), ports=dict(ports),
                     port_speed_bps=float(speed), max_rate_pps=data.get("max_rate_pps"),
                     cpu_shared_with_generator=bool(data.get("cpu_shared_with_generator", False)),
                     cpus=data.get("cpus"),
                     lab=dict(lab), dut=dict(dut),
                     thresholds=dict(th), measured=data.get("measured"),
                     trex=dict(data.get("trex") or {}), generators=generators)
