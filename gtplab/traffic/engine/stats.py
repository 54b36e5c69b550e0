"""The embedded engine's counters in TRex's shape (Stats.get: LocalClient.get_stats), with the
latency histograms' percentiles, as TRex keeps them in trex_stl_stats.py.

The counters are read from every port's maps (monotonic since load) and reported less a baseline
(Stats.clear); nothing writes them but the BPF programs. Receive ports track every flow-stats id of
any port (register_pgids) and their expected sequence starts again with each transmission
(reset_rx_sequence).
"""

from __future__ import annotations

import struct
import time

from gtplab.kernel import bpf
from gtplab.rates import FCS_LEN, l1_bps
from gtplab.traffic.engine.port import Port
from gtplab.traffic.engine.streams import PACE, PACE_MAX_RUN
from gtplab.traffic.engine.vm import STATE_TX_OFF

_FLOW_HDR = struct.Struct("<QQIIQQQQQQQQ")     # struct tg_flow without hist
_LAT_BUCKETS = 256
# enum tg_bg, in its order: what a frame that is not a stream's is (trafficgen.h)
BG_KINDS = ("arp", "lldp", "nd", "icmp6", "ipv6", "ipv4", "udp", "other")
_BG_OFF = 32                                    # struct tg_port_stats: bg[] after 4 counters


def background(rx_bg: dict[str, int], all_marked: bool) -> dict[str, int]:
    """The frames a port received that are not the test's, by kind (only kinds seen), from its
    counts of frames without a known stream trailer (rx_bg, by BG_KINDS). IPv4/IPv6 UDP without a
    trailer ("udp") is background only when every stream carries a trailer (all_marked); else it may
    be the test's own frames (a stream without flow stats) and is counted as the test's."""
    return {k: v for k, v in rx_bg.items() if v and (k != "udp" or all_marked)}


