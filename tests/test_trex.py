"""Against a real TRex server (v3.08, DPDK af_packet on a veth pair in a namespace of its own:
tests/trex_server.py, the `trex_server` fixture in conftest.py): the backend's client, TRex's
capture, and the profiles of trex_profiles/ as TRex sends them (docs/trex.md)."""

from __future__ import annotations

import subprocess
import time

import pytest

from gtplab.backend import Backend, TrexClient
from tests.test_backend import PROFILE

pytestmark = pytest.mark.trex


@pytest.fixture(scope="module")
def client(trex_server):
    c = TrexClient(trex_server.server, netns=trex_server.netns)
    c.connect()
    try:
        yield c
    finally:
        try:
            c.reset(ports=[0, 1])
        finally:
            c.disconnect()


def test_trex_server_short_run(trex_server, tmp_path):
    """Backend.open("trex") in the server's namespace: one stream (TRex returns a plain int for it),
    200 packets at 100 pps, all sent by port 0 and received by port 1 over the veth pair."""
    prof = tmp_path / "prof_tiny.py"
    prof.write_text(PROFILE)
    with Backend.open("trex", server=trex_server.server, netns=trex_server.netns) as be:
        c = be.client
        c.reset(ports=[0, 1])
        ids = c.load_profile(str(prof), ports=[0], direction=0)
        assert len(ids) == 1 and isinstance(ids[0], int)
        c.clear_stats()
        c.start(ports=[0], mult="100pps", duration=2)
        c.wait_on_traffic(ports=[0], timeout=30)
        deadline = time.monotonic() + 5
        while (st := c.get_stats())[1]["ipackets"] < st[0]["opackets"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 190 <= st[0]["opackets"] <= 210, st[0]
        assert st[1]["ipackets"] == st[0]["opackets"], (st[0], st[1])
        c.reset(ports=[0, 1])
