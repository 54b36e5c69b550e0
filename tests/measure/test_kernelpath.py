"""Conservation for a UPF on the kernel's path (`dut.counters: kernelpath`, gtplab/dut/kernelpath.py):
every place a packet can be lost balances exactly from synthetic counter snapshots, a remainder is
"unexplained" and fails the trial, a loss nothing located never reads ok (dut.counters none), the
lab config's value and its misuse, a sweep that measured nothing; and, as root, a socket + TUN
forwarder of this test's own in a namespace, whose N3 socket's buffer overflows (uplink) or whose
TUN queue does (downlink): the loss is on its counter and conservation is exact.
"""

from __future__ import annotations

import copy
import fcntl
import os
import secrets
import select
import socket
import struct
import subprocess
import threading
import time

import pytest
import yaml

from gtplab.dut import kernelpath
from gtplab.errors import UserError
from gtplab.kernel import netns, rxstats
from gtplab.lab import config as labconfig
from gtplab.measure import conservation
from gtplab.measure.sweep import no_measurement
from tests.lib import REPO

ACC, SGI, TUN = "dut-acc", "dut-sgi", "upftun"


def snap(**kw) -> dict:
    """A snapshot of counters at zero, with kw's changes: "Udp.RcvbufErrors": n, "dev.IF.rx_packets": n,
    "eth.IF.KEY": n, "cp.OutDatagrams": n, "n3_drops": n."""
    s = {"mib": {"Ip": {}, "Udp": {}, "IpExt": {}, "TcpExt": {}, "Ip6": {}},
         "dev": {i: {"rx_packets": 0, "rx_dropped": 0, "tx_packets": 0, "tx_dropped": 0} for i in (ACC, SGI, TUN)},
         "ethtool": {ACC: {}, SGI: {}}, "ports": [ACC, SGI], "tun": [TUN], "cp_udp": {},
         "n3_socket": {"sockets": 1, "drops": 0, "rx_queue": 0}}
    for k, v in kw.items():
        kind, _, rest = k.partition(".")
        if kind == "dev":
            i, _, key = rest.partition(".")
            s["dev"][i][key] = v
        elif kind == "eth":
            i, _, key = rest.partition(".")
            s["ethtool"][i][key] = v
        elif kind == "cp":
            s["cp_udp"][rest] = v
        elif kind == "n3_drops":
            s["n3_socket"]["drops"] = v
        else:
            s["mib"][kind][rest] = v
    return s


def balance(before, after, direction: str, gen_tx: int, gen_rx: int, lin: int = 0):
    """What the runner does with a kernelpath DUT's two counters()."""
    pl = kernelpath.places(before, after, direction)
    cons, dd = conservation.check_places(pl, gen_tx, gen_rx, link_in_lost=lin, link_out_lost=0)
    return cons, dd, pl


def bal(after: dict, direction: str, gen_tx: int, gen_rx: int, lin: int = 0):
    return balance(snap(), after, direction, gen_tx, gen_rx, lin)


# ---------------------------------------------------------------------------------------------
# every loss place balances


def test_uplink_every_place_balances():
    """1000 sent, 5 lost on the way in; of 995 received: 2 dropped by the veth after XDP_PASS, 3
    IP header errors, 40 N3 socket-buffer drops (the socket's own count too), 1 no port; 949
    datagrams read (and 4 N4 datagrams, taken off), 940 written to the TUN device plus 2 it refused
    (7 kept by the UPF), 1 without a route, 6 forwarding discards; 933 sent out, 3 of them refused
    by the generator's ring: 930 arrive."""
    a = snap(**{"dev.dut-acc.rx_packets": 995, "eth.dut-acc.rx_queue_0_drops": 2, "Ip.InHdrErrors": 3,
                "Udp.RcvbufErrors": 40, "Udp.InErrors": 40, "n3_drops": 40, "Udp.NoPorts": 1,
                "Udp.InDatagrams": 949 + 4, "cp.OutDatagrams": 4,
                "dev.upftun.rx_packets": 940, "dev.upftun.rx_dropped": 2,
                "IpExt.InNoRoutes": 1, "Ip.OutDiscards": 6,
                "dev.dut-sgi.tx_packets": 930, "dev.dut-sgi.tx_dropped": 3})
    cons, dd, pl = bal(a, "uplink", 1000, 930, lin=5)
    assert cons.ok, cons.message()
    assert cons.places == {"veth_rx_dropped": 2, "ip_in_hdr_errors": 3, "udp_rcvbuf": 40, "udp_no_ports": 1,
                           "upf_process": 7, "tun_rx_dropped": 2, "ip_in_no_routes": 1, "ip_out_discards": 6}
    assert (cons.dut_rx, cons.fwd, cons.link_out_lost, pl["detail"]["n3_reads"]) == (995, 933, 3, 949)