class Stats:
    """The counters of a client's ports (the client's dict, shared), less the baseline of the
    latest clear(); rates over each port's latest transmission, receive rates from run_t0."""

    def __init__(self, ports: dict[int, Port]):
        self.ports = ports
        self._base: dict = {}
        self.run_t0 = 0.0       # when the latest transmission of any port began (set by the client)

    def register_pgids(self) -> None:
        """Every receive port tracks every flow-stats id of any port (the DUT may cross ports)."""
        pgs = {s.cs.pg_id for p in self.ports.values() for s in p.streams.values()
               if s.cs.pg_id is not None}
        for p in self.ports.values():
            m = p.obj.map("rx_flow")
            have = {struct.unpack("<I", k)[0] for k in m.keys()}
            for pg in pgs - have:
                m.update(struct.pack("<I", pg), bytes(m.value_size), bpf.BPF_NOEXIST)
            for pg in have - pgs:
                m.delete(struct.pack("<I", pg))

    def reset_rx_sequence(self) -> None:
        """A new transmission: every receive port expects each flow's sequence from its start."""
        for p in self.ports.values():
            m = p.obj.map("rx_flow")
            for k, v in list(m.items()):
                v = bytearray(v)
                struct.pack_into("<II", v, 16, 0, 0)    # expected, started
                m.update(k, bytes(v))

    def _raw(self) -> dict:
        """Counters straight from the maps (monotonic since load)."""
        raw = {"port": {}, "pg_tx": {}, "pg_rx": {}}
        for pid, p in self.ports.items():
            tx_p = tx_b = skipped = 0
            for k, o in enumerate(p.objs):      # every sending thread's own counters
                st, pace = o.map("state"), o.map("pace")
                for s in p.streams.values():
                    v = st.lookup(struct.pack("<I", s.slot))
                    pk, by, _ = struct.unpack_from("<QQQ", v, STATE_TX_OFF)
                    tx_p += pk
                    tx_b += by + FCS_LEN * pk
                    pc = PACE.unpack(pace.lookup(struct.pack("<I", s.slot)))
                    skipped += pc[4]
                    if s.cs.pg_id is not None and k == 0:    # sent by the first thread only
                        raw["pg_tx"][s.cs.pg_id] = {"port": pid, "pkts": pk, "bytes": by + FCS_LEN * pk,
                                                    "max_burst": pc[PACE_MAX_RUN]}
            rx = p.obj.map("rx_port").lookup(b"\0\0\0\0")
            rx_p = sum(struct.unpack_from("<Q", c, 0)[0] for c in rx)
            rx_b = sum(struct.unpack_from("<Q", c, 8)[0] for c in rx)
            lost = sum(struct.unpack_from("<Q", c, 24)[0] for c in rx)
            bg = {k: sum(struct.unpack_from("<Q", c, _BG_OFF + 8 * i)[0] for c in rx)
                  for i, k in enumerate(BG_KINDS)}
            out = p.obj.map("bg_out").lookup(b"\0\0\0\0")
            bg_out = {k: sum(struct.unpack_from("<Q", c, 8 * i)[0] for c in out) for i, k in enumerate(BG_KINDS)}
            raw["port"][pid] = {"opackets": tx_p, "obytes": tx_b, "ipackets": rx_p,
                                "ibytes": rx_b + FCS_LEN * rx_p, "cap_lost": lost, "tx_skipped": skipped,
                                "bg": bg, "bg_out": bg_out}
            for k, v in p.obj.map("rx_flow").items():
                pg = struct.unpack("<I", k)[0]
                f = _FLOW_HDR.unpack_from(v, 0)
                hist = struct.unpack_from(f"<{_LAT_BUCKETS}Q", v, _FLOW_HDR.size)
                raw["pg_rx"][(pg, pid)] = {
                    "pkts": f[0], "bytes": f[1] + FCS_LEN * f[0], "dropped": f[4], "out_of_order": f[5],
                    "seq_too_high": f[6], "seq_too_low": f[7], "lat_min": f[8], "lat_max": f[9],
                    "lat_sum": f[10], "lat_cnt": f[11], "hist": hist}
        return raw

    def clear(self) -> None:
        """Zero the counters get reports (a baseline is kept; the maps are not written)."""
        self._base = self._raw()

    def get(self, sel: list[int]) -> dict:
        """Stats in TRex's shape: {port_id: {...}, "total": {...}, "flow_stats": {pg_id: ...},
        "latency": {pg_id: ...}, "global": {...}}, of the ports sel. Rates are averages over the port's last
        transmission (start to stop, or to now while running)."""
        raw = self._raw()
        base = self._base or {"port": {}, "pg_tx": {}, "pg_rx": {}}
        out: dict = {}
        total = {k: 0 for k in ("opackets", "ipackets", "obytes", "ibytes", "oerrors", "ierrors",
                                "tx_pps", "rx_pps", "tx_bps", "rx_bps", "tx_bps_L1", "rx_bps_L1")}
        streams = [s for p in self.ports.values() for s in p.streams.values()]
        all_marked = bool(streams) and all(s.cs.pg_id is not None for s in streams)
        for pid in sel:
            p = self.ports[pid]
            r, b = raw["port"][pid], base["port"].get(pid, {})
            d = {k: r[k] - b.get(k, 0) for k in ("opackets", "obytes", "ipackets", "ibytes")}
            secs = self._window(p)
            rsecs = self._rx_window()
            d.update(oerrors=0, ierrors=0, capture_lost=r["cap_lost"] - b.get("cap_lost", 0))
            # engine only: frames a paced stream gave up after its transmitter was held up, and
            # how it sent (paced in the kernel, or as fast as it goes; run calls, largest call)
            d["tx_skipped"] = r["tx_skipped"] - b.get("tx_skipped", 0)
            d["pacing"] = {"paced": p.paced, "calls": p.calls, "max_call_frames": p.max_call}
            # engine only: frames received that are not the test's, by kind (ipackets counts them:
            # TRex's meaning, every frame on the port), and frames the port's network stack sent
            # (its kernel's ARP and ND, packet sockets: never the engine's own), by kind
            bb, bo = b.get("bg", {}), b.get("bg_out", {})
            d["background"] = background({k: r["bg"][k] - bb.get(k, 0) for k in BG_KINDS}, all_marked)
            d["background_out"] = {k: n for k in BG_KINDS if (n := r["bg_out"][k] - bo.get(k, 0))}
            d["tx_pps"] = d["opackets"] / secs if secs else 0.0
            d["rx_pps"] = d["ipackets"] / rsecs if rsecs else 0.0
            d["tx_bps"] = d["obytes"] * 8 / secs if secs else 0.0
            d["rx_bps"] = d["ibytes"] * 8 / rsecs if rsecs else 0.0
            d["tx_bps_L1"] = l1_bps(d["tx_bps"], d["tx_pps"])
            d["rx_bps_L1"] = l1_bps(d["rx_bps"], d["rx_pps"])
            d["tx_util"] = d["tx_bps_L1"] / p.spec.speed_bps * 100
            d["rx_util"] = d["rx_bps_L1"] / p.spec.speed_bps * 100
            out[pid] = d
            for k in total:
                total[k] += d[k]
        out["total"] = total
        out["flow_stats"], out["latency"] = self._pg_stats(raw, base)
        # TRex's cpu_util: % busy of the sending threads over their transmission (measured with
        # each thread's own CPU clock); TRex's queue_full and rx_drop_bps have no counterpart
        # here and are absent, not zero
        busy = [(p.cpu_s, p.wall_s) for p in self.ports.values() if p.wall_s]
        out["global"] = {"tx_pps": total["tx_pps"], "rx_pps": total["rx_pps"],
                         "tx_bps": total["tx_bps"], "rx_bps": total["rx_bps"],
                         "cpu_util": (100.0 * sum(c for c, _ in busy) / sum(w for _, w in busy)
                                      if busy and sum(w for _, w in busy) else None)}
        return out

    def _window(self, p: Port) -> float:
        if not p.t_start:
            return 0.0
        end = p.t_end if p.t_end else time.monotonic()
        return max(0.0, end - p.t_start)

    def _rx_window(self) -> float:
        """Receive rates are over the span of the latest transmission of any port (a port
        may only receive)."""
        started = [p for p in self.ports.values() if p.t_start >= self.run_t0 > 0]
        if not started:
            return 0.0
        t0 = self.run_t0
        ends = [p.t_end if p.t_end else time.monotonic() for p in started]
        return max(0.0, max(ends) - t0)

    def _pg_stats(self, raw: dict, base: dict) -> tuple[dict, dict]:
        flow: dict = {"global": {"rx_err": {}, "tx_err": {}}}
        lat: dict = {"global": {"bad_hdr": 0, "old_flow": 0}}
        pgs = {s.cs.pg_id: s for p in self.ports.values() for s in p.streams.values()
               if s.cs.pg_id is not None}
        for pg, s in pgs.items():
            tx = raw["pg_tx"].get(pg, {"port": s.port, "pkts": 0, "bytes": 0})
            btx = base["pg_tx"].get(pg, {"pkts": 0, "bytes": 0})
            txp, txb = tx["pkts"] - btx["pkts"], tx["bytes"] - btx["bytes"]
            secs = self._window(self.ports[s.port])
            fs = {"tx_pkts": {s.port: txp, "total": txp}, "tx_bytes": {s.port: txb, "total": txb},
                  "rx_pkts": {"total": 0}, "rx_bytes": {"total": 0}}
            agg = {"dropped": 0, "out_of_order": 0, "seq_too_high": 0, "seq_too_low": 0,
                   "lat_min": None, "lat_max": 0, "lat_sum": 0, "lat_cnt": 0,
                   "hist": [0] * _LAT_BUCKETS}
            for pid in self.ports:
                r = raw["pg_rx"].get((pg, pid))
                if r is None:
                    continue
                b = base["pg_rx"].get((pg, pid))
                def d(k):
                    return r[k] - (b[k] if b else 0)
                fs["rx_pkts"][pid] = d("pkts")
                fs["rx_bytes"][pid] = d("bytes")
                fs["rx_pkts"]["total"] += d("pkts")
                fs["rx_bytes"]["total"] += d("bytes")
                for k in ("dropped", "out_of_order", "seq_too_high", "seq_too_low", "lat_sum", "lat_cnt"):
                    agg[k] += d(k)
                hist = [x - (b["hist"][i] if b else 0) for i, x in enumerate(r["hist"])]
                agg["hist"] = [a + h for a, h in zip(agg["hist"], hist)]
                if r["lat_cnt"]:    # min/max are not resettable counters: since load
                    agg["lat_min"] = r["lat_min"] if agg["lat_min"] is None else min(agg["lat_min"], r["lat_min"])
                    agg["lat_max"] = max(agg["lat_max"], r["lat_max"])
            rxp = fs["rx_pkts"]["total"]
            fs["tx_pps"] = {s.port: txp / secs if secs else 0.0}
            rsecs = self._rx_window()
            fs["rx_pps"] = {"total": rxp / rsecs if rsecs else 0.0}
            fs["loss"] = {"total": txp - rxp}
            # engine only: the most frames the stream sent back to back in its latest
            # transmission (paced streams: struct tg_pace max_run; 0 when not paced)
            fs["tx_max_burst"] = {s.port: tx.get("max_burst", 0)}
            flow[pg] = fs
            if s.cs.latency:
                n = agg["lat_cnt"]
                lat[pg] = {
                    "latency": {
                        "total_min": (agg["lat_min"] or 0) / 1000, "total_max": agg["lat_max"] / 1000,
                        "average": agg["lat_sum"] / n / 1000 if n else 0.0,
                        "percentile_50": _percentile(agg["hist"], 0.50) / 1000,
                        "percentile_99": _percentile(agg["hist"], 0.99) / 1000,
                        "histogram": {round(_bucket_hi(i) / 1000, 3): c for i, c in enumerate(agg["hist"]) if c},
                        "jitter": 0,
                    },
                    "err_cntrs": {"dropped": agg["dropped"], "out_of_order": agg["out_of_order"],
                                  "dup": 0, "seq_too_high": agg["seq_too_high"],
                                  "seq_too_low": agg["seq_too_low"]},
                }
        return flow, lat


def _bucket_hi(i: int) -> float:
    """Upper edge in ns of latency bucket i (4 buckets per power of two, see tg_rx)."""
    if i < 8:
        return 4.0
    msb, frac = divmod(i, 4)
    return (1 << msb) * (1 + (frac + 1) / 4)


def _percentile(hist: list[int], q: float) -> float:
    n = sum(hist)
    if not n:
        return 0.0
    want = q * n
    acc = 0
    for i, c in enumerate(hist):
        acc += c
        if acc >= want:
            return _bucket_hi(i)
    return _bucket_hi(len(hist) - 1)
