"""Where a trial lost its packets on the receive path (gtplab.measure.rxpath), on snapshots and trial
records written here: the deltas keep what moved (and the DUT CPUs' softnet rows), every lost packet
is in exactly one loss point, the largest first, and the sentence names it with its knob. Also the
kernel readers' parsers (gtplab.kernel.rxstats) on the text of /proc files."""

from __future__ import annotations

from gtplab.kernel import rxstats
from gtplab.measure import rxpath

SOFTNET = ("00000010 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
           "00000000 00000000 00000000 00000000 00000000\n"
           "000000ff 00000002 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 "
           "00000000 00000000 00000001 00000000 00000000\n")
SNMP = ("Ip: Forwarding DefaultTTL InReceives InHdrErrors\nIp: 1 64 100 2\n"
        "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\nUdp: 90 0 8 0 8\n")


def test_kernel_parsers():
    assert rxstats.softnet(SOFTNET) == {0: (0x10, 0, 1), 1: (0xff, 2, 3)}
    assert rxstats.snmp(SNMP) == {"Ip": {"Forwarding": 1, "DefaultTTL": 64, "InReceives": 100, "InHdrErrors": 2},
                                  "Udp": {"InDatagrams": 90, "NoPorts": 0, "InErrors": 8, "OutDatagrams": 0,
                                          "RcvbufErrors": 8}}


def snap(processed, dropped, squeezed, rcvbuf, run_ns, tx_dropped=0):
    return {"softnet": {0: (5, 0, 0), 1: (processed, dropped, squeezed)},
            "snmp": {"Udp": {"RcvbufErrors": rcvbuf, "InDatagrams": 10}, "Ip": {"InReceives": 1}},
            "links": {"d1p1": {"rx_dropped": 0, "tx_dropped": tx_dropped, "rx_packets": 3}},
            "threads": {7: {"name": "napi/d1p0-1", "cpu": 1, "run_ns": run_ns}}}


def test_delta_keeps_what_moved():
    d = rxpath.delta(snap(100, 0, 0, 4, 1000), snap(600, 0, 2, 54, 3_001_000, tx_dropped=5), dut_cpus=[1])
    assert d["softnet"] == [{"cpu": 1, "processed": 500, "dropped": 0, "time_squeeze": 2}]   # CPU 0 did not
    assert d["udp"] == {"RcvbufErrors": 50} and d["ip"] == {}
    assert d["links"] == {"d1p1": {"tx_dropped": 5}}
    assert d["threads"] == [{"tid": 7, "name": "napi/d1p0-1", "cpu": 1, "run_s": 0.003}]
    assert rxpath.delta(None, snap(1, 0, 0, 0, 0)) is None


def trial(tx, ring=0, drops=None, gen_ring=0):
    return {"tx_packets": tx, "loss": {"dut_ingress_ring": ring, "generator_ingress_ring": gen_ring},
            "dut": {"drops_by_reason": drops or {}}, "rx_path": {"softnet": [], "udp": {}}}


def test_every_lost_packet_in_one_loss_point_largest_first():
    t = trial(1000, ring=30, drops={"kernel_udp_rcvbuferrors": 200, "drop_unknown_teid": 5}, gen_ring=1)
    pts = rxpath.loss_points(t)
    assert [p["key"] for p in pts] == ["kernel_udp_rcvbuferrors", "dut_ingress_ring", "drop_unknown_teid",
                                      "generator_ingress_ring"]
    assert sum(p["packets"] for p in pts) == 236
    assert "rcvbuf" in pts[0]["knob"] and "gateway's own check" in pts[2]["where"]
    rxpath.summarize(t)
    s = t["rx_path"]["dominant"]
    assert s.startswith("236 of 1000 packets lost (23.60%), 85% of them at the UDP sockets' receive buffers")
    assert "knob: socket knobs: rcvbuf" in s


def test_sentence_without_loss_and_with_softnet_drops():
    t = trial(500)
    t["rx_path"]["softnet"] = [{"cpu": 1, "processed": 500, "dropped": 3, "time_squeeze": 4}]
    assert rxpath.sentence(t) == ("No packet was lost on the receive path of 500 sent (softnet also dropped 3 at a "
                                  "CPU's backlog: net.core.netdev_max_backlog) (4 NAPI polls ran out of budget: "
                                  "net.core.netdev_budget, netdev_budget_usecs).")
    t = trial(100, drops={"kernel_ip_inhdrerrors": 2})
    assert rxpath.loss_points(t)[0]["where"] == "the DUT's kernel (ip_inhdrerrors)"


def test_gro_drops_carry_their_counter_and_the_kernels_datagram_count():
    """The socket path with UDP GRO: the snapshots' rcvbuf_probe (G-PDUs and datagrams since the probe
    was attached) become rcvbuf_drops; the socket-buffer loss point carries the counter and the
    kernel's count of datagrams beside its G-PDUs, and the sentence says so. A probe that could not
    load is said, and the drops then stay the kernel's datagrams. Without a probe nothing is added."""
    a, b = snap(100, 0, 0, 4, 0), snap(600, 0, 0, 7, 0)
    a["rcvbuf_probe"] = {"datagrams": 1, "segments": 40, "source": "the probe"}
    b["rcvbuf_probe"] = {"datagrams": 4, "segments": 240, "source": "the probe"}
    d = rxpath.delta(a, b)
    assert d["rcvbuf_drops"] == {"counter": "the probe", "packets": 200, "datagrams": 3, "kernel_rcvbuferrors": 3}
    t = trial(1000, drops={"kernel_udp_rcvbuferrors": 200})
    t["rx_path"] = d
    (p,) = rxpath.loss_points(t)
    assert (p["key"], p["packets"], p["counter"], p["datagrams"], p["kernel_rcvbuferrors"]) == \
        ("kernel_udp_rcvbuferrors", 200, "the probe", 3, 3)
    assert "the 200 G-PDUs were dropped in 3 merged datagrams" in rxpath.sentence(t)
    assert "Udp RcvbufErrors counted 3" in rxpath.sentence(t)
    b["rcvbuf_probe"] = {"error": "no BTF"}
    d = rxpath.delta(a, b)
    assert d["rcvbuf_drops"]["error"] == "no BTF" and "datagrams" in d["rcvbuf_drops"]["counter"]
    t["rx_path"] = d
    assert "datagrams" not in rxpath.loss_points(t)[0] and "merged" not in rxpath.sentence(t)
    assert "rcvbuf_drops" not in rxpath.delta(snap(1, 0, 0, 0, 0), snap(2, 0, 0, 0, 0))