def test_downlink_every_place_balances():
    """1000 received on N6: 1 rp_filter drop, 2 TTL expired (InHdrErrors), 100 dropped by the full TUN
    queue, 897 queued to the UPF; it sent 890 on N3 (and 3 N4 datagrams, taken off: the control
    plane received them), 2 sends refused before the veth (SndbufErrors 2 + the 5 the veth refused,
    counted there too), 1 without a route: 7 kept by the UPF... 4. 885 arrive, 5 lost in the
    generator's ring."""
    a = snap(**{"dev.dut-sgi.rx_packets": 1000, "TcpExt.IPReversePathFilter": 1, "Ip.InHdrErrors": 2,
                "dev.upftun.tx_dropped": 100, "dev.upftun.tx_packets": 897,
                "Udp.OutDatagrams": 885 + 3, "cp.InDatagrams": 3, "Udp.SndbufErrors": 2 + 5,
                "Ip.OutDiscards": 5, "Ip.OutNoRoutes": 1,
                "dev.dut-acc.tx_packets": 885, "dev.dut-acc.tx_dropped": 5})
    cons, dd, pl = bal(a, "downlink", 1000, 885)
    assert cons.ok, cons.message()
    assert cons.places == {"ip_rp_filter": 1, "ip_in_hdr_errors": 2, "tun_tx_dropped": 100, "upf_process": 4,
                           "udp_sndbuf": 2, "ip_out_no_routes": 1}
    assert (cons.fwd, cons.link_out_lost, pl["detail"]["n3_sends"]) == (890, 5, 893)


def test_xdp_losses_on_the_egress_are_not_the_stacks():
    """The egress veth's tx_dropped also counts XDP's failures (its XDP_TX, redirects): those are
    not the stack's sends, and are not counted as forwarded."""
    a = snap(**{"dev.dut-acc.rx_packets": 10, "Udp.InDatagrams": 10, "dev.upftun.rx_packets": 10,
                "dev.dut-sgi.tx_packets": 10, "dev.dut-sgi.tx_dropped": 4,
                "eth.dut-sgi.tx_queue_0_xdp_xmit_errors": 3, "eth.dut-sgi.rx_queue_0_xdp_tx_errors": 1})
    cons, _, pl = bal(a, "uplink", 10, 10)
    assert cons.ok and pl["lost_out"] == 0 and cons.fwd == 10, cons.message()


# ---------------------------------------------------------------------------------------------
# what is not located fails


def test_an_unexplained_remainder_fails():
    """A packet the counters do not place is "unexplained" and the trial is not ok."""
    a = snap(**{"dev.dut-acc.rx_packets": 100, "Udp.InDatagrams": 97, "dev.upftun.rx_packets": 97,
                "dev.dut-sgi.tx_packets": 97})
    cons, _, _ = bal(a, "uplink", 100, 97)
    assert not cons.ok and cons.places == {"unexplained": 3}
    assert "unexplained: +3" in cons.message()


def test_n4_datagrams_are_not_the_upfs_packets():
    """The N4 datagrams the UPF read are taken off Udp InDatagrams: without that they would make
    a packet the UPF kept look like one it read (upf_process), and one it did not read unexplained."""
    a = snap(**{"dev.dut-acc.rx_packets": 100, "Udp.InDatagrams": 100 - 2 + 5, "cp.OutDatagrams": 5,
                "dev.upftun.rx_packets": 98, "dev.dut-sgi.tx_packets": 98})
    cons, _, _ = bal(a, "uplink", 100, 98)
    assert not cons.ok and cons.places == {"unexplained": 2}, cons.message()


def test_a_socket_drop_the_mib_missed_fails():
    """The N3 socket's own drop count is part of the namespace's Udp InErrors: more at the socket
    than in the MIB is an error."""
    a = snap(**{"dev.dut-acc.rx_packets": 10, "Udp.InDatagrams": 10, "dev.upftun.rx_packets": 10,
                "dev.dut-sgi.tx_packets": 10, "n3_drops": 2})
    cons, _, _ = bal(a, "uplink", 10, 10)
    assert not cons.ok and any("N3 socket counted 2 drops" in e for e in cons.errors)


