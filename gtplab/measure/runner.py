"""Run traffic through a lab and measure it: the part the sweep and the test suite share.

    runner = Runner(backend, lab_config)             # backend: gtplab.traffic.backend.Backend (local or trex)
    prep = runner.prepare(CaseParams(direction="uplink", frame_size=128, ...))   # bearers + streams
    t = runner.trial(prep, rate_pps=200e3, duration=1.0)     # one trial: rates, loss, DUT, conservation

CaseParams (one case) is gtplab.measure.plan's, which builds them from a sweep spec; the NDR/PDR
search that calls trial() at each rate is gtplab.measure.search.

A trial sends one direction only, so every DUT counter that moves during it belongs to that direction
(the embedded lab has permanent neighbours and no IPv6: nothing else flows). Its packet conservation
(gtplab/measure/conservation.py) is checked and kept with it.

The DUT is read through a probe: LocalDut (the lab's PGW-U or reference forwarder: pinned maps and
programs, the veths' XDP counters, the CPU time of the DUT's own NAPI kthreads) or MetricsDut (a remote
PGW-U's `pgwu metrics` and node-exporter URLs).

Which side limited a trial is part of its result: "generator" when the generator did not send the
rate asked (offered < GENERATOR_BOUND_RATIO x asked), or when packets were lost on their way back into
the generator (its receive ring); "dut" when the loss was the DUT's (its receive ring overflowed, or
it dropped them).

Used by gtplab.measure.sweep (every case), the throughput tests and bench/; the DUT probes are
gtplab.dut.local and gtplab.dut.metrics.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from gtplab.dut import PROG
from gtplab.dut.probe import DutProbe, make_dut
from gtplab.dut.reference import Reference
from gtplab.errors import UserError, note_cleanup
from gtplab.gtpu import bearers as bearer_files
from gtplab.measure import conservation, rxpath
from gtplab.measure.plan import SGWS, CaseParams, common
from gtplab.observe.host import HostMonitor
from gtplab.pfcp.provision import packets_per_bearer, usage_differences
from gtplab.rates import L1_OVERHEAD
from gtplab.traffic.trex import background as trex_background
from gtplab.traffic.trex.client import TrexClient, TrexError

PROFILES_DIR = Path(__file__).resolve().parents[2] / "trex_profiles"
PG_ID = {"uplink": 10, "downlink": 20}
# A trial whose achieved rate is below this fraction of the rate asked was set by the generator: the
# engine's pacing is within 1 % of the rate asked when it can reach it (docs/lab.md, measured).
GENERATOR_BOUND_RATIO = 0.97
# TRex: latency is measured on a stream of its own at this rate (TRex sends a latency stream from its
# receive core at the stream's own rate, whatever the multiplier), beside the case's traffic, which
# then carries no latency header; the stream's pps is TRex's, the multiplier scales only the others.
TREX_LATENCY_PPS = 1000
TREX_SAMPLE_S = 0.05          # how often a TRex trial reads TRex's counters to measure its rate
# A case's costs (case_costs) are measured apart from its search, in short trials at one load: this
# share of the case's result, below what the DUT and the reference forwarder both carry without loss,
# or COST_FALLBACK_PPS when the case found none (docs/lab.md, "What the lab can resolve").
COST_TRIAL_S = 0.3
COST_LOAD_SHARE = 0.5
COST_FALLBACK_PPS = 100e3


@dataclass
class Prepared:
    params: CaseParams
    tx_port: int
    rx_port: int
    tunables: dict[str, Any]
    latency: bool
    streams: list[dict]



# ------------------------------------------------------------------------------------------ runner

def _cost_difference(a: float | None, b: float | None, what: str, notes: list[str]) -> float | None:
    """a - b, two trials' CPU ns/packet: None when either is missing, or when it is below zero, which
    no cost can be: the two trials' spread was larger than the difference (a note gives the figures)."""
    if a is None or b is None:
        return None
    if a < b:
        notes.append(f"{what}: {a:.1f} - {b:.1f} = {a - b:.1f} ns/packet, below zero: the trials' spread is "
                     "larger than the difference, which is not measured")
        return None
    return a - b


