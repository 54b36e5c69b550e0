"""Bearer churn under load (issue 13, item 3): bearers are added and deleted at 10,000 a second
each for 10 s (`pgwu session load` / `pgwu session unload` of 1,000 bearers, ten times a second)
while the embedded engine sends traffic, far below NDR, in both directions to 256 untouched
bearers and to the churned range:

- no packet of an untouched bearer is lost: each untouched bearer's usage counters, summed, are
  exactly what the generator sent to them, uplink and downlink;
- nothing is misrouted: every downlink frame received carries the TEID and goes to the SGW of the
  bearer of its inner destination, and every uplink frame received comes from an installed UE;
- packets for churned bearers are forwarded or counted under their drop reason
  (drop_unknown_teid, drop_unknown_ue): the DUT's counters account for every packet sent, the
  generator received exactly what the DUT forwarded, and nothing else was dropped.

The churn is a ring of 6 blocks of 1,000 bearers, 3 installed at any time: each tick adds the
next block and deletes the oldest, so every bearer of the ring comes and goes several times.
"""

from __future__ import annotations

import ipaddress
import os
import struct
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from gtplab.lab import Addressing, Lab

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "trex_profiles"

UNTOUCHED = 256          # bearers 0..255: never touched by the churn
CH0 = 100_000            # churned bearers: CH0 .. CH0 + BLOCKS * BLOCK - 1
BLOCK = 1000
BLOCKS = 6               # ring of blocks; LIVE of them installed at any time
LIVE = 3
TICKS = 100              # one add of BLOCK and one delete of BLOCK each
TICK_S = 0.1             # 10 ticks a second: 10,000 adds and 10,000 deletes a second
SGWS = 4
SIZE = 128
# packets per second per stream: far below the lab's NDR (tens of thousands per second in all)
PPS_UNTOUCHED, PPS_CHURN = 2000, 500
BURST_S = 2.0            # traffic in back-to-back bursts of exact size (the engine's bursts are
                         # kept well under 64k packets)
CAPTURE = 100_000        # frames per port per burst: all of them


def burst(streams: list[dict], pps: int, seconds: float) -> list[dict]:
    """The profile's streams as single bursts (exact packet counts), the rate split between them."""
    out = []
    for js in streams:
        js = dict(js)
        n = int(pps * seconds / len(streams))
        js["mode"] = {"type": "single_burst", "total_pkts": n, "rate": {"type": "pps", "value": pps / len(streams)}}
        out.append(js)
    return out


def total_pkts(streams: list[dict]) -> int:
    return sum(js["mode"]["total_pkts"] for js in streams)


def bearer_lines(a: Addressing, indices) -> str:
    return "".join(f"{a.local_teid(i):#x} {a.ue(i)} {a.sgw(i)} {a.sgw_teid(i):#x}\n" for i in indices)


def block(k: int) -> range:
    k %= BLOCKS
    return range(CH0 + k * BLOCK, CH0 + (k + 1) * BLOCK)


