"""Several generator port pairs in one case (issue 34, item 5; docs/ansible.md, "Several generator
port pairs"): one TRex client per server, the bearers split between the pairs, every pair's trial
started together, and one result with the pairs' counters summed and kept apart.

    pairs = lab_config.generators                        # gtplab.lab.generators: generators: or ports:
    r = PairsRunner(pairs, dut_counters=..., install_bearers=...)
    prep = r.prepare("uplink", {"size": 256, "flows": 8, "bearers": 8})
    t = r.trial(prep, rate_pps=5000, duration=1.0)       # rate per pair
    t["conservation"], t["pairs"]                        # the sums' balance, each pair's figures

Conservation across the pairs. The DUT's counters are one program's for all its interfaces and
cannot be split by pair, so the balance is over the sums, exact (gtplab/measure/conservation.py):

    sum over pairs of generator tx  +  background sent into the DUT  =  DUT rx
    DUT rx                          =  forwarded + dropped + passed
    forwarded                       =  sum over pairs of the test's rx

The DUT's counters are read once before every pair starts and once after every pair has stopped and
its counters held still: no trial of one pair falls outside the window of another's. Each pair's own
tx and rx stay in the record (t["pairs"]); rx == tx per pair says that each pair's packets left the
DUT on that pair (its routes: the SGWs of a pair behind its access port, its PDN prefix behind its
SGi port).

Start skew: the pairs of one server start in one call; the servers' calls run in threads released
together, and the record keeps when each call returned (t["start_skew_s"]). Several TRex hosts have
a clock each: a trial's rate is each pair's own (packets over its own elapsed time), never a
difference of two hosts' clocks.

Per pair, its background (frames that are not the test's) comes from a capture on that server of
every frame that is not the test's (gtplab/traffic/trex/background.py), counted per pair's ports.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from gtplab.errors import UserError
from gtplab.gtpu import bearers as bearer_files
from gtplab.lab.generators import Pair, server_key as _server_key
from gtplab.measure import conservation
from gtplab.measure.runner import HOST_UNMEASURED, Prepared, Runner, trial_limit
from gtplab.rates import wire_rates
from gtplab.traffic.trex import background as trex_background
from gtplab.traffic.trex.client import TrexClient, TrexError

PROFILES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            "trex_profiles")
SETTLE_STEP_S = 0.02
SETTLE_MAX_S = 2.0


def split_tunables(tunables: dict, pairs: list[Pair], direction: str) -> list[dict]:
    """Each pair's profile tunables: the case's, with its own bearers (UE addresses and TEIDs
    following the previous pair's), SGW addresses and PDN addresses."""
    n = bearer_files.profile_args(direction, tunables).bearers
    c = bearer_files.load_common()
    ue0 = int(ipaddress.IPv4Address(c.DEFAULT_UE_BASE))
    out = []
    for p in pairs:
        k = p.index
        out.append({**tunables, "ue_base": str(ipaddress.IPv4Address(ue0 + k * n)),
                    "teid_base": c.DEFAULT_TEID_BASE + k * n, "sgw_teid_base": c.DEFAULT_SGW_TEID_BASE + k * n,
                    "sgw_base": p.sgw_base, "pdn_base": p.pdn_base})
    return out


def _merge(a: dict[str, int] | None, b: dict[str, int] | None) -> dict[str, int]:
    out = dict(a or {})
    for k, v in (b or {}).items():
        out[k] = out.get(k, 0) + v
    return out


def aggregate(per_pair: list[dict], dut: conservation.DutDelta) -> conservation.Conservation:
    """The balance over all pairs (module doc): every pair's generator tx, rx (all it received) and
    background summed, against the DUT's counters read once around all of them."""
    tx = sum(p["gen_tx"] for p in per_pair)
    rx = sum(p["gen_rx_all"] for p in per_pair)
    bg = None
    if all(p["background"] is not None for p in per_pair):
        bg = conservation.Background(gen_rx={}, to_dut_in={}, to_dut_other={})
        for p in per_pair:
            b = p["background"]
            bg.gen_rx = _merge(bg.gen_rx, b.gen_rx)
            bg.to_dut_in = _merge(bg.to_dut_in, b.to_dut_in)
            bg.to_dut_other = _merge(bg.to_dut_other, b.to_dut_other)
    return conservation.check(tx, rx, dut, background=bg)


@dataclass
class PairPrep:
    pair: Pair
    tunables: dict
    streams: list[dict]
    tx: int
    rx: int
    direction: str


class PairsRunner:
    """Trials over several generator pairs (module doc). dut_counters(): the DUT's {(reason,
    verdict): packets} (gtplab.dut.dataplane.Dataplane(pin).stats(), a MetricsDut's counters);
    install_bearers(path): loads a bearer file into the DUT (`pgwu session load`)."""

    def __init__(self, pairs: list[Pair], dut_counters: Callable[[], dict],
                 install_bearers: Callable[[str], None], timeout: float = 120.0, worker: TrexClient | None = None):
        # the TRex library's bundled Scapy warns about deprecated ciphers on import (as Runner)
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
        self.pairs = pairs
        self.dut_counters = dut_counters
        self.install_bearers = install_bearers
        # one client per server (pairs on one server share it)
        self.clients: dict[tuple, TrexClient] = {}
        self.groups: dict[tuple, list[Pair]] = {}
        for p in pairs:
            key = _server_key(p.server) + (p.netns,)
            if key not in self.clients:
                if p.server is None:
                    raise UserError(f"generator pair {p.index}: no TRex server (trex_server or $TREX_SERVER)")
                self.clients[key] = TrexClient(p.server, timeout=timeout, netns=p.netns)
            self.groups.setdefault(key, []).append(p)
        # TRex's client library only: stream JSON (a Runner's, when a sweep's runner holds one)
        self._own_worker = worker is None
        self._worker = worker or TrexClient()
        self._tmp = tempfile.TemporaryDirectory(prefix="gtplab-pairs-")
        self._macs: dict[tuple, dict] = {}
        self.on_start: Callable[[], None] | None = None

    def connect(self) -> None:
        for c in self.clients.values():
            c.connect()

    def close(self) -> None:
        try:
            for c in self.clients.values():
                try:
                    c.disconnect()
                except Exception:       # noqa: BLE001 -- a server gone: its worker is still ended
                    c.close()
        finally:
            if self._own_worker:
                self._worker.close()
            self._tmp.cleanup()

    def __enter__(self):
        self.connect()
        return self

    def __exit__(self, *exc):
        self.close()

    def prepare(self, direction: str, tunables: dict, csum: str = "default") -> list[PairPrep]:
        """Each pair's streams and the DUT's bearers (all pairs' in one file, loaded once; csum: the
        bearers' outer UDP checksum, as `gtplab bearers --csum`)."""
        tuns = split_tunables(tunables, self.pairs, direction)
        path = os.path.join(self._tmp.name, "bearers.txt")
        lines = []
        for p, t in zip(self.pairs, tuns):
            part = os.path.join(self._tmp.name, f"bearers-{p.index}.txt")
            bearer_files.write_bearer_file(direction, t, part, csum=csum)
            with open(part) as f:
                lines += [x for x in f if not x.startswith("#")]
        with open(path, "w") as f:
            f.writelines(lines)
        self.install_bearers(path)
        out = []
        for p, t in zip(self.pairs, tuns):
            tx, rx = p.ports(direction)
            try:
                streams = self._worker.profile_streams(os.path.join(PROFILES_DIR, f"gtpu_{direction}.py"),
                                                       port_id=tx, tunables=t)
            except TrexError as e:
                raise UserError(f"profile gtpu_{direction}.py {t}: {e}") from None
            out.append(PairPrep(p, t, streams, tx, rx, direction))
        return out

    def _key(self, p: Pair) -> tuple:
        return _server_key(p.server) + (p.netns,)

    def _all_stats(self) -> dict[tuple, dict]:
        return {k: c.get_stats() for k, c in self.clients.items()}

    def _settled(self, preps: list[PairPrep]) -> dict[tuple, dict]:
        """Every server's counters and the DUT's, unchanged over SETTLE_STEP_S (at most SETTLE_MAX_S)."""
        def rxs(st):
            return [st[self._key(q.pair)][q.rx]["ipackets"] for q in preps]
        t0 = time.monotonic()
        st, cnt = self._all_stats(), self.dut_counters()
        while time.monotonic() - t0 < SETTLE_MAX_S:
            time.sleep(SETTLE_STEP_S)
            st2, cnt2 = self._all_stats(), self.dut_counters()
            if rxs(st2) == rxs(st) and cnt2 == cnt:
                return st2
            st, cnt = st2, cnt2
        return st

    def _together(self, fn: Callable[[tuple, TrexClient, list[int]], None], preps: list[PairPrep]) -> dict:
        """fn(key, client, its pairs' tx ports) for every server, in threads released together;
        {key: monotonic time its call returned}; the first error is raised."""
        keys = list(self.clients)
        gate = threading.Barrier(len(keys))
        done, errors = {}, []

        def run(k):
            try:
                gate.wait()
                fn(k, self.clients[k], [q.tx for q in preps if self._key(q.pair) == k])
                done[k] = time.monotonic()
            except BaseException as e:     # noqa: BLE001 -- raised below, in the caller's thread
                errors.append(e)
        threads = [threading.Thread(target=run, args=(k,)) for k in keys]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return done

    def trial(self, preps: list[PairPrep], rate_pps: float, duration: float) -> dict[str, Any]:
        """One trial: every pair at rate_pps (each; None: as fast as each goes, 100 %), started
        together, for duration seconds."""
        direction = preps[0].direction
        mult = "100%" if rate_pps is None else f"{max(rate_pps, 1.0):.0f}pps"
        for k, c in self.clients.items():
            mine = [q for q in preps if self._key(q.pair) == k]
            c.reset(ports=sorted({n for q in mine for n in (q.pair.access, q.pair.sgi)}))
            for q in mine:
                c.add_streams(q.streams, ports=[q.tx])
            c.clear_stats()
            if k not in self._macs:
                self._macs[k] = c.port_macs()
        caps = {}
        for k, c in self.clients.items():
            mine = [q for q in preps if self._key(q.pair) == k]
            dport = mine[0].tunables.get("dport", trex_background.DEFAULT_DPORT)
            caps[k] = c.background_start(sorted({n for q in mine for n in (q.tx, q.rx)}),
                                         trex_background.capture_filter(direction, dport),
                                         limit=trex_background.CAPTURE_LIMIT,
                                         snaplen=trex_background.CAPTURE_SNAPLEN)
        cnt0 = self.dut_counters()
        t0 = time.monotonic()
        stopped = None
        try:
            started = self._together(lambda k, c, tx: c.start(ports=tx, mult=mult, duration=-1, force=True), preps)
            first = {k: c.get_stats() for k, c in self.clients.items()}
            tf = time.monotonic()
            if self.on_start:
                self.on_start()
            time.sleep(max(0.0, duration - (time.monotonic() - t0)))
            last = {k: c.get_stats() for k, c in self.clients.items()}
            tl = time.monotonic()
            stopped = self._together(lambda k, c, tx: c.stop(ports=tx), preps)
        finally:
            if stopped is None:         # a start or a read failed: no pair keeps sending
                for k, c in self.clients.items():
                    try:
                        c.stop(ports=[q.tx for q in preps if self._key(q.pair) == k])
                    except Exception:   # noqa: BLE001 -- the first error is the one raised
                        pass
        self._settled(preps)
        bgs = {k: c.background_fetch(caps[k]["id"]) for k, c in self.clients.items()}
        st = self._settled(preps)      # what arrived while the captures stopped
        cnt1 = self.dut_counters()
        dd = conservation.DutDelta.from_counters(cnt0, cnt1)
        per_pair, errors = [], []
        for q in preps:
            k = self._key(q.pair)
            s = st[k]
            b = trex_background.count(bgs[k], q.tx, q.rx, self._macs[k])
            errors += b["errors"]
            bg = conservation.Background(gen_rx=dict(b["gen_rx"]), to_dut_in=dict(b["to_dut_in"]),
                                         to_dut_other=dict(b["to_dut_other"]))
            tx_p, rx_all = s[q.tx]["opackets"], s[q.rx]["ipackets"]
            sent = last[k][q.tx]["opackets"] - first[k][q.tx]["opackets"]
            per_pair.append({"pair": q.pair.index, "server": q.pair.server,
                             **({"netns": q.pair.netns} if q.pair.netns else {}), "tx_port": q.tx, "rx_port": q.rx,
                             "gen_tx": tx_p, "gen_rx_all": rx_all, "background": bg,
                             "offered_pps": sent / (tl - tf) if tl > tf else None})
        cons = aggregate(per_pair, dd)
        if errors:
            cons.ok = False
            cons.errors += errors
        tx_sum = sum(p["gen_tx"] for p in per_pair)
        rx_sum = cons.gen_rx
        pairs_out = [{**{k: v for k, v in p.items() if k not in ("background", "gen_rx_all")},
                      "tx_packets": p["gen_tx"], "rx_packets": p["gen_rx_all"] - p["background"].n_gen_rx,
                      "background": p["background"].as_dict()} for p in per_pair]
        for p in pairs_out:
            p.pop("gen_tx")
        starts = [started[k] for k in self.clients]
        return {"direction": direction, "rate_asked_pps_per_pair": rate_pps, "duration_s": duration,
                "tx_packets": tx_sum, "rx_packets": rx_sum,
                "loss_ratio": (tx_sum - rx_sum) / tx_sum if tx_sum else None,
                "offered_pps": sum(p["offered_pps"] or 0.0 for p in per_pair),
                "start_skew_s": max(starts) - min(starts),
                "stop_skew_s": max(stopped.values()) - min(stopped.values()),
                "dut": {"rx_packets": cons.dut_rx, "fwd_packets": dd.fwd_packets, "drop_packets": dd.drop_packets,
                        "drops_by_reason": dd.drops_by_reason, "passed_by_reason": dd.passed_by_reason},
                "conservation": cons.as_dict(), "pairs": pairs_out}


# ------------------------------------------------------------------------------------------ the sweep

class PairsBackend:
    """What `gtplab sweep` sees of several pairs' TRex servers in place of a Backend (its run record,
    its teardown): no namespace lab and no one client; PairsSweepRunner holds a client per server.
    Also its own Setup: open() returns it (nothing is built)."""

    kind = "trex"
    lab = None
    client = None

    def __init__(self, pairs: list[Pair]):
        self.pairs = pairs

    def open(self) -> "PairsBackend":
        return self

    def close(self, disconnect: bool = True) -> None:
        pass


@dataclass
class PairsPrepared(Prepared):
    """A sweep case prepared over several pairs: the case's (Prepared, its tx and rx ports those of
    pair 0) and each pair's streams and tunables (PairsRunner.prepare)."""
    pairs: list[PairPrep] | None = None


def sweep_trial(t: dict[str, Any], rate_pps: float | None, frame_size: int) -> dict[str, Any]:
    """A PairsRunner trial in the shape of a Runner trial (what the sweep's search, records and
    report read): rate_pps, offered and received are the pairs' aggregate; the sums, their balance
    and each pair's figures as PairsRunner records them (t["pairs"]). What is not measured over
    several pairs is None: latency, the DUT's ingress rings, its CPU, the host's disturbance."""
    n = len(t["pairs"])
    tx, rx, offered = t["tx_packets"], t["rx_packets"], t["offered_pps"]
    d = t["dut"]
    dd = conservation.DutDelta(d["rx_packets"] or 0, d["fwd_packets"], dict(d["drops_by_reason"]),
                               dict(d["passed_by_reason"]))
    gen_bound, limit = trial_limit(rate_pps, offered, dd, tx - rx)
    rx_pps = offered * rx / tx if tx else 0.0
    w_tx, w_rx = wire_rates(offered, frame_size), wire_rates(rx_pps, frame_size)
    return {
        "rate_asked": "100%" if rate_pps is None else f"{max(rate_pps, 1.0):.0f}pps", "rate_asked_pps": rate_pps,
        "rate_split": {"pairs": n, "how": "even", "per_pair_pps": t["rate_asked_pps_per_pair"]},
        "duration_s": t["duration_s"],
        "offered_pps": offered, "offered_bps_l1": w_tx["gbps_l1"] * 1e9, "offered_bps_l2": w_tx["gbps_l2"] * 1e9,
        "rx_pps": rx_pps, "rx_bps_l1": w_rx["gbps_l1"] * 1e9, "rx_bps_l2": w_rx["gbps_l2"] * 1e9,
        "tx_packets": tx, "rx_packets": rx, "loss_ratio": t["loss_ratio"],
        "latency_us": {k: None for k in ("min", "avg", "p50", "p99", "max")},
        "generator_bound": gen_bound, "limit": limit,
        "loss": {"dut_ingress_ring": None, "dut_dropped": dd.drop_packets, "generator_ingress_ring": None},
        "dut": {**d, "ns_per_packet": None, "cpu_seconds": None, "cpus_busy_seconds": None, "bpf_stats": None,
                "cpu_source": None, "cpu_ns_per_packet": None},
        "conservation": t["conservation"], "pcap": None, "streams": None, "rate_measured": None,
        "settle": {}, "rx_path": None, "host": dict(HOST_UNMEASURED),
        "start_skew_s": t["start_skew_s"], "stop_skew_s": t["stop_skew_s"], "pairs": t["pairs"],
    }


class PairsSweepRunner(Runner):
    """The sweep's Runner over several generator port pairs (docs/ansible.md, "Several generator port
    pairs"): a case is prepared on every pair (its bearers split between them, all loaded on the DUT
    at once) and each trial, at a fixed rate or one the search asks, drives every pair together at an
    even share of it (PairsRunner.trial); the record is a Runner trial's (sweep_trial). The rest of
    the Runner (case costs, the DUT probe: the lab config's dut.metrics_url and dut.ssh) is its own."""

    def __init__(self, cfg):
        super().__init__(PairsBackend(cfg.generators), cfg)
        try:
            self.pairs = PairsRunner(cfg.generators, self.dut.counters, self.dut.install_bearers,
                                     worker=self._worker)
            self.pairs.connect()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            if getattr(self, "pairs", None) is not None:
                self.pairs.close()
        finally:
            super().close()

    def prepare(self, p) -> PairsPrepared:
        tun = p.tunables()
        preps = self.pairs.prepare(p.direction, tun, csum=p.checksum)
        return PairsPrepared(p, preps[0].tx, preps[0].rx, tun, False, [], pairs=preps)

    def trial(self, prep: PairsPrepared, rate_pps: float | None, duration: float,
              capture: str | None = None, capture_limit: int = 64) -> dict[str, Any]:
        """Every pair at rate_pps / pairs (None: each flat out), together (PairsRunner.trial). No
        capture: the sweep refuses pcap_limit over several pairs before it starts."""
        if capture:
            raise UserError("a capture over several generator pairs is not built (pcap_limit 0)")
        self.pairs.on_start = self.on_start
        n = len(prep.pairs)
        t = self.pairs.trial(prep.pairs, None if rate_pps is None else rate_pps / n, duration)
        return sweep_trial(t, rate_pps, prep.params.actual_size)