class Runner:
    """Prepares cases (bearers, streams) and runs trials on a connected backend."""

    def __init__(self, backend, cfg, dut: DutProbe | None = None):
        # the TRex library's bundled Scapy warns about deprecated ciphers on import: not ours to fix
        os.environ.setdefault("PYTHONWARNINGS", "ignore")
        self.backend = backend
        self.client = backend.client
        self.cfg = cfg
        if dut is None:
            dut = make_dut(backend, cfg)          # dut.provision / dut.counters
        self.dut: DutProbe = dut
        # this thread (reading counters, running ethtool and pgwu) works for the generator: keep it,
        # and what it starts, off the DUT's CPUs
        lab = getattr(backend, "lab", None)
        self._affinity = lab.pin_generator() if lab is not None else None
        self._lab = lab
        self.host: HostMonitor | None = None
        if lab is not None:
            lab.keep_cpus_awake(getattr(cfg, "lab", {}).get("awake", "auto"))
            if lab.cpus is not None:
                self.host = HostMonitor(lab)
        self._reference = None               # gtplab.dut.reference.Reference, made by case_costs
        self._worker = TrexClient()          # TRex's client library in a subprocess: stream JSON
        self._streams: dict[tuple, list[dict]] = {}
        self._bearers_key: tuple | None = None
        self.volume_sent: dict[int, list[int]] = {}     # bearer -> [uplink, downlink] inner IP octets
        self.volume_received = [0, 0]
        self._tmp = tempfile.TemporaryDirectory(prefix="gtplab-runner-")
        # optional: a function returning the generator's CPU seconds so far (bench/trex_vs_engine.py);
        # read right before the traffic starts and right after it stopped
        self.generator_cpu: Callable[[], float] | None = None
        # optional: called once a trial's traffic has started (tests put background frames on the
        # links then: tests/measure/test_background.py)
        self.on_start: Callable[[], None] | None = None
        self._trex_macs: dict | None = None        # TRex: each port's own MAC (background frames)
        self.background_unmeasured: str | None = None   # TRex refused the background capture: why

    def close(self) -> None:
        try:
            try:
                self._worker.close()
            finally:
                self.dut.close()
                if self._reference is not None:
                    self._reference.close()
        finally:
            self._restore()

    def _restore(self) -> None:
        self._tmp.cleanup()
        if self._affinity:
            os.sched_setaffinity(0, self._affinity)
            self._affinity = None
        if self._lab is not None:
            self._lab.restore_cpu_idle()
            self._lab = None

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        try:
            self.close()
        except Exception as e:
            if exc is None:
                raise
            note_cleanup(exc, f"closing the DUT: {e}")    # the run's error stays the one raised

    def ports(self, direction: str) -> tuple[int, int]:
        a, s = self.cfg.port("access"), self.cfg.port("sgi")
        return (a, s) if direction == "uplink" else (s, a)

    def streams(self, direction: str, tunables: dict, port: int) -> list[dict]:
        key = (direction, port, tuple(sorted(tunables.items())))
        if key not in self._streams:
            try:
                self._streams[key] = self._worker.profile_streams(
                    str(PROFILES_DIR / f"gtpu_{direction}.py"), port_id=port, tunables=tunables)
            except TrexError as e:
                raise UserError(f"profile gtpu_{direction}.py {tunables}: {e}") from None
        return self._streams[key]

    def install_bearers(self, p: CaseParams, tunables: dict) -> None:
        """The bearers of the profile's tunables, through `gtplab bearers`' writer and `pgwu session
        load` (only when they differ from what is installed)."""
        key = (p.n_bearers, SGWS, p.checksum, p.ip, p.n3)    # ip 6/4v6: the lines carry ue6=, n3 6 sgw6=
        if key == self._bearers_key:
            return
        path = os.path.join(self._tmp.name, "bearers.txt")
        bearer_files.write_bearer_file(p.direction, tunables, path, csum=p.checksum)
        self._bearers_key = None
        self.dut.install_bearers(path)
        self._bearers_key = key

    def _count_volume(self, p: CaseParams, sent: int, received: int) -> None:
        """Octets of inner IP packets per bearer, for the PFCP usage reports (dut.pfcp.urr)."""
        pf = getattr(self.dut, "cfg", None)
        if not getattr(pf, "urr", False):
            return
        c = common()
        ip_len = p.actual_size - c.FCS_LEN - c.ETH_LEN - (c.outer_len(p.n3) if p.direction == "uplink" else 0)
        k = 0 if p.direction == "uplink" else 1
        flows = p.flows if p.flow_mode == "multi" else 1
        for i, n in enumerate(packets_per_bearer(sent, flows)):
            v = self.volume_sent.setdefault(i, [0, 0])
            v[k] += n * ip_len
        self.volume_received[k] += received * ip_len

    def usage_comparisons(self) -> list[dict]:
        """After close(): the PFCP usage reports against the generator's octets (docs/pfcp.md)."""
        usage = getattr(self.dut, "usage", None)
        if not usage:
            return []
        return [usage_differences(usage, {i: tuple(v) for i, v in self.volume_sent.items()},
                                  tuple(self.volume_received))]

    def provisioned_tunables(self, p: CaseParams, tun: dict) -> dict:
        """A PFCP-provisioned UPF (gtplab/dut/pfcp.py): the uplink goes to its N3 address, with the
        TEIDs it chose (the bearer file written from its answers, as --teid-file)."""
        pf = getattr(self.dut, "cfg", None) if getattr(self.dut, "teid_file", None) else None
        if pf is None or p.direction != "uplink":
            return tun
        if p.n3 == "6":
            tun = dict(tun, pgw_addr6=pf.n3_6)
        if pf.n3:
            tun = dict(tun, pgw_addr=pf.n3)
        if pf.choose:
            tun["teid_file"] = self.dut.teid_file
        return tun

    def prepare(self, p: CaseParams) -> Prepared:
        tx, rx = self.ports(p.direction)
        tun = p.tunables()
        pf = getattr(self.dut, "cfg", None)
        if p.n3 == "6" and hasattr(pf, "n3_6") and not pf.n3_6:
            # before the sessions: each would need the UPF's N3 IPv6 address (F-TEID V6)
            raise UserError("--n3 6: dut.pfcp.n3 has no IPv6 address of the UPF (give [IPV4, IPV6]; docs/pfcp.md)")
        self.install_bearers(p, tun)
        tun = self.provisioned_tunables(p, tun)
        if self.backend.kind == "trex" and tun["stats"] == "latency" and p.n3 == "6" and p.direction == "uplink":
            # its latency stream's UDP checksums are zeroed (no_l4_checksums), which IPv6 does not allow
            raise UserError("--n3 6 on TRex: its uplink latency stream cannot keep the outer UDP checksum over IPv6 "
                            "(gtplab.measure.runner.no_l4_checksums); run it with --no-latency")
        if self.backend.kind == "trex" and tun["stats"] == "latency":
            streams = self.streams(p.direction, {**tun, "stats": "none"}, tx) + self.trex_latency_streams(
                p.direction, tun, tx)
        else:
            streams = self.streams(p.direction, tun, tx)
        return Prepared(p, tx, rx, tun, tun["stats"] == "latency", streams)

    def trex_latency_streams(self, direction: str, tun: dict, port: int) -> list[dict]:
        """The case's profile, one flow, with TRex's latency header (pg_id PG_ID[direction]), at
        TREX_LATENCY_PPS: a latency stream of TRex runs at its own rate, so it goes beside the case's
        traffic (TRex counts it in the port's packets, as the DUT does)."""
        t = {**tun, "stats": "latency", "flow_mode": "single", "bearers": 1}
        t.pop("flows", None)
        out = []
        for s in self.streams(direction, t, port):
            s = json.loads(json.dumps(s))
            s["name"] = f"{s.get('name') or direction}_latency"
            s["mode"]["rate"] = {"type": "pps", "value": TREX_LATENCY_PPS}
            if direction == "uplink":
                no_l4_checksums(s)
            out.append(s)
        return out

    def _wait(self, ports, duration: float) -> None:
        try:
            self.client.wait_on_traffic(ports=ports, timeout=max(30.0, 3 * duration + 10),
                                        rx_delay_ms=50)
        except TypeError:           # TRex's wait_on_traffic has no rx_delay_ms
            self.client.wait_on_traffic(ports=ports, timeout=max(30.0, 3 * duration + 10))
            time.sleep(0.1)

    # how long the counters may take to hold still after the generator stopped: a vCPU stall on a busy
    # host holds frames in the DUT's ring for tens of ms (docs/lab.md); 20 ms without a change is still
    SETTLE_STEP_S = 0.02
    SETTLE_MAX_S = 2.0

    def _settled_stats(self, rx: int) -> dict:
        """Stats once the frames in flight have arrived: the generator's receive counter and the
        DUT's own counters both unchanged over SETTLE_STEP_S (the generator's alone may hold still
        while a stalled DUT CPU still holds frames it then forwards: read after them, the DUT would
        count more than the generator got). self.settled records whether they held still within
        SETTLE_MAX_S and how long it took."""
        t0 = time.monotonic()
        st, cnt = self.client.get_stats(), self._dut_counts()
        while time.monotonic() - t0 < self.SETTLE_MAX_S:
            time.sleep(self.SETTLE_STEP_S)
            st2, cnt2 = self.client.get_stats(), self._dut_counts()
            if st2[rx]["ipackets"] == st[rx]["ipackets"] and cnt2 == cnt:
                self.settled = {"settled": True, "s": round(time.monotonic() - t0, 3)}
                return st2
            st, cnt = st2, cnt2
        self.settled = {"settled": False, "s": round(time.monotonic() - t0, 3)}
        return st

    def _dut_counts(self):
        """The DUT's counters for settling: an XDP DUT's maps, read cheaply here (None for the socket
        path, whose counters settle themselves when read, and for a DUT read over the network or not
        at all: the generator's counter alone decides)."""
        if getattr(self.dut, "kind", None) != "local" or getattr(self.dut, "sock", None) is not None:
            return None
        try:
            return self.dut.counters()
        except Exception:       # noqa: BLE001 -- settling must not fail a trial; the read after it will say
            return None

    def trial(self, prep: Prepared, rate_pps: float | None, duration: float,
              capture: str | None = None, capture_limit: int = 64) -> dict[str, Any]:
        """One trial at rate_pps (None: as fast as the generator goes, mult 100%)."""
        p, tx, rx = prep.params, prep.tx_port, prep.rx_port
        mult = "100%" if rate_pps is None else f"{max(rate_pps, 1.0):.0f}pps"
        c = self.client
        # reset + add per trial: a fresh start of the streams (the engine restarts a stream's
        # counters on start, so a clear_stats baseline would not survive a second start)
        c.reset(ports=[self.cfg.port("access"), self.cfg.port("sgi")])
        c.add_streams(prep.streams, ports=[tx])
        c.clear_stats()
        cnt0, link0, prog0, cpu0 = self.dut.counters(), self.dut.link(), self.dut.prog_stats(), self.dut.cpu_seconds()
        rx0 = self.dut.rx_path()
        cap = c.start_capture(rx_ports=[rx], limit=capture_limit) if capture else None
        bgcap = self._trex_background_start(prep)
        measured, ran = None, False
        gcpu = self.generator_cpu
        g0, w0 = (gcpu(), time.monotonic()) if gcpu else (None, None)
        h0 = self.host.snapshot() if self.host else None
        try:
            if self.backend.kind == "trex":
                measured = self._trex_run(tx, mult, duration)
            else:
                c.start(ports=[tx], mult=mult, duration=duration, force=True)
                if self.on_start:
                    self.on_start()
                self._wait([tx], duration)
            h1 = self.host.snapshot() if self.host else None
            gen_cpu = {"cpu_s": gcpu() - g0, "wall_s": time.monotonic() - w0} if gcpu else None
            st = self._settled_stats(rx)
            if measured is not None and link0 is not None:
                st = self._trex_caught_up(st, rx, p.direction, link0)
            ran = True
        finally:
            if cap:
                c.stop_capture(cap["id"], output=capture)
            try:            # the capture is stopped also when the trial failed; its error then wins
                bg = self._trex_background_fetch(bgcap, tx, rx)
            except TrexError:
                if ran:
                    raise
        if bg is not None:
            # what arrived while the capture stopped is in TRex's counters once they settle again
            st = self._settled_stats(rx)
            trex_background_into(st, tx, rx, bg)
        cnt1, link1, prog1, cpu1 = self.dut.counters(), self.dut.link(), self.dut.prog_stats(), self.dut.cpu_seconds()
        rx1 = self.dut.rx_path()
        if measured is None and getattr(self.dut, "mode", None) == "socket":
            # the socket path may still have been forwarding what its sockets held when the
            # generator's counters first held still; its own counters are read once it is idle
            # (LocalDut.counters): what it forwarded has arrived by now
            st = self._settled_stats(rx)
        self._count_volume(p, st[tx]["opackets"],
                           st[rx]["ipackets"] - sum((st[rx].get("background") or {}).values()))
        if measured is not None:
            self._trex_rates(st, tx, rx, measured)
        res = self._result(prep, mult, rate_pps, duration, st, (cnt0, cnt1), (link0, link1),
                           (prog0, prog1), (cpu0, cpu1), capture)
        res["settle"] = dict(getattr(self, "settled", None) or {})
        if gen_cpu:
            res["generator_cpu"] = gen_cpu
        lay = self.dut.layout()
        res["rx_path"] = rxpath.delta(rx0, rx1, lay["dut"] if lay else None)
        rxpath.summarize(res)
        res["host"] = self.host.figures(h0, h1) if self.host else dict(HOST_UNMEASURED)
        return res

    def case_costs(self, prep: Prepared, load_pps: float | None, duration: float = COST_TRIAL_S) -> dict[str, Any]:
        """What the DUT costs per packet at one load, measured apart from the search, so that no search
        trial pays for the measuring (docs/lab.md, "What the lab can resolve"). Three short trials at
        load_pps x COST_LOAD_SHARE (COST_FALLBACK_PPS without a load):
          1. the DUT as the search ran it (no bpf_stats): its CPU ns/packet on the DUT's CPUs;
          2. the embedded lab's PGW-U only: the reference forwarder swapped in on the same links
             (gtplab.dut.reference): its CPU ns/packet; the DUT's cost above the reference is 1 - 2;
          3. the DUT with bpf_stats on: its XDP program's ns/packet (run_time_ns / run_cnt), and what
             the kernel's run-time accounting costs per packet here (3 - 1: two clock reads per
             packet, kvm_sched_clock/pvclock in a VM).
        Returns the figures, each trial's host record (disturbed: not evidence) and notes."""
        load = (load_pps or COST_FALLBACK_PPS) * (COST_LOAD_SHARE if load_pps else 1.0)
        out: dict[str, Any] = {"load_pps": round(load), "duration_s": duration, "notes": []}

        def cpu(t):
            return (t.get("dut") or {}).get("cpu_ns_per_packet")
        base = self.trial(prep, load, duration)
        trials = {"dut": base}
        lab = self._lab
        if lab is not None and lab.dut_mode == "pgwu" and self.backend.kind == "local":
            if self._reference is None:
                self._reference = Reference(lab)
            dut = self.dut
            with self._reference.swapped() as probe:
                self.dut = probe
                try:
                    trials["reference"] = self.trial(prep, load, duration)
                finally:
                    self.dut = dut
        else:
            mode = lab.dut_mode if lab is not None else None
            out["notes"].append("no reference forwarder to swap in: "
                                + ("the DUT is the reference" if mode == "fwd" else
                                   "the socket path's lab swaps none in (its XDP_PASS programs are not the "
                                   "PGW-U's links; the sweep's --dut fwd measures the forwarder on the same "
                                   "layout)" if mode == "socket" else
                                   "only the embedded lab's XDP PGW-U has one"))
        with self.dut.bpf_stats():
            trials["dut_bpf_stats"] = self.trial(prep, load, duration)
        d, r, s = cpu(base), cpu(trials.get("reference", {})), cpu(trials["dut_bpf_stats"])
        out.update({
            "dut_cpu_ns_per_packet": d, "reference_cpu_ns_per_packet": r,
            "above_reference_ns_per_packet": _cost_difference(d, r, "the DUT's CPU ns/packet above the reference "
                                                              "forwarder's", out["notes"]),
            "xdp_ns_per_packet": trials["dut_bpf_stats"]["dut"]["ns_per_packet"],
            "bpf_stats_ns_per_packet": _cost_difference(s, d, "bpf_stats's cost (the DUT's CPU ns/packet with it "
                                                        "less without)", out["notes"]),
            "trials": [{"what": k, "offered_pps": t["offered_pps"], "loss_ratio": t["loss_ratio"],
                        "cpu_ns_per_packet": cpu(t), "ns_per_packet": t["dut"]["ns_per_packet"],
                        "bpf_stats": t["dut"].get("bpf_stats"), "host": t.get("host")} for k, t in trials.items()],
        })
        if base["dut"].get("bpf_stats"):
            out["notes"].append("bpf_stats was on during the DUT's trial without it (another process on this "
                                "host held BPF_ENABLE_STATS): bpf_stats_ns_per_packet is not measured")
            out["bpf_stats_ns_per_packet"] = None
        bad = [k for k, t in trials.items() if (t.get("host") or {}).get("disturbed")]
        out["disturbed"] = bool(bad)
        if bad:
            out["notes"].append(f"cost trial(s) {', '.join(bad)} disturbed by the host: these costs are not "
                                "evidence about the DUT")
        return out

    def _trex_run(self, tx: int, mult: str, duration: float) -> dict:
        """TRex: the streams run continuously for `duration` seconds, then stop. TRex on af_packet
        does not always reach the rate asked, and then sends the packets of a timed run late
        (pps x duration of them, over a longer time): so the run is stopped after `duration`, and its
        rate is measured from TRex's transmit counter read every TREX_SAMPLE_S while it runs
        (packets over elapsed time, between the first and the last reading)."""
        c = self.client
        t0 = time.monotonic()
        c.start(ports=[tx], mult=mult, duration=-1, force=True)
        if self.on_start:
            self.on_start()
        samples = []
        try:
            while True:
                a = time.monotonic()
                o = c.get_stats(ports=[tx])[tx]["opackets"]
                b = time.monotonic()
                samples.append(((a + b) / 2 - t0, o))
                if b - t0 >= duration:
                    break
                time.sleep(min(TREX_SAMPLE_S, max(0.0, duration - (b - t0))))
        finally:
            c.stop(ports=[tx])
        time.sleep(0.05)
        (ta, oa), (tb, ob) = samples[0], samples[-1]
        if len(samples) >= 3 and samples[1][1] > 0:
            (ta, oa) = samples[1]
        rate = (ob - oa) / (tb - ta) if tb > ta and ob > oa else (ob / tb if tb > 0 else 0.0)
        return {"tx_pps": rate, "elapsed_s": tb, "samples": len(samples)}

    def _trex_background_start(self, prep: Prepared) -> dict | None:
        """TRex: a capture of every frame on both ports that is not the test's (gtplab/traffic/trex/
        background.py), for the trial's background by kind; None for the engine, which counts it
        itself. A TRex that cannot capture with a filter leaves the background unmeasured (as before)."""
        if self.backend.kind != "trex":
            return None
        p, tx, rx = prep.params, prep.tx_port, prep.rx_port
        try:
            if self._trex_macs is None:
                self._trex_macs = self.client.port_macs()
            dport = prep.tunables.get("dport", trex_background.DEFAULT_DPORT)
            return self.client.background_start([tx, rx], trex_background.capture_filter(p.direction, dport),
                                                limit=trex_background.CAPTURE_LIMIT,
                                                snaplen=trex_background.CAPTURE_SNAPLEN)
        except TrexError as e:
            self.background_unmeasured = str(e)
            return None

    def _trex_background_fetch(self, bgcap: dict | None, tx: int, rx: int) -> dict | None:
        if bgcap is None:
            return None
        return trex_background.count(self.client.background_fetch(bgcap["id"]), tx, rx, self._trex_macs)

    def _trex_caught_up(self, st: dict, rx: int, direction: str, link0: dict, timeout: float = 2.0) -> dict:
        """TRex's counters lag (it refreshes them periodically: two equal readings 20 ms apart were
        seen 5024 packets short once): read them until TRex has counted every frame that reached its
        receiving port by the kernel's count (the port's XDP packets), or `timeout`. What is still
        missing then was lost in TRex's af_packet receive ring (see _result)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            arrived = self.dut.link_delta(link0, self.dut.link(), direction)["gen_port_rx"]
            if st[rx]["ipackets"] >= arrived:
                break
            time.sleep(0.1)
            st = self.client.get_stats()
        return st

    @staticmethod
    def _trex_rates(st: dict, tx: int, rx: int, m: dict) -> None:
        """Replace TRex's smoothed rates by the measured one (rx and bit rates in proportion)."""
        t, r = st[tx], st[rx]
        tx_p, rx_p = t["opackets"], r["ipackets"]
        pps = m["tx_pps"]
        avg = t["obytes"] / tx_p if tx_p else 0.0
        t["tx_pps"], t["tx_bps"], t["tx_bps_L1"] = pps, pps * avg * 8, pps * (avg + L1_OVERHEAD) * 8
        rpps = pps * rx_p / tx_p if tx_p else 0.0
        ravg = r["ibytes"] / rx_p if rx_p else 0.0
        r["rx_pps"], r["rx_bps"], r["rx_bps_L1"] = rpps, rpps * ravg * 8, rpps * (ravg + L1_OVERHEAD) * 8
        st["measured"] = m

    def _result(self, prep, mult, rate_pps, duration, st, cnt, link, prog, cpu, capture) -> dict[str, Any]:
        p, tx, rx = prep.params, prep.tx_port, prep.rx_port
        ld = self.dut.link_delta(*link, p.direction) if link[0] is not None else None
        if ld and self.backend.kind == "trex":
            # frames that reached TRex's port (kernel count) but not TRex: dropped by its af_packet
            # socket's ring, the generator's own receive loss like a veth ring overflow
            ld["lost_out"] += max(0, ld["gen_port_rx"] - st[rx]["ipackets"])
        bg = background(st, tx, rx)
        # dut.counters kernelpath: a UPF on the kernel's path, balanced on its namespace's counters
        path = getattr(self.dut, "path_places", None) if cnt[0] is not None else None
        path = path(cnt[0], cnt[1], p.direction) if path else None
        if cnt[0] is None:                       # dut.counters: none: the links' losses only
            dd = conservation.DutDelta(0, 0)
            cons = conservation.generator_only(st[tx]["opackets"], st[rx]["ipackets"],
                                               ld["lost_in"] if ld else None, ld["lost_out"] if ld else None,
                                               background=bg)
        elif path is not None:
            cons, dd = conservation.check_places(path, st[tx]["opackets"], st[rx]["ipackets"],
                                                 link_in_lost=ld["lost_in"] if ld else None,
                                                 link_out_lost=ld["lost_out"] if ld else None,
                                                 background=bg)
            if ld:
                ld["lost_out"] += path["lost_out"]     # the egress veth refused the stack's sends
        else:
            dd = conservation.DutDelta.from_counters(*cnt)
            cons = conservation.check(st[tx]["opackets"], st[rx]["ipackets"], dd,
                                      dut_rx=ld["dut_rx"] if ld else None,
                                      link_in_lost=ld["lost_in"] if ld else None,
                                      link_out_lost=ld["lost_out"] if ld else None, background=bg)
        # the DUT's other port receives only background during a one-direction trial (the
        # generator side's kernel answering the DUT's ARP ...), counted where it left
        stray = (ld["other_side_rx"] - (bg.n_other if bg else 0)) if ld else 0
        if stray:
            cons.ok = False
            cons.errors.append(f"{stray:+d} packets on the DUT's other port during an {p.direction} trial "
                               f"beside the background sent to it (not attributable)")
        if st.get("background_errors"):          # TRex's background capture overflowed
            cons.ok = False
            cons.errors += st["background_errors"]
        cross = getattr(self.dut, "cross_check", None)
        if cross is not None and cnt[0] is not None and link[0] is not None:
            # a UPF's own verdict counts against the kernel's count of them (gtplab.dut.external)
            disagree = cross(dd, link[0], link[1], p.direction)
            if disagree:
                cons.ok = False
                cons.errors += disagree
        ns_pp = stats_on = None
        if prog[0] is not None:
            (t0, n0), (t1, n1) = prog[0][PROG[p.direction]], prog[1][PROG[p.direction]]
            ns_pp = (t1 - t0) / (n1 - n0) if n1 > n0 and t1 > t0 else None
            # the kernel counts runs only while BPF_ENABLE_STATS is held, by any process on the host
            # (the sysctl kernel.bpf_stats_enabled does not show that): runs counted = stats were on
            stats_on = n1 > n0
        cpu_s = cpus_s = proc_s = None
        if cpu[0] is not None and cpu[1] is not None:
            if "threads" in cpu[0]:
                cpu_s = round(cpu[1]["threads"] - cpu[0]["threads"], 6)
            if "process" in cpu[0] and "process" in cpu[1]:
                proc_s = round(cpu[1]["process"] - cpu[0]["process"], 6)
            cpus_s = round(cpu[1]["cpus"] - cpu[0]["cpus"], 4)
            if cpu_s is None:
                cpu_s = cpus_s
        tx_p, rx_p = st[tx]["opackets"], st[rx]["ipackets"] - (bg.n_gen_rx if bg else 0)
        offered = st[tx]["tx_pps"]
        gen_bound, limit = trial_limit(rate_pps, offered, dd, tx_p - rx_p, ld)
        lay = self.dut.layout()
        lat = {k: None for k in ("min", "avg", "p50", "p99", "max")}
        pg = (st.get("latency") or {}).get(PG_ID[p.direction])
        if prep.latency and pg and rx_p:
            L = pg["latency"]
            hist = L.get("histogram") if "percentile_50" not in L else None
            lat = {"min": L.get("total_min"), "avg": L.get("average"),
                   "p50": L.get("percentile_50", hist_percentile(hist, 0.50)),
                   "p99": L.get("percentile_99", hist_percentile(hist, 0.99)),
                   # TRex leaves total_max at 0 until its next periodic update; last_max is the window's
                   "max": L.get("total_max") or L.get("last_max")}
        return {
            "rate_asked": mult, "rate_asked_pps": rate_pps, "duration_s": duration,
            "offered_pps": st[tx]["tx_pps"], "offered_bps_l1": st[tx]["tx_bps_L1"],
            "offered_bps_l2": st[tx]["tx_bps"], "rx_pps": st[rx]["rx_pps"],
            "rx_bps_l1": st[rx]["rx_bps_L1"], "rx_bps_l2": st[rx]["rx_bps"],
            "tx_packets": tx_p, "rx_packets": rx_p,
            "loss_ratio": (tx_p - rx_p) / tx_p if tx_p else None,
            "latency_us": lat,
            "generator_bound": gen_bound, "limit": limit,
            "loss": {"dut_ingress_ring": ld["lost_in"] if ld else None, "dut_dropped": dd.drop_packets,
                     "generator_ingress_ring": ld["lost_out"] if ld else None},
            "dut": {"rx_packets": cons.dut_rx, "fwd_packets": dd.fwd_packets, "drop_packets": dd.drop_packets,
                    "drops_by_reason": dd.drops_by_reason, "passed_by_reason": dd.passed_by_reason,
                    "ns_per_packet": ns_pp, "cpu_seconds": cpu_s, "cpus_busy_seconds": cpus_s,
                    "bpf_stats": stats_on,
                    "cpu_source": ("DUT receive NAPI threads" + (" and the socket path's threads"
                                                                  if getattr(self.dut, "mode", None) == "socket"
                                                                  else "") + " on CPU(s) "
                                   + ",".join(map(str, lay["dut"]))
                                   if lay else "DUT host CPUs (node exporter)" if cpu_s is not None else None),
                    # per packet the DUT's program saw: a packet lost in its ingress ring cost it nothing
                    "cpu_ns_per_packet": cpu_s * 1e9 / cons.dut_rx if cpu_s is not None and cons.dut_rx else None,
                    # an external UPF's own process (its user-space threads), beside its XDP's NAPI threads
                    **({"process_cpu_seconds": proc_s} if proc_s is not None else {})},
            "conservation": cons.as_dict(),
            "pcap": capture,
            "streams": stream_stats(st),
            "rate_measured": st.get("measured"),
        }