def test_a_negative_place_fails():
    """A UPF that wrote more than it read (packets of its own): a negative place, not ok, even
    when the sum balances."""
    a = snap(**{"dev.dut-acc.rx_packets": 10, "Udp.InDatagrams": 8, "Udp.RcvbufErrors": 2, "Udp.InErrors": 2,
                "dev.upftun.rx_packets": 10, "dev.dut-sgi.tx_packets": 10})
    cons, _, _ = bal(a, "uplink", 10, 10)
    assert cons.places == {"udp_rcvbuf": 2, "upf_process": -2}
    assert not cons.ok and any("negative counts at upf_process" in e for e in cons.errors), cons.message()


def test_unlocated_loss_without_counters_is_never_ok():
    """dut.counters none: the links' losses are located; any other loss is unexplained, not ok."""
    assert conservation.generator_only(1000, 1000).ok
    c = conservation.generator_only(1000, 990, 4, 6)
    assert c.ok and c.places == {"link_in": 4, "link_out": 6}
    c = conservation.generator_only(1000, 990, 4, 0)
    assert not c.ok and c.places["unexplained"] == 6 and "not located" in c.errors[0]
    assert not conservation.generator_only(1000, 0).ok


def test_the_snapshot_reads_as_counters():
    """counters() of a kernelpath DUT has every probe's shape: DutDelta.from_counters (upftest and
    conformance evidence) gives its drops, and balance() reads the whole snapshot behind it."""
    a = snap(**{"Udp.RcvbufErrors": 7, "dev.upftun.tx_dropped": 3})
    d = conservation.DutDelta.from_counters(kernelpath.Snapshot(snap()), kernelpath.Snapshot(a))
    assert d.drops_by_reason == {"udp_rcvbuf": 7, "tun_tx_dropped": 3}


def test_proc_net_parsers():
    dev = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
           "upftun: 1000 10 0 2 0 0 0 0 500 5 0 3 0 0 0 0\n")
    assert rxstats.net_dev(dev) == {"upftun": {"rx_packets": 10, "rx_dropped": 2, "tx_packets": 5, "tx_dropped": 3}}
    udp = ("   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
           "  1: 0201C80A:0868 00000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 1 2 0000 17\n"
           "  2: 0201C80A:2285 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000 9\n")
    assert rxstats.udp_sockets(udp, 2152) == [{"rx_queue": 0x300, "drops": 17}]


def test_ipv6_user_packets_lost_in_the_ipv6_layer_are_located():
    """IPv6 inside the tunnel (issue 32): uplink, of 500 IPv6 packets the UPF wrote to its TUN
    device, 300 were not forwarded (Ip6InAddrErrors: IPv6 forwarding off), 10 had no route out;
    downlink, of 400 received on N6, 399 had no route to the TUN device (Ip6InNoRoutes), 1 hop limit
    expired. Each on its ip6_* place; without /proc/net/snmp6 they were unexplained."""
    a = snap(**{"dev.dut-acc.rx_packets": 500, "Udp.InDatagrams": 500, "dev.upftun.rx_packets": 500,
                "Ip6.InAddrErrors": 300, "Ip6.OutNoRoutes": 10, "dev.dut-sgi.tx_packets": 190})
    cons, _, _ = bal(a, "uplink", 500, 190)
    assert cons.ok, cons.message()
    assert cons.places == {"ip6_in_addr_errors": 300, "ip6_out_no_routes": 10}
    d = snap(**{"dev.dut-sgi.rx_packets": 400, "Ip6.InNoRoutes": 399, "Ip6.InHdrErrors": 1})
    cons, _, _ = bal(d, "downlink", 400, 0)
    assert cons.ok, cons.message()
    assert cons.places == {"ip6_in_no_routes": 399, "ip6_in_hdr_errors": 1}
    assert kernelpath.flat(d)[("ip6_in_no_routes", "drop")] == 399


def test_snmp6_is_read_from_the_namespace():
    text = "Ip6InReceives                   \t12\nIp6InAddrErrors                 \t3\nIcmp6InMsgs 4\nUdp6InErrors 1\n"
    assert rxstats.snmp6(text) == {"InReceives": 12, "InAddrErrors": 3}
    snap_ = kernelpath.parse({"snmp": "", "snmp6": text})
    assert snap_["mib"]["Ip6"]["InAddrErrors"] == 3
    assert "snmp6" in rxstats.read_own_netns(("snmp6",))


