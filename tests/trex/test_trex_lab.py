"""The namespace lab with TRex as its generator (`gtplab lab up --generator trex`, docs/trex.md):
TRex's life with the lab (also after its creator is killed), a short `gtplab sweep --backend trex`
with exact packet conservation and TRex's own captures, and the correctness checks of
tests/lib/correctness.py (tests/dataplane/test_suite_correctness.py's) run unchanged with TRex sending
the packets.

Skipped, with the reason shown, only when there is no TRex runtime (gtplab.lab.trex_server: the
tarball in ../shared/trex/ in CI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from scapy.utils import rdpcap

from gtplab.dut.local import LocalDut
from gtplab.kernel.threads import napi_threads
from gtplab.lab.topology import Lab, teardown
from gtplab.lab import trex_server
from gtplab.traffic.backend import trex_client
from tests.lib import correctness as C
from tests.lib.tshark import tshark_checksums
from tests.lib import REPO

pytestmark = [pytest.mark.trex, pytest.mark.lab]

GTPLAB = [sys.executable, "-m", "gtplab"]


@pytest.fixture(scope="module")
def runtime():
    try:
        return trex_server.resolve()
    except trex_server.TrexUnavailable as e:
        pytest.skip(str(e))


def _threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _trex_pids(ns: str) -> list[int]:
    out = []
    for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
        if trex_server.is_trex(int(pid)):
            out.append(int(pid))
    return out


def _gone(state: dict) -> list[str]:
    """What of the lab still exists (empty: nothing)."""
    left = [ns for ns in state["netns"].values() if Path(f"/run/netns/{ns}").exists()]
    left += [d for d in state["pin_dirs"].values() if os.path.lexists(d)]
    t = state["trex"]
    if t.get("pid") and trex_server.is_trex(t["pid"]):
        left.append(f"TRex pid {t['pid']}")
    left += [p for p in (t["workdir"], f"/var/run/dpdk/{t['prefix']}") if os.path.exists(p)]
    if Path(f"/run/gtplab/labs/{state['name']}.json").exists():
        left.append("state file")
    return left


def test_lab_up_down_with_trex(runtime):
    """`gtplab lab up --generator trex`: TRex runs inside the generator namespace, confined to the
    generator CPUs, its pid in the state file; the ports keep the lab's MTU; `lab down` stops TRex
    and removes everything."""
    name = f"t{os.getpid() % 100000}"
    up = subprocess.run(GTPLAB + ["lab", "up", "--name", name, "--generator", "trex", "--trex", str(runtime)],
                        capture_output=True, text=True, timeout=300, cwd=REPO)
    state = None
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(Path(f"/run/gtplab/labs/{name}.json").read_text())
        lab = Lab(state)
        pid = state["trex"]["pid"]
        assert pid and trex_server.is_trex(pid), state["trex"]
        assert _trex_pids(lab.gen_ns), "TRex is not inside the generator namespace"
        gen = set(lab.cpus.generator)
        for p in _trex_pids(lab.gen_ns):
            for tid in _threads_of(p):
                aff = set(os.sched_getaffinity(tid))
                assert aff <= gen, f"TRex thread {tid} may run on {aff}, not only generator CPUs {gen}"
        assert state["trex"]["cpus"] == lab.cpus.generator
        assert "net_af_packet0,iface=" + lab.ports[0].ifname in Path(state["trex"]["workdir"], "trex_cfg.yaml").read_text()
        for link in lab.links():
            if link["ifname"] in [p.ifname for p in lab.ports] + [p.dut_ifname for p in lab.ports]:
                assert link["mtu"] == lab.ports[0].mtu, link
        for p in lab.ports:      # the DUT's receive threads on the DUT CPUs, as in the engine lab
            for t in napi_threads(p.dut_ifname):
                assert sorted(os.sched_getaffinity(t)) == lab.cpus.dut
        st = subprocess.run(GTPLAB + ["lab", "status", "--name", name, "--json"], capture_output=True,
                            text=True, timeout=60, cwd=REPO)
        assert json.loads(st.stdout)[0]["trex"]["running"] is True
    finally:
        down = subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, text=True,
                              timeout=120, cwd=REPO)
    assert down.returncode == 0, down.stderr
    assert "TRex (pid" in down.stdout
    assert state is not None and not _gone(state), _gone(state)


CREATOR = """
import sys, time
from gtplab.lab.topology import Lab
Lab.up(sys.argv[1], generator="trex", trex_runtime=sys.argv[2])
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("when", ["starting", "up"])
def test_lab_down_after_creator_killed(runtime, when):
    """The creator of a TRex lab is SIGKILLed (while TRex starts, or once the lab is up): the state
    file has TRex's pid, and `gtplab lab down` stops TRex and removes everything."""
    name = f"k{os.getpid() % 10000}{when[0]}"
    sp = Path(f"/run/gtplab/labs/{name}.json")
    proc = subprocess.Popen([sys.executable, "-c", CREATOR, name, str(runtime)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    state = None
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end:
            try:
                state = json.loads(sp.read_text())
            except (OSError, ValueError):
                state = None
            if state and (state.get("trex") or {}).get("pid") and (when == "starting" or state["status"] == "up"):
                break
            assert proc.poll() is None, "the creator died on its own"
            time.sleep(0.05)
        assert state and state["trex"]["pid"], "TRex's pid never reached the state file"
        if when == "up":
            assert proc.stdout.readline().strip() == "up"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = json.loads(sp.read_text())
        assert trex_server.is_trex(state["trex"]["pid"]), "TRex should outlive its killed creator"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        down = subprocess.run(GTPLAB + ["lab", "down", "--name", name], capture_output=True, text=True,
                              timeout=120, cwd=REPO)
        if state is None:      # nothing recorded: still remove whatever carries the name
            teardown(Lab._plan(name, corr_addressing(), "none", 3200, generator="trex"))
    assert down.returncode == 0, down.stderr
    assert not _gone(state), _gone(state)


def corr_addressing():
    from gtplab.lab.topology import Addressing
    return Addressing()


# ------------------------------------------------------------------------------- one lab for the rest

@pytest.fixture(scope="module")
def trex_lab(runtime):
    lab = Lab.up(generator="trex", trex_runtime=str(runtime))
    try:
        yield lab
    finally:
        lab.down()


def test_sweep_backend_trex(trex_lab, tmp_path):
    """`gtplab sweep --backend trex --lab NAME`, 2 cases (uplink and downlink, 512 B) with a search of
    two trials: every trial's packets are conserved exactly (TRex's port counters against the DUT's
    counters and the veths'), the rate is measured, latency and per-stream counts come from TRex,
    and each case's pcap, captured by TRex, holds decapsulated/encapsulated frames with every checksum
    right."""
    out = tmp_path / "res"
    cp = subprocess.run(GTPLAB + ["sweep", "--backend", "trex", "--lab", trex_lab.name, "--lab-config",
                                  "embedded-trex", "--sizes", "512", "--directions", "uplink,downlink",
                                  "--flows", "64", "--rate-mode", "search",
                                  "--max-trials", "2", "--search", "latency_at=[]", "--pcap-limit", "32",
                                  "--no-scale", "--out", str(out)],
                        capture_output=True, text=True, timeout=600, cwd=REPO)
    bad = [f"{r['case_id']}: {r['notes']}" for r in map(json.loads, (out / "cases.jsonl").read_text().splitlines())
           if not r["conservation_ok"]] if (out / "cases.jsonl").exists() else []
    assert cp.returncode == 0 and not bad, "\n".join(bad) + "\n" + cp.stderr[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["backend"] == "trex" and run["generator"] == "trex" and run["lab_name"] == trex_lab.name
    recs = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()]
    assert len(recs) == 2, [r["case_id"] for r in recs]
    a = trex_lab.addressing
    for r in recs:
        assert r["conservation_ok"], r["notes"]
        for t in r["trials"]:
            c = t["conservation"]
            assert c["ok"] and c["errors"] == [] and c["dut_rx_source"] == "ingress interface", c
            assert c["gen_tx"] == t["tx_packets"] > 0 and c["gen_rx"] == t["rx_packets"]
            assert c["gen_tx"] == c["dut_rx"] + c["link_in_lost"]
            assert c["fwd"] == c["gen_rx"] + c["link_out_lost"]
        assert r["offered_pps"] > 0 and r["trials"][0]["rate_asked"] == "100%"     # max load: TRex flat out
        assert r["trials"][0]["phase"] == "max load" and r["search"]["max_load_source"] == "generator"
        # which side set the result is said, and consistently; two trials: the goals' results irregular
        assert r["limit"] in ("dut", "generator (transmit)", "generator (receive)", "host busy", None), r["limit"]
        assert r["generator_bound"] == (r["limit"] or "").startswith("generator"), (r["limit"], r["status"])
        assert r["ndr_pps"] is None or r["limit"] == "dut"
        assert set(r["goals"]) == {"NDR", "PDR0.5"} and r["goal"] == "NDR"
        assert len([t for t in r["trials"] if t["phase"] == "search"]) <= 2
        assert r["latency_us"]["avg"] is not None, r["case_id"]     # 512 B has room
        pcap = out / r["pcap"]
        frames = rdpcap(str(pcap))
        assert len(frames) == 32, (pcap, len(frames))
        st = tshark_checksums(pcap)
        assert st[("ip", "bad")] == st[("udp", "bad")] == 0, st
        rx = trex_lab.ports[1 if r["direction"] == "uplink" else 0]
        for f in frames:
            assert (f.dst, f.src) == (rx.mac, rx.dut_mac)
            assert len(f) == (512 - 4 - 36 if r["direction"] == "uplink" else 512 - 4 + 36)
            if r["direction"] == "uplink":      # decapsulated: the UE's packet towards the PDN
                assert f["IP"].src.startswith("10.64.") and f["IP"].dst.startswith("198.18.")
            else:                               # encapsulated by the PGW-U towards an SGW
                assert f["IP"].src == a.dut_access and f["UDP"].dport == 2152
    # the per-case record has TRex's measured rate and per-stream counters
    with open(out / "cases.jsonl") as f:
        first = json.loads(f.readline())
    assert first["trials"][0]["tx_packets"] > 0


# ------------------------------------------------------------------ correctness, TRex sending

class TrexAsEngine:
    """The lab's TrexClient with the few engine-client conveniences tests/lib/correctness.py uses
    (wait_on_traffic's rx_delay_ms, stop_capture returning the frames, streams given as the
    engine's minimal stream JSON): the checks themselves run unchanged."""

    STREAM_DEFAULTS = {"enabled": True, "self_start": True, "isg": 0.0, "action_count": 0,
                       "flags": 0x1 | (1 << 1)}       # MACs from the packet, as the engine sends it

    def __init__(self, client, tmp: Path):
        self.c = client
        self.tmp = tmp

    def reset(self, ports=None):
        self.c.reset(ports=ports or [0, 1])

    def add_streams(self, streams, ports=None):
        return self.c.add_streams([{**self.STREAM_DEFAULTS, **s} for s in streams], ports=ports)

    def start(self, ports=None, **kw):
        self.c.start(ports=ports, **kw)

    def wait_on_traffic(self, ports=None, timeout=None, rx_delay_ms=0):
        self.c.wait_on_traffic(ports=ports, timeout=timeout)
        time.sleep(max(rx_delay_ms, 300) / 1000)

    def start_capture(self, rx_ports=None, limit=1000):
        return self.c.start_capture(rx_ports=rx_ports, limit=limit)

    def stop_capture(self, capture_id):
        fd, path = tempfile.mkstemp(suffix=".pcap", dir=self.tmp)
        os.close(fd)
        self.c.stop_capture(capture_id, output=path)
        return [(0, bytes(p), 0) for p in rdpcap(path)]

    def get_stats(self):
        return self.c.get_stats()


@pytest.fixture(scope="module")
def corr_lab(trex_lab, tmp_path_factory):
    """The lab triple the checks of tests/lib/correctness.py take (lab, client, dut), TRex as the client."""
    a = trex_lab.addressing
    bf = tmp_path_factory.mktemp("bearers") / "bearers.txt"
    bf.write_text(C.bearers_text(a))
    trex_lab.pgwu("session", "flush")
    trex_lab.pgwu("session", "load", str(bf))
    # the bearers whose outer UDP checksum the checks expect on: these, whatever a lab of
    # test_suite_correctness.py (run before, in the same process) provisioned last
    saved, C.STATE["csum_on"] = C.STATE["csum_on"], C.CSUM_ON
    client = trex_client(trex_lab)
    client.connect()
    dut = LocalDut(trex_lab)
    try:
        yield trex_lab, TrexAsEngine(client, tmp_path_factory.mktemp("caps")), dut
    finally:
        C.STATE["csum_on"] = saved
        try:
            client.reset(ports=[0, 1])
        finally:
            client.disconnect()
            dut.close()


@pytest.mark.parametrize("check", ["test_uplink_decap_every_packet", "test_downlink_encap_every_packet",
                                   "test_downlink_egress_vlan", "test_downlink_sport_fixed", "test_uplink_egress_vlan",
                                   "test_not_forwarded_and_counted_by_reason"])
def test_correctness_with_trex_sending(corr_lab, check):
    """tests/lib/correctness.py's checks (test_suite_correctness.py's tests of the same names), unchanged,
    with TRex sending the packets and capturing what the PGW-U sends back (every packet checked, packet
    conservation per burst)."""
    getattr(C, check.removeprefix("test_"))(corr_lab)


def test_sweep_refuses_a_lab_of_the_other_generator(trex_lab, tmp_path):
    """--backend local on a TRex lab: one clear error, nothing written."""
    out = tmp_path / "res"
    cp = subprocess.run(GTPLAB + ["sweep", "--backend", "local", "--lab", trex_lab.name, "--sizes", "512",
                                  "--directions", "uplink", "--no-scale", "--out", str(out)],
                        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert cp.returncode != 0 and "generates with the trex" in cp.stderr and "--backend trex" in cp.stderr, cp.stderr
    assert not out.exists() or not any(out.iterdir())


def test_sweep_builds_and_removes_its_trex_lab(runtime, tmp_path):
    """`gtplab sweep --lab-config embedded-trex` builds a TRex lab (the config's runtime), runs the
    case with TRex, and removes the lab, TRex included, at the end."""
    out = tmp_path / "res"
    cp = subprocess.run(GTPLAB + ["sweep", "--lab-config", "embedded-trex", "--sizes", "512", "--directions",
                                  "downlink", "--flows", "8", "--rate-mode", "fixed", "--rate", "20000", "--duration", "0.5",
                                  "--no-scale", "--pcap-limit", "0", "--out", str(out)],
                        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert cp.returncode == 0, cp.stderr[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["backend"] == "trex" and run["generator"] == "trex" and run["lab_name"]
    (rec,) = [json.loads(x) for x in (out / "cases.jsonl").read_text().splitlines()]
    assert rec["conservation_ok"] and rec["tx_packets"] > 0
    assert 0.9 * 20000 <= rec["offered_pps"] <= 1.1 * 20000, rec["offered_pps"]   # measured rate
    name = run["lab_name"]
    assert not Path(f"/run/netns/gtplab-{name}-gen").exists()
    assert not Path(f"/run/gtplab/labs/{name}.json").exists()
    assert not Path(f"/var/run/dpdk/gtplab_{name}_trex").exists()


def test_trex_latency_stream_beside_the_traffic(trex_lab, tmp_path):
    """A TRex trial with latency: the case's traffic at the rate asked plus TRex's latency stream
    (pg_id 10 uplink) at its own 1000 pps; TRex's per-stream counts of that stream exact both ways,
    its latency reported; every checksum in TRex's capture right or absent, never wrong (the uplink
    latency stream sends UDP checksums 0: TRex's software fix is wrong there from 512 B)."""
    from gtplab.lab import config as labconfig
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import TREX_LATENCY_PPS, Runner
    from gtplab.traffic.backend import Backend
    be = Backend.open("trex", lab=trex_lab)
    try:
        with Runner(be, labconfig.load("embedded-trex")) as r:
            prep = r.prepare(CaseParams(direction="uplink", frame_size=512, flows=8, latency=True))
            assert len(prep.streams) == 2 and prep.streams[1]["flow_stats"]["rule_type"] == "latency"
            pcap = str(tmp_path / "cap.pcap")
            t = r.trial(prep, 3000, 1.0, capture=pcap, capture_limit=120)
    finally:
        be.close()
    assert t["conservation"]["ok"], t["conservation"]["errors"]
    s = t["streams"][10]
    assert s["tx_packets"] == s["rx_packets"] and 0.8 * TREX_LATENCY_PPS <= s["tx_packets"] <= 1.3 * TREX_LATENCY_PPS
    L = t["latency_us"]
    assert L["avg"] and L["min"] <= L["avg"] and L["p50"] and L["p50"] <= L["p99"]   # p50/p99: TRex's histogram
    assert abs(t["offered_pps"] - 3000) < 0.1 * 3000, t["offered_pps"]
    st = tshark_checksums(Path(pcap))
    assert st[("ip", "bad")] == st[("udp", "bad")] == 0, st
    assert st[("udp", "none")] >= 20, st          # the latency stream's frames are among them


@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_trex_conservation_is_exact_with_background_frames(trex_lab, direction):
    """Frames that are not the test's on both links while a TRex trial runs (ARP, IPv6 router and
    neighbour solicitations, LLDP, a stray datagram; tests/measure/test_background.py's): from the
    generator host's side into the DUT's ingress port (TRex's af_packet port sees them leave), and
    from the DUT's side onto TRex's receiving port. TRex's port counters count every one of them;
    its background capture (gtplab/traffic/trex/background.py) counts them apart by kind, so the
    balance is exact and the trial's rx is the test's frames only."""
    from gtplab.lab import config as labconfig
    from gtplab.measure.plan import CaseParams
    from gtplab.measure.runner import Runner
    from gtplab.traffic.backend import Backend
    from tests.lib.background import background_frames, packet_socket
    be = Backend.open("trex", lab=trex_lab)
    try:
        with Runner(be, labconfig.load("embedded-trex")) as r:
            prep = r.prepare(CaseParams(direction=direction, frame_size=256, flows=8))
            tx, rx = r.ports(direction)
            gin, gout = trex_lab.ports[tx], trex_lab.ports[rx]
            to_dut = background_frames(gin.mac, gin.dut_mac, gin.addr, gin.dut_addr)
            to_gen = background_frames(gout.dut_mac, gout.mac, gout.dut_addr, gout.addr)
            s_gen, s_dut = packet_socket(trex_lab.gen_ns, gin.ifname), packet_socket(trex_lab.dut_ns, gout.dut_ifname)

            def send():
                time.sleep(0.3)
                for kinds, s in ((to_dut, s_gen), (to_gen, s_dut)):
                    for frames in kinds.values():
                        for f in frames:
                            s.send(f)
            r.on_start = send
            try:
                t = r.trial(prep, 5000, 1.0)
            finally:
                s_gen.close()
                s_dut.close()
    finally:
        be.close()
    c = t["conservation"]
    assert c["ok"], c["errors"]
    bg = c["background"]
    # TRex received what the DUT's side sent it, and what its own host's stack answered out of the
    # receiving port (the ARP reply; an ICMP port unreachable for the datagram): those went into
    # the DUT's other port, and TRex counted them too
    sent_back = bg["to_dut_other_port"]
    assert sent_back.get("arp") == 1 and set(sent_back) <= {"arp", "ipv4"}, bg
    n = {k: len(v) + sent_back.get(k, 0) for k, v in to_gen.items()}
    n.update({k: v for k, v in sent_back.items() if k not in n})
    assert bg["generator_rx"] == n, bg
    # into the DUT's ingress: what was sent there, and at most an ARP or two of the generator host's
    # own stack (its answer when the DUT's kernel resolves it again to answer a frame: the final
    # run of 2026-11-29 counted {'arp': 2} for 1 sent, apart, the balance exact)
    ingress = dict(bg["to_dut_ingress"])
    own_arp = ingress.get("arp", 0) - len(to_dut.get("arp", ()))
    assert 0 <= own_arp <= 2, bg
    ingress["arp"] = len(to_dut.get("arp", ()))
    assert ingress == {k: len(v) for k, v in to_dut.items()}, bg
    # the DUT passed every background frame it got to its kernel, and nothing of the test's
    assert sum(t["dut"]["passed_by_reason"].values()) == c["dut_background"] > 0, (t["dut"], c)
    assert t["rx_packets"] == c["gen_rx"] > 0 and t["tx_packets"] == c["gen_tx"], c