def trial_limit(rate_pps: float | None, offered: float, dd: conservation.DutDelta, lost: int,
                ld: dict | None = None) -> tuple[bool, str | None]:
    """(generator_bound, limit) of a trial (module doc): where the packets that did not come back
    (lost: sent less received) were lost, and so which side set the result. The socket path's
    drop_tx_full (the kernel refused to send: the egress ring full, on the lab's veths the generator's
    receive ring; a veth's XDP transmit error for the XDP path) is the generator's side. ld: the
    links' losses (dut.link_delta), None where they are not read: a loss the DUT's counters do not
    locate is then the DUT's."""
    tx_full = dd.drops_by_reason.get("drop_tx_full", 0)
    dut_loss = (ld["lost_in"] if ld else 0) + dd.drop_packets - tx_full
    gen_loss = (ld["lost_out"] if ld else 0) + tx_full
    gen_bound = rate_pps is not None and offered < GENERATOR_BOUND_RATIO * rate_pps
    if gen_loss > dut_loss:
        return gen_bound, "generator (receive)"
    if dut_loss or (lost > 0 and not ld):
        return gen_bound, "dut"
    if gen_bound or rate_pps is None:
        return gen_bound, "generator (transmit)"
    return gen_bound, None        # neither: the rate asked was sent and came back