def test_churn_under_load():
    from gtplab.engine.client import load_profile_streams

    with Lab.up() as lab, tempfile.TemporaryDirectory(prefix="gtplab-churn-") as tmp:
        a = Addressing(**{**asdict(lab.addressing), "sgws": SGWS})
        ue0 = int(ipaddress.ip_address(a.ue(0)))
        lab.load_bearers(UNTOUCHED, sgws=SGWS)
        files = {}
        for k in range(BLOCKS):
            files[k] = os.path.join(tmp, f"block{k}.bearers")
            Path(files[k]).write_text(bearer_lines(a, block(k)))
        for k in range(LIVE):
            lab.pgwu("session", "load", files[k])

        def streams(prof, port, first, n, pps):
            tun = {"flows": n, "sgws": SGWS, "size": SIZE, "teid-base": a.local_teid(first),
                   "ue-base": a.ue(first), "sgw-teid-base": a.sgw_teid(first)}
            return burst(load_profile_streams(str(PROFILES / prof), port_id=port, tunables=tun), pps, BURST_S)

        ul_a = streams("gtpu_uplink.py", 0, 0, UNTOUCHED, PPS_UNTOUCHED)
        ul_b = streams("gtpu_uplink.py", 0, CH0, BLOCKS * BLOCK, PPS_CHURN)
        dl_c = streams("gtpu_downlink.py", 1, 0, UNTOUCHED, PPS_UNTOUCHED)
        dl_d = streams("gtpu_downlink.py", 1, CH0, BLOCKS * BLOCK, PPS_CHURN)
        n_ul_a, n_ul_b, n_dl_c, n_dl_d = map(total_pkts, (ul_a, ul_b, dl_c, dl_d))

        errors: list[str] = []
        done = threading.Event()
        churn_time: list[float] = []

        def churn():
            """paced at TICK_S, in its own thread, while the traffic runs"""
            try:
                t_churn = time.monotonic()
                for t in range(TICKS):
                    due = t_churn + t * TICK_S
                    if (d := due - time.monotonic()) > 0:
                        time.sleep(d)
                    lab.pgwu("session", "load", files[(t + LIVE) % BLOCKS])
                    lab.pgwu("session", "unload", files[t % BLOCKS])
                churn_time.append(time.monotonic() - t_churn)
            except Exception as e:          # noqa: BLE001 - reported after the traffic
                errors.append(str(e))
            finally:
                done.set()

        sent = dict(ul_a=0, ul_b=0, dl_c=0, dl_d=0)
        tx = [0, 0]
        rx = [0, 0]
        frames: list = []
        bursts = 0
        before = lab.dut_counters()
        worker = threading.Thread(target=churn, daemon=True)
        t0 = time.monotonic()
        # bursts of BURST_S (exact packet counts), from before the churn starts until after it
        # ends, each on a fresh engine connection with its own capture. (At 4x these rates the
        # engine's transmitters failed after 5-10 s with ENOSPC from BPF_PROG_TEST_RUN, on one
        # connection or fresh ones: a generator problem, reported; these rates are far below
        # NDR anyway.)
        while bursts < 2 or not done.is_set():
            c = lab.client()
            try:
                c.connect()
                c.reset(ports=[0, 1])
                c.add_streams(ul_a + ul_b, ports=[0])
                c.add_streams(dl_c + dl_d, ports=[1])
                c.clear_stats()
                cap = c.start_capture([0, 1], limit=CAPTURE)
                c.start(ports=[0, 1])
                if bursts == 0:
                    worker.start()
                c.wait_on_traffic(ports=[0, 1], timeout=BURST_S + 30)
                # the last frames of the burst arrive: the receivers get what was sent or dropped
                deadline = time.monotonic() + 2
                last = None
                while time.monotonic() < deadline:
                    st = c.get_stats()
                    now = (st[0]["ipackets"], st[1]["ipackets"])
                    if now == last:
                        break
                    last = now
                    time.sleep(0.1)
                frames += c.stop_capture(cap["id"])
                for i in (0, 1):
                    tx[i] += st[i]["opackets"]
                    rx[i] += st[i]["ipackets"]
            finally:
                c.disconnect()
            for k, v in (("ul_a", n_ul_a), ("ul_b", n_ul_b), ("dl_c", n_dl_c), ("dl_d", n_dl_d)):
                sent[k] += v
            bursts += 1
            if time.monotonic() - t0 > TICKS * TICK_S * 3 + 30:
                errors.append("the churn did not end")
                break
        worker.join(timeout=60)
        traffic_s = time.monotonic() - t0
        lab.attach_gen_pass()
        dut = lab.dut_counters()
        fwd_ul = dut.get("UL_FWD/redirect", 0) - before.get("UL_FWD/redirect", 0)
        fwd_dl = dut.get("DL_FWD/redirect", 0) - before.get("DL_FWD/redirect", 0)
        assert not errors, errors
        churn_s = churn_time[0]
        print(f"churn: {TICKS * BLOCK:,} adds and {TICKS * BLOCK:,} deletes in {churn_s:.1f} s "
              f"({TICKS * BLOCK / churn_s:,.0f}/s each), traffic {traffic_s:.1f} s in {bursts} bursts")
        n_ul_a, n_ul_b, n_dl_c, n_dl_d = sent["ul_a"], sent["ul_b"], sent["dl_c"], sent["dl_d"]

        # every packet sent, and nothing else
        assert tx[0] == n_ul_a + n_ul_b, (tx, n_ul_a, n_ul_b)
        assert tx[1] == n_dl_c + n_dl_d, (tx, n_dl_c, n_dl_d)

        # the DUT accounts for every packet: forwarded, or dropped for the churned bearers' reasons
        delta = {k: v - before.get(k, 0) for k, v in dut.items() if v - before.get(k, 0)}
        drops_ul = delta.get("DROP_UNKNOWN_TEID/drop", 0)
        drops_dl = delta.get("DROP_UNKNOWN_UE/drop", 0)
        assert fwd_ul + drops_ul == n_ul_a + n_ul_b, delta
        assert fwd_dl + drops_dl == n_dl_c + n_dl_d, delta
        others = {k: v for k, v in delta.items() if k not in ("UL_FWD/redirect", "DL_FWD/redirect",
                  "DROP_UNKNOWN_TEID/drop", "DROP_UNKNOWN_UE/drop") and not k.startswith("PASS_")}
        assert not others, delta
        # the churned range was really hit both ways: some of its packets forwarded, some dropped
        assert 0 < drops_ul < n_ul_b and 0 < drops_dl < n_dl_d, (delta, n_ul_b, n_dl_d)
        # the generator received exactly what the DUT forwarded: nothing lost after the DUT
        assert rx[1] == fwd_ul and rx[0] == fwd_dl, (rx, delta)

        # untouched bearers: exact usage counters, every packet sent to them counted to them
        got = {b["teid"]: b for b in lab.pgwu_json("session", "list")["bearers"]}
        untouched = [got.get(a.local_teid(i)) for i in range(UNTOUCHED)]
        assert all(untouched), "an untouched bearer is gone"
        assert all(b["uplink"] and b["downlink"] for b in untouched), "half of an untouched bearer is gone"
        assert [b["ue"] for b in untouched] == [a.ue(i) for i in range(UNTOUCHED)]
        assert sum(b["uplink"]["packets"] for b in untouched) == n_ul_a
        assert sum(b["downlink"]["packets"] for b in untouched) == n_dl_c
        assert all(b["uplink"]["packets"] > 0 and b["downlink"]["packets"] > 0 for b in untouched)
        # and what is installed now is the untouched bearers and the last LIVE blocks of the ring
        live = {a.local_teid(i) for i in range(UNTOUCHED)} | {
            a.local_teid(i) for t in range(TICKS, TICKS + LIVE) for i in block(t)}
        assert set(got) == live

        # nothing misrouted: check every frame received
        n_dl_frames = n_ul_frames = 0
        for _, f, _ in frames:
            if len(f) < 34 or f[12:14] != b"\x08\x00":
                continue
            ihl = (f[14] & 0x0F) * 4
            if f[23] == 17 and len(f) >= 14 + ihl + 8 + 8 + 20 and \
                    struct.unpack_from("!H", f, 14 + ihl + 2)[0] == 2152:
                # downlink, encapsulated: TEID and SGW must be those of the inner destination's bearer
                gtp = 14 + ihl + 8
                teid = struct.unpack_from("!I", f, gtp + 4)[0]
                inner = gtp + 8
                ue = int.from_bytes(f[inner + 16:inner + 20], "big")
                i = ue - ue0
                assert teid == a.sgw_teid(i), f"UE {a.ue(i)} sent with TEID {teid:#x}, not {a.sgw_teid(i):#x}"
                assert f[30:34] == ipaddress.ip_address(a.sgw(i)).packed, f"UE {a.ue(i)}: wrong SGW"
                n_dl_frames += 1
            else:
                # uplink, decapsulated: from a UE of the untouched bearers or of the ring
                i = int.from_bytes(f[26:30], "big") - ue0
                assert 0 <= i < UNTOUCHED or CH0 <= i < CH0 + BLOCKS * BLOCK, f"uplink from {a.ue(i)}"
                n_ul_frames += 1
        assert n_dl_frames == fwd_dl and n_ul_frames == fwd_ul, (n_dl_frames, fwd_dl, n_ul_frames, fwd_ul)
