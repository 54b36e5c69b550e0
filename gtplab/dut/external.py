"""An external UPF in the namespace lab (`dut.mode: external`, gtplab/lab/external.py) as a
measurement reads it: its own counters through the adapter of its kind (gtplab.dut.upf_counters:
eUPF's REST API, a Prometheus mapping, or the kernel's count of its XDP verdicts), and everything
the lab sees of it as of the PGW-U (gtplab.dut.local.LocalDut): the veths' ring losses both ways,
the DUT ingress's XDP packet count, the CPU time of the DUT's NAPI kthreads (where its XDP program
runs), the DUT CPUs' busy time; plus the run time of the XDP programs it attached (by program id,
bpf_stats) and the CPU time of its own process (its user-space threads: PFCP, API, Go runtime).

With its counters and the kernel's, a trial's packets are accounted for twice over: conservation
(gtplab.measure.conservation) balances generator, ingress ring, the UPF's verdicts and egress ring;
cross_check() compares the UPF's verdicts with the kernel's count of the same verdicts on the
ingress veth, so a UPF whose counters miss packets is caught too.

Used by gtplab.dut.probe.make_dut (a lab whose DUT mode is external) and the tests.
"""

from __future__ import annotations

import json
import subprocess

from gtplab import bounded
from gtplab.dut import PROG
from gtplab.dut.kernelpath import KernelPath
from gtplab.dut.kernelpath import places as kernel_path_places
from gtplab.dut.local import LocalDut
from gtplab.dut.prometheus import PrometheusDut, ScrapedDut
from gtplab.dut.upf_counters import EupfCounters, KernelVerdicts, kernel_counts, parse_eupf
from gtplab.errors import UserError
from gtplab.kernel import bpf
from gtplab.kernel.netns import Worker
from gtplab.kernel.threads import process_cpu_ns

HTTP_TIMEOUT = bounded.EUPF_API_TIMEOUT


def lab_url(template: str, lab) -> str:
    """A URL of the lab config with the lab's addresses put in: {n4} (the UPF's N4 address), {n3},
    {n6}, {cp} (gtplab's N4 address)."""
    a = lab.addressing
    try:
        return template.format_map({"n4": a.dut_n4, "n3": a.dut_access, "n6": a.dut_sgi, "cp": a.cp_n4})
    except (KeyError, ValueError, IndexError) as e:
        raise UserError(f"URL {template!r}: unknown placeholder {e} (known: {{n4}}, {{n3}}, {{n6}}, {{cp}})") from None


def http_get(url: str) -> str:
    """The body of GET url (eUPF's REST API): at most bounded.EUPF_API_BYTES, all of it within
    HTTP_TIMEOUT s; else OSError in one line naming the URL."""
    return bounded.http_get(url, bounded.EUPF_API_BYTES, HTTP_TIMEOUT, what=f"eUPF API {url}").decode(errors="replace")


class _PrometheusInLab(PrometheusDut):
    """dut.counters prometheus for an external UPF: the mapping of gtplab.dut.prometheus, scraped
    from the lab's control-plane namespace."""

    def __init__(self, cfg, lab, worker: Worker):
        super().__init__(cfg)
        self.p["url"] = lab_url(self.p["url"], lab)
        self._worker = worker

    def counters(self):
        return self._worker.call(super().counters)


class EupfDut(ScrapedDut):
    """eUPF on another host (a lab of real hosts, dut.counters: eupf): its verdicts from its REST API
    (dut.eupf.api), nothing else (ScrapedDut: no link counters, no program run time)."""

    kind = "eupf"

    def __init__(self, cfg):
        self.upf = EupfCounters(parse_eupf(cfg.dut.get("eupf"), f"lab config {cfg.path}")["api"], http_get)

    def counters(self) -> dict[tuple[str, str], int]:
        return self.upf.counters()