# ---------------------------------------------------------------------------------------------
# the lab config and the sweep


def _cfg(tmp_path, **dut):
    d = yaml.safe_load((REPO / "gtplab/lab/labs/embedded-open5gs.yaml").read_text())
    d["dut"]["external"]["runtime"] = str(REPO / "gtplab/lab/labs" / d["dut"]["external"]["runtime"])
    d["dut"].update(dut)
    d["dut"] = {k: v for k, v in d["dut"].items() if v is not None}
    p = tmp_path / "lab.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_kernelpath_is_a_counters_value_of_external_mode(tmp_path):
    assert labconfig.load(str(_cfg(tmp_path, counters="kernelpath"))).counters == "kernelpath"
    with pytest.raises(UserError, match=r"dut.counters kernelpath reads the namespace of an external UPF") as e:
        labconfig.load(str(_cfg(tmp_path, counters="kernelpath", mode="pgwu", external=None, pfcp=None,
                                provision="pgwu")))
    assert "\n" not in str(e.value)


def test_a_sweep_that_measured_nothing_says_why():
    assert no_measurement(3, 1, 0) is None
    assert "no packet came back in any trial of the 3 case(s) and no trial's loss was located" in no_measurement(3, 0, 0)
    assert "no case ran (2 skipped" in no_measurement(0, 0, 2)


# ---------------------------------------------------------------------------------------------
# a socket + TUN forwarder in a namespace (root)

TUNSETIFF, IFF_TUN, IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
GTP = 2152
N = 600


def _ip(*a, check=True):
    return subprocess.run(["ip", *a], capture_output=True, text=True, check=check)


def _csum(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    return ~(s + (s >> 16)) & 0xFFFF


def _ipv4_udp(src: str, dst: str, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 5000, 5001, 8 + len(payload), 0) + payload
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0, socket.inet_aton(src),
                    socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", _csum(h)) + h[12:] + udp


class Forwarder:
    """A UPF of this test's own in netns `ns`: GTP-U on a UDP socket on 2152 (a small receive
    buffer), a TUN device; decapsulates N3 -> TUN and encapsulates TUN -> N3 (to peer), once
    `go` is set (until then it reads nothing: its socket's buffer, or its TUN queue, fills)."""

    def __init__(self, ns: str, n3: str, peer: str):
        self.ns, self.n3, self.peer = ns, n3, peer
        self.go, self.stop, self.ready = threading.Event(), threading.Event(), threading.Event()
        self.error = None
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        self.ready.wait(10)
        if self.error:
            raise self.error

    def _run(self):
        try:
            netns.enter(self.ns)
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            s.bind((self.n3, GTP))
            fd = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", TUN.encode(), IFF_TUN | IFF_NO_PI))
        except BaseException as e:     # handed to the constructor
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        try:
            while not self.stop.is_set():
                if not self.go.wait(0.05):
                    continue
                r, _, _ = select.select([s, fd], [], [], 0.05)
                if s in r:
                    os.write(fd, s.recv(4096)[8:])
                if fd in r:
                    pkt = os.read(fd, 4096)
                    s.sendto(struct.pack("!BBHI", 0x30, 0xFF, len(pkt), 1) + pkt, (self.peer, GTP))
        finally:
            os.close(fd)
            s.close()

    def close(self):
        self.stop.set()
        self.t.join(10)


def _ethtool(ns: str):
    def read(ifname):
        p = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", "ethtool", "-S", ifname],
                           capture_output=True, text=True, timeout=30)
        out = {}
        for line in p.stdout.splitlines()[1:]:
            k, _, v = line.partition(":")
            if v.strip().isdigit():
                out[k.strip()] = int(v)
        return out
    return read


def _gen_dev(ns: str) -> dict:
    return rxstats.net_dev(netns.run_in(ns, rxstats.read_own_netns, ("dev",))["dev"])