# a trial's host record where no CPU layout is known (a remote DUT or generator)
HOST_UNMEASURED = {"disturbed": False, "reasons": [], "measured": False,
                   "why": "no CPU layout on this host (a remote DUT or generator): the host's disturbance "
                          "is not measured"}


def trex_background_into(st: dict, tx: int, rx: int, bg: dict) -> None:
    """A TRex trial's background (gtplab.traffic.trex.background.count) into its stats, in the
    engine's keys (background() reads them): received by the receiving port; sent by the
    generator host's stack out of each port."""
    st[rx]["background"] = dict(bg["gen_rx"])
    st[tx]["background_out"] = dict(bg["to_dut_in"])
    st[rx]["background_out"] = dict(bg["to_dut_other"])
    st["background_errors"] = list(bg["errors"])
    if bg["tx_port_rx"]:
        st[tx]["background_rx"] = dict(bg["tx_port_rx"])


def background(st: dict, tx: int, rx: int) -> conservation.Background | None:
    """The trial's frames that are not the test's, by kind, from the generator's stats: the
    embedded engine's, `background` received, `background_out` sent by the port's stack; TRex's,
    the same keys from its background capture (trex_background_into); None when not measured."""
    if "background" not in st[rx]:
        return None
    return conservation.Background(gen_rx=dict(st[rx]["background"]),
                                   to_dut_in=dict(st[tx].get("background_out") or {}),
                                   to_dut_other=dict(st[rx].get("background_out") or {}))