class ExternalDut(LocalDut):
    """The namespace lab's external UPF (module doc). cfg: the lab config (dut.counters says which
    adapter: kernel, eupf, prometheus, kernelpath (a UPF without XDP: path_places()); none: counters() is None and conservation is the generator's
    alone)."""

    kind = "external"

    def __init__(self, lab, cfg):
        if lab.dut_mode != "external" or not lab.external:
            raise UserError(f"lab {lab.name} runs {lab.dut_mode}, not an external UPF")
        self.lab = lab
        self.mode = "external"
        self.dp = None
        self.counters_kind = cfg.counters
        self.worker = Worker(lab.cp_ns)          # the UPF's API and metrics are on N4, in the lab
        try:
            if cfg.counters == "kernel":
                self.upf = KernelVerdicts(self._dut_ethtool)
            elif cfg.counters == "eupf":
                api = lab_url(parse_eupf(cfg.dut.get("eupf"), f"lab config {cfg.path}")["api"], lab)
                self.upf = EupfCounters(api, lambda url: self.worker.call(http_get, url))
            elif cfg.counters == "prometheus":
                self.upf = _PrometheusInLab(cfg, lab, self.worker)
            elif cfg.counters == "kernelpath":
                # a UPF on the kernel's path (UDP socket, TUN): its namespace's counters, the N4
                # datagrams taken off in the control plane's (gtplab.dut.kernelpath)
                self.upf = KernelPath(lab.dut_ns, tuple(p.dut_ifname for p in lab.ports),
                                      lambda ifname: self._ethtool(lab.dut_ns, ifname), cp_netns=lab.cp_ns)
            elif cfg.counters == "none":
                self.upf = None
            else:
                raise UserError(f"lab config {cfg.path}: dut.counters {cfg.counters} cannot read an external UPF "
                                "(use eupf, kernel, kernelpath, prometheus or none)")
        except BaseException:
            self.worker.close()
            raise

    def close(self) -> None:
        try:
            if self.counters_kind == "kernelpath":
                self.upf.close()
        finally:
            self.worker.close()

    def path_places(self, before, after, direction: str) -> dict | None:
        """counters kernelpath: where the trial's packets went, from two counters() of the
        namespace (gtplab.dut.kernelpath.places; the runner balances it with
        conservation.check_places); None for other adapters, whose counters are the UPF's verdicts."""
        if self.counters_kind != "kernelpath":
            return None
        return kernel_path_places(before, after, direction)

    def counters(self) -> dict[tuple[str, str], int] | None:
        return self.upf.counters() if self.upf is not None else None

    def _dut_ethtool(self) -> dict[str, dict[str, int]]:
        return {p.dut_ifname: self._ethtool(self.lab.dut_ns, p.dut_ifname) for p in self.lab.ports}

    def xdp_prog_ids(self) -> dict[str, int | None]:
        """{DUT ifname: id of the XDP program attached to it}, as `ip link` shows them now."""
        p = subprocess.run(["ip", "-n", self.lab.dut_ns, "-d", "-j", "link", "show"], capture_output=True,
                           text=True, timeout=30)
        ids = {q.dut_ifname: None for q in self.lab.ports}
        for link in json.loads(p.stdout or "[]") if p.returncode == 0 else []:
            if link.get("ifname") in ids:
                ids[link["ifname"]] = ((link.get("xdp") or {}).get("prog") or {}).get("id")
        return ids

    def prog_stats(self) -> dict[str, tuple[int, int]] | None:
        """(run time ns, run count) of the XDP program on the access port (uplink) and on the SGi
        port (downlink), by id: the UPF loaded them. One program on both (eUPF's) is counted under
        both names; a trial moves one direction only. None when a port has none, or for a UPF without
        XDP (xdp: false): the XDP_PASS the lab attached there is not the UPF's."""
        if not ((self.lab.external or {}).get("spec") or {}).get("xdp", True):
            return None
        ids = self.xdp_prog_ids()
        out = {}
        for direction, port in zip(("uplink", "downlink"), self.lab.ports):
            pid = ids.get(port.dut_ifname)
            if not pid:
                return None
            with bpf.Prog.by_id(pid) as prog:
                i = prog.info()
                out[PROG[direction]] = (int(i.run_time_ns), int(i.run_cnt))
        return out

    def cpu_seconds(self) -> dict[str, float] | None:
        """LocalDut's (the DUT's NAPI kthreads, where its XDP program runs; the DUT CPUs' busy time)
        and "process": the CPU time of the UPF's own process, all its threads."""
        out = super().cpu_seconds()
        pid = (self.lab.external or {}).get("pid")
        if out is not None and pid:
            out["process"] = process_cpu_ns(pid) / 1e9
        return out

    def install_bearers(self, path: str) -> None:
        """Nothing: an external UPF's bearers come over PFCP (dut.provision pfcp wraps this probe in
        gtplab.dut.pfcp.PfcpDut) or are there already (provision none)."""

    def cross_check(self, dd, before: dict, after: dict, direction: str) -> list[str]:
        """The UPF's verdicts in a trial (dd: conservation.DutDelta of its counters) against the
        kernel's count of the same verdicts on the ingress veth (link() before and after); the
        messages of what disagrees. Only for adapters that count verdicts (eUPF's; the kernel's is
        the reference itself; kernelpath's cross-check, the N3 socket's drops against the UDP MIB,
        is in its places())."""
        if self.counters_kind != "eupf":
            return []
        port = self.lab.ports[0 if direction == "uplink" else 1]
        dev = "dut_access" if direction == "uplink" else "dut_sgi"
        k0, k1 = kernel_counts(before[dev]), kernel_counts(after[dev])
        k = {x: k1[x] - k0[x] for x in k0}
        errors = []
        if dd.drop_packets != k["drops"]:
            errors.append(f"the UPF counted {dd.drop_packets} dropped (XDP_DROP or XDP_ABORTED), the kernel "
                          f"{k['drops']} on {port.dut_ifname}")
        sent = dd.fwd_packets + sum(dd.other.values())
        if not k["redirect"] + k["tx"] <= sent <= k["redirect"] + k["tx"] + k["failed"]:
            errors.append(f"the UPF counted {sent} redirected or sent back, the kernel {k['redirect']} redirected "
                          f"and {k['tx']} sent back on {port.dut_ifname} ({k['failed']} failed after the program)")
        if not k["passed"] <= dd.pass_packets <= k["passed"] + k["failed"]:
            errors.append(f"the UPF counted {dd.pass_packets} passed to the kernel, the kernel {k['passed']} on "
                          f"{port.dut_ifname}")
        return errors