@pytest.fixture
def two_namespaces():
    """A generator namespace and a DUT namespace joined by an access and an SGi veth (IPv6 off,
    permanent neighbours: no frame but the test's), the DUT forwarding; removed afterwards."""
    tag = secrets.token_hex(3)
    g, d = f"gtplab-kp{tag}-g", f"gtplab-kp{tag}-d"
    made = []
    try:
        for ns in (g, d):
            _ip("netns", "add", ns)
            made.append(ns)
            for k in ("all", "default"):
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{k}.disable_ipv6=1"],
                               check=True)
            _ip("-n", ns, "link", "set", "lo", "up")
        links = {"acc": ("gen-acc", ACC, "10.201.1", "02:00:00:00:01:01", "02:00:00:00:01:02"),
                 "sgi": ("gen-sgi", SGI, "10.201.2", "02:00:00:00:02:01", "02:00:00:00:02:02")}
        for gi, di, net, gmac, dmac in links.values():
            _ip("-n", g, "link", "add", gi, "address", gmac, "type", "veth", "peer", "name", di, "netns", d,
                "address", dmac)
            _ip("-n", g, "addr", "add", f"{net}.1/24", "dev", gi)
            _ip("-n", d, "addr", "add", f"{net}.2/24", "dev", di)
            _ip("-n", g, "link", "set", gi, "up")
            _ip("-n", d, "link", "set", di, "up")
            _ip("-n", g, "neigh", "replace", f"{net}.2", "lladdr", dmac, "nud", "permanent", "dev", gi)
            _ip("-n", d, "neigh", "replace", f"{net}.1", "lladdr", gmac, "nud", "permanent", "dev", di)
        _ip("-n", d, "route", "add", "10.210.0.0/16", "via", "10.201.2.1", "dev", SGI)    # the PDN
        _ip("-n", g, "route", "add", "10.64.0.0/16", "via", "10.201.2.2", "dev", "gen-sgi")  # UEs, downlink
        subprocess.run(["ip", "netns", "exec", d, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        yield g, d
    finally:
        for ns in made:
            _ip("netns", "del", ns, check=False)


@pytest.mark.lab
@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_a_socket_and_tun_upfs_loss_is_located(two_namespaces, direction):
    """A UPF that does not read while the traffic comes: uplink, its N3 socket's buffer overflows
    (udp_rcvbuf), downlink its TUN device's queue does (tun_tx_dropped); then it forwards what it
    held. Every packet the generator sent is placed: conservation exact, nothing unexplained."""
    g, d = two_namespaces
    fw = Forwarder(d, "10.201.1.2", "10.201.1.1")
    kp = None
    try:
        _ip("-n", d, "link", "set", TUN, "up")
        _ip("-n", d, "route", "add", "10.64.0.0/16", "dev", TUN)
        kp = kernelpath.KernelPath(d, (ACC, SGI), _ethtool(d))
        gin, gout = ("gen-acc", "gen-sgi") if direction == "uplink" else ("gen-sgi", "gen-acc")
        g0, c0 = _gen_dev(g), kp.counters()

        def send():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            if direction == "uplink":
                inner = _ipv4_udp("10.64.0.5", "10.210.0.9", b"x" * 64)
                pkt, to = struct.pack("!BBHI", 0x30, 0xFF, len(inner), 1) + inner, ("10.201.1.2", GTP)
            else:
                pkt, to = b"y" * 64, ("10.64.0.5", 5001)
            for _ in range(N):
                s.sendto(pkt, to)
            s.close()
        netns.run_in(g, send)
        time.sleep(0.2)
        fw.go.set()                                  # now it reads and forwards what is left
        c1 = kp.counters()
        time.sleep(0.1)
        g1 = _gen_dev(g)
        gen_tx = g1[gin]["tx_packets"] + g1[gin]["tx_dropped"] - g0[gin]["tx_packets"] - g0[gin]["tx_dropped"]
        lost_in = g1[gin]["tx_dropped"] - g0[gin]["tx_dropped"]
        gen_rx = g1[gout]["rx_packets"] - g0[gout]["rx_packets"]
        cons, dd, pl = balance(c0, c1, direction, gen_tx, gen_rx, lost_in)
        print(direction, cons.message(), pl["detail"])
        place = "udp_rcvbuf" if direction == "uplink" else "tun_tx_dropped"
        assert gen_tx == N and 0 < gen_rx < N
        assert cons.ok, cons.message()
        assert "unexplained" not in cons.places
        # the overflow is where the loss is, and is all of it
        assert cons.places.get(place, 0) == N - gen_rx - lost_in, cons.places
        if direction == "uplink":
            assert pl["detail"]["n3_socket_drops"] == cons.places["udp_rcvbuf"]
    finally:
        fw.close()
        if kp is not None:
            kp.close()
