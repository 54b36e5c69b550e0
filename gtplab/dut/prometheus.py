"""Counters of any UPF from its Prometheus endpoint, and a DUT whose counters are not read, for the
lab config's `dut.counters: prometheus | none` (docs/pfcp.md). Same probe interface as local.py and
metrics.py (gtplab.dut.probe.DutProbe).

    counters prometheus  a mapping of metric selectors to the conservation terms: rx, fwd, drop
                         (each a sum over matching series)
    counters none        nothing: conservation is generator-side only, and the results say so
"""

from __future__ import annotations

import contextlib

from gtplab.errors import UserError

PROM_TERMS = ("rx", "fwd", "drop")
SCRAPE_MAX_BYTES = 16 << 20     # an exposition of a UPF is some kB to a few MB; more is not one (gtplab.bounded)


def _is_selector(sel: str) -> bool:
    try:
        _match(sel)
    except ValueError:
        return False
    return True


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
            if not isinstance(sel, str) or not _is_selector(sel):
                raise UserError(f"{where}: dut.prometheus.metrics.{k} {sel!r}: use name or name{{label=\"value\"}}")
        out[k] = [x.strip() for x in sels]
    return {"url": url, "metrics": out}


class ScrapeError(OSError):
    """An endpoint that answered with something that is not Prometheus text (callers treat it as
    one that did not answer)."""


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample, through prometheus_client's own parser (label values
    may hold any character, escaped: \\", \\\\, \\n, "}"); ValueError on text that is not an exposition."""
    from prometheus_client.parser import text_string_to_metric_families
    return [(x.name, dict(x.labels), float(x.value))
            for fam in text_string_to_metric_families(text) for x in fam.samples]


def scrape(url: str, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of a Prometheus text exposition, with or without labels
    (OSError if the endpoint does not answer or does not answer Prometheus text)."""
    from gtplab.bounded import http_get
    text = http_get(url, SCRAPE_MAX_BYTES, timeout, error=ScrapeError).decode(errors="replace")
    try:
        return _samples(text)
    except ValueError as e:
        raise ScrapeError(f"{url} did not answer Prometheus text ({e})") from None


def same_metric(sample: str, selector: str) -> bool:
    """A sample's name as prometheus_client's parser gives it against a selector's: the parser names a
    counter family's samples NAME_total whether the text wrote `NAME` or `NAME_total` (eUPF writes
    `upf_xdp_drop` under `# TYPE upf_xdp_drop counter`), so a selector may name either."""
    return sample == selector or sample == selector + "_total"


def _match(selector: str) -> tuple[str, dict[str, str]]:
    """A selector `name` or `name{label="value",...}` as (name, wanted labels), read by the same
    parser as the samples (a selector is a sample line without its value)."""
    try:
        rows = _samples(selector.strip() + " 0\n")
    except ValueError:
        rows = []
    if len(rows) != 1:
        raise ValueError(f"not a metric selector: {selector!r}")
    return rows[0][0], rows[0][1]


class ScrapedDut:
    """What a DUT read only through its metrics endpoints cannot give the runner: no link counters
    (losses on the wire are unexplained), no per-program run time, no CPU layout, no CPU time unless
    a subclass reads it, nothing to close or to switch on for BPF stats, no bearers to install."""

    def close(self) -> None:
        pass

    def link(self):
        return None

    @staticmethod
    def link_delta(before, after, direction):
        return None

    def prog_stats(self):
        return None

    def layout(self) -> dict | None:
        return None

    def cpu_seconds(self) -> dict[str, float] | None:
        return None

    node_url: str | None = None     # the DUT host's node exporter (lab config dut.node_exporter_url)

    def rx_path(self) -> dict | None:
        """The DUT host's receive path from its node exporter, in LocalDut.rx_path()'s shape:
        softnet per CPU (node_softnet_processed/dropped/times_squeezed_total), its UDP and IP
        counters (node_netstat_Udp_*, node_netstat_Ip_*: those the exporter's netstat collector
        keeps), its interfaces' drops (node_network_receive/transmit_drop_total). No threads. None
        without a node exporter or when it does not answer."""
        if not self.node_url:
            return None
        try:
            rows = scrape(self.node_url)
        except OSError:
            return None
        soft: dict[int, list[int]] = {}
        links: dict[str, dict[str, int]] = {}
        snmp: dict[str, dict[str, int]] = {"Udp": {}, "Ip": {}}
        which = {"node_softnet_processed_total": 0, "node_softnet_dropped_total": 1,
                 "node_softnet_times_squeezed_total": 2}
        for n, lb, v in rows:
            if n in which and lb.get("cpu", "").isdigit():
                soft.setdefault(int(lb["cpu"]), [0, 0, 0])[which[n]] = int(v)
            elif n.startswith(("node_netstat_Udp_", "node_netstat_Ip_")):
                table, _, name = n[len("node_netstat_"):].partition("_")
                snmp[table][name] = int(v)
            elif n in ("node_network_receive_drop_total", "node_network_transmit_drop_total") and "device" in lb:
                key = "rx_dropped" if "receive" in n else "tx_dropped"
                links.setdefault(lb["device"], {})[key] = int(v)
        return {"softnet": {c: tuple(x) for c, x in soft.items()}, "snmp": snmp, "links": links, "threads": {}}

    @contextlib.contextmanager
    def bpf_stats(self):
        yield

    def install_bearers(self, path: str) -> None:
        pass


class PrometheusDut(ScrapedDut):
    """Counters of any UPF from its Prometheus endpoint: {(term, verdict): packets} in the shape
    conservation.DutDelta reads (fwd as ("upf_fwd", "tx"), drop as ("upf", "drop"), what rx
    counts beyond fwd + drop as ("upf_unaccounted", "other"))."""

    kind = "prometheus"

    def __init__(self, cfg):
        self.p = parse_prometheus(cfg.dut.get("prometheus"), f"lab config {cfg.path}")
        self.node_url = cfg.dut.get("node_exporter_url")
        self.sel = {k: [_match(x) for x in v] for k, v in self.p["metrics"].items()}

    def _sum(self, rows, term) -> int | None:
        if term not in self.sel:
            return None
        return int(sum(v for name, want in self.sel[term] for n, lb, v in rows
                       if same_metric(n, name) and all(lb.get(k) == x for k, x in want.items())))

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


class NoCountersDut(PrometheusDut):
    """A DUT whose counters are not read: counters() is None, and the runner checks conservation on
    the generator's side only (conservation.generator_only)."""

    kind = "none"

    def __init__(self, cfg=None):
        self.node_url = cfg.dut.get("node_exporter_url") if cfg is not None else None

    def counters(self):
        return None