def no_l4_checksums(stream: dict) -> None:
    """An uplink latency stream for TRex without checksum offload: its outer and inner UDP checksums
    0 ("none", valid in IPv4) instead of the hardware fix. TRex writes its latency header (a timestamp
    and sequence number, new in every packet) into the payload, and on af_packet its software
    fallback for the inner checksum was measured wrong for those packets from 512 B up (tshark, TRex's
    capture); the outer UDP checksum, computed once over the base packet, cannot stay right either.
    The inner IPv4 header checksum does not depend on the payload and stays as built."""
    vm = stream.get("vm") or {}
    fix = [i for i in vm.get("instructions", []) if i.get("type") == "fix_checksum_hw"]
    if not fix or fix[0].get("l4_type") != 11:      # 11: UDP in TRex's fix_checksum_hw
        return
    vm["instructions"] = [i for i in vm["instructions"] if i.get("type") != "fix_checksum_hw"]
    pkt = bytearray(base64.b64decode(stream["packet"]["binary"]))
    inner_udp = fix[0]["l2_len"] + fix[0]["l3_len"]
    outer_udp = 14 + (pkt[14] & 0x0F) * 4
    for off in (outer_udp + 6, inner_udp + 6):
        pkt[off:off + 2] = b"\0\0"
    stream["packet"]["binary"] = base64.b64encode(bytes(pkt)).decode()


