"""The real lab on one machine (issue 34.B): tools/multihost/lab.py builds three nspawn container hosts
(monitoring, dut, trex), runs ansible/site.yml against them, then `gtplab sweep --backend trex` through
the TRex host against the DUT host (uplink and downlink, 128 B, 20 kpps x 3 s), each case pushed to the
monitoring host's Pushgateway and read back from its Prometheus, then the same sweep with its sessions
over PFCP to the DUT host's `pgwu pfcp` on the management network, both with background frames written
on the data links from both hosts in every trial (tools/multihost/background.py, the sweep's
--on-trial-start), conservation exact with them counted by kind; then `gtplab pairs` over two generator
port pairs of the one TRex host (its four af_packet ports) into the DUT host's pgwu attached to both
(the dut role's dut_pairs), uplink and downlink, 2 trials each at 20 kpps per pair, conservation exact
over both pairs, each pair's packets back on that pair, background frames on all four links counted on
their pair; and removes everything. Deselected by
`./setup.sh test` (marker multihost): minutes, root, debootstrap and systemd-nspawn, the Debian archive."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.lib import REPO

pytestmark = pytest.mark.multihost


@pytest.mark.timeout(3600)
def test_site_yml_on_three_container_hosts():
    if os.geteuid() != 0:
        pytest.skip("builds containers, a bridge and veths: needs root")
    for tool in ("debootstrap", "systemd-nspawn"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (apt-get install debootstrap systemd-container)")
    cp = subprocess.run([sys.executable, str(REPO / "tools/multihost/lab.py"), "run"],
                        capture_output=True, text=True, timeout=3500)
    out = cp.stdout + cp.stderr
    print(out[-4000:])                           # times and results, with -s
    assert cp.returncode == 0, out[-6000:]
    assert "site.yml rc=0" in out, out[-6000:]
    assert "sweep rc=0" in out and "Prometheus on the monitoring host has 2 case series" in out, out[-6000:]
    # the same sweep with its sessions over N4 to the DUT host's pgwu pfcp (management network)
    assert "sweep_pfcp rc=0" in out and "PFCP over the management network: 2 cases, not all forwarded: none" in out, \
        out[-6000:]
    # background frames (ARP, ND, LLDP, a stray datagram) written on both data links from both hosts
    # in the middle of every trial of both sweeps: conservation exact, each kind counted where it went
    for sweep in ("sweep", "sweep_pfcp"):
        assert re.search(rf"\] {sweep} background written in \d+ trials; of the cases' 2 recorded trials, "
                         r"exact with it, each kind counted: 2;", out), out[-6000:]
    # two generator port pairs in one case: pgwu attached to both on the DUT host, `gtplab pairs`
    for direction in ("uplink", "downlink"):
        assert f"pairs_{direction} rc=0" in out, out[-6000:]
        assert re.search(rf"gtplab pairs {direction}: 2 trials over both pairs, exact with the background of all "
                         r"four links counted on its pair: 2;", out), out[-6000:]
    # ... and the same check fails with only one pair attached on the DUT host (pair 1's access detached)
    assert re.search(r"pairs_one_attached: pair 1's access eth3 detached on the DUT host \(detached\), gtplab pairs "
                     r"rc=1, conservation NOT exact", out), out[-6000:]
    leftovers = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    tag = next(line.split()[-2] for line in out.splitlines() if line.endswith(" removed"))
    assert tag not in leftovers
