"""The DUT as the measurement reads it: the probe interface (DutProbe) and make_dut(), which picks the
probe for a lab config's `dut.provision` and `dut.counters` (docs/pfcp.md).

    dut = make_dut(backend, lab_config)     # LocalDut, ExternalDut, MetricsDut, PrometheusDut or
                                            # NoCountersDut, inside a PfcpDut with dut.provision: pfcp
    before = dut.counters(); ...; after = dut.counters()

Used by gtplab.measure.runner.Runner (every trial reads the DUT through one of these) and the tests.
"""

from __future__ import annotations

from typing import Any, ContextManager, Protocol

from gtplab.dut.external import EupfDut, ExternalDut
from gtplab.dut.local import LocalDut
from gtplab.dut.metrics import MetricsDut
from gtplab.dut.pfcp import PfcpDut
from gtplab.dut.prometheus import NoCountersDut, PrometheusDut
from gtplab.errors import UserError


class DutProbe(Protocol):
    """What a trial reads of the DUT before and after the traffic, and how it installs bearers. A
    probe that cannot measure something returns None for it (ScrapedDut: no link counters, no
    per-program run time); the runner then says so in the trial's result."""

    kind: str       # "local", "external", "metrics", "prometheus", "none" (a PfcpDut takes its inner's)

    def close(self) -> None: ...

    def counters(self) -> dict[tuple[str, str], int] | None:
        """Packets per (reason, verdict) so far (conservation.DutDelta reads them); None: not read."""

    def layout(self) -> dict[str, Any] | None:
        """The lab's CPU layout as recorded (generator and DUT CPUs, NAPI threads), or None."""

    def link(self) -> dict[str, dict[str, int]] | None:
        """Counters of the links between generator and DUT (the veths' ethtool -S), or None."""

    def link_delta(self, before, after, direction: str) -> dict[str, int] | None:
        """From two link() readings: dut_rx, lost_in, lost_out, other_side_rx, gen_port_rx."""

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """(run time ns, run count) of each XDP program by name (gtplab.dut.PROG), or None."""

    def cpu_seconds(self) -> dict[str, float] | None:
        """{"threads": CPU seconds of the DUT's own threads, "cpus": busy seconds of its CPUs}."""

    def rx_path(self) -> dict[str, Any] | None:
        """A snapshot of the DUT host's receive path: softnet_stat per CPU, its (netns's) UDP and IP
        MIB, its links' drops, its threads (name, CPU, run time); gtplab.measure.rxpath takes the
        deltas. None when it cannot be read."""

    def bpf_stats(self) -> ContextManager[None]:
        """kernel.bpf_stats_enabled while the block runs, where it applies."""

    def install_bearers(self, path: str) -> None:
        """Put the bearers of a bearer file (gtplab bearers' format) on the DUT, replacing others."""


def make_dut(backend, cfg) -> DutProbe:
    """The runner's DUT probe for the lab config's provision and counters: the lab's own PGW-U or
    forwarder when the backend has a namespace lab (the embedded engine's, or a TRex lab), or the
    external UPF it runs (its counters by dut.counters, with the lab's own); else a remote PGW-U's
    metrics; any UPF's Prometheus counters, or none; wrapped in a PfcpDut when the bearers go over
    PFCP."""
    lab = getattr(backend, "lab", None)
    if lab is not None and lab.dut_mode == "external":
        inner = ExternalDut(lab, cfg)
    elif cfg.counters == "kernel":
        raise UserError(f"lab config {cfg.path}: dut.counters kernel reads the veths of an external UPF in the "
                        "namespace lab (dut.mode: external); a UPF elsewhere: counters eupf, prometheus or none")
    elif cfg.counters == "kernelpath":
        raise UserError(f"lab config {cfg.path}: dut.counters kernelpath reads the namespace of an external UPF in "
                        "the namespace lab (dut.mode: external)")
    elif cfg.counters == "eupf":
        inner = EupfDut(cfg)
    elif cfg.counters == "none":
        inner = NoCountersDut(cfg)
    elif cfg.counters == "prometheus":
        inner = PrometheusDut(cfg)
    else:
        # the lab's own PGW-U (the embedded engine's lab, or a TRex lab in namespaces), else remote
        inner = LocalDut(lab) if lab is not None else MetricsDut(cfg)
    if cfg.provision == "pfcp":
        try:
            return PfcpDut(inner, cfg, pin_dir=getattr(lab, "pin_dir", None), lab=lab)
        except BaseException:
            inner.close()
            raise
    if cfg.provision == "none":
        inner.install_bearers = lambda path: None
    return inner