def hist_percentile(hist: dict | None, q: float) -> float | None:
    """The q-quantile of a TRex latency histogram ({bucket lower bound in us: packets}; buckets 10 us
    wide below 100, 100 us below 1000, 1000 us above): the upper bound of the bucket holding it, so
    never below the true value and at most one bucket above. None without packets."""
    if not hist:
        return None
    rows = sorted((float(k), int(v)) for k, v in hist.items() if int(v) > 0)
    total = sum(v for _, v in rows)
    if not total:
        return None
    seen = 0
    for lo, n in rows:
        seen += n
        if seen >= q * total:
            width = 10.0 if lo < 100 else 100.0 if lo < 1000 else 1000.0
            return lo + width
    return rows[-1][0]


def stream_stats(st: dict) -> dict | None:
    """Per-stream (packet group) packets sent and received, from the generator's flow stats:
    {pg_id: {"tx_packets", "rx_packets"}} (None without any). TRex counts a stream's received packets
    by its latency header (the payload's last 16 bytes, which the DUT keeps); a stream with plain
    per-stream counters is told apart by its IPv4 id, which GTP-U encapsulation and decapsulation
    replace, so only its sent packets count here."""
    fs = st.get("flow_stats") or {}
    out = {}
    for pg, v in fs.items():
        if pg == "global" or not isinstance(v, dict):
            continue
        tx, rx = v.get("tx_pkts") or {}, v.get("rx_pkts") or {}
        out[pg] = {"tx_packets": tx.get("total"), "rx_packets": rx.get("total")}
    return out or None
