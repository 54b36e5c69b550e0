"""gtplab/traffic/backend.py: backend choice, the TRex client subprocess (JSON lines). The runs against a
real TRex server are in tests/trex/test_trex.py."""

from __future__ import annotations

import time

import pytest
import scapy

from gtplab.traffic.backend import Backend
from gtplab.traffic.trex.client import TrexClient, TrexError, _int_keys, parse_server
from gtplab.errors import UserError
from tests.lib.lab import leftovers
from tests.lib.streams import PROFILE



def test_parse_server():
    assert parse_server("10.0.0.5") == {"server": "10.0.0.5", "sync_port": 4501, "async_port": 4500}
    assert parse_server("trex:5501") == {"server": "trex", "sync_port": 5501, "async_port": 5500}
    assert parse_server("trex:5501:6000")["async_port"] == 6000
    for bad in ("", ":4501", "host:x", "a:1:2:3"):
        with pytest.raises(UserError):
            parse_server(bad)


def test_int_keys():
    assert _int_keys({"0": {"opackets": 1}, "total": {}, "flow_stats": {"7": {"tx_pkts": {"1": 3}}}}) == \
        {0: {"opackets": 1}, "total": {}, "flow_stats": {7: {"tx_pkts": {1: 3}}}}


def test_backend_choice_errors(monkeypatch):
    monkeypatch.delenv("TREX_SERVER", raising=False)
    monkeypatch.delenv("GTPLAB_BACKEND", raising=False)
    with pytest.raises(UserError, match="unknown backend"):
        Backend.open("ixia")
    with pytest.raises(UserError, match="needs a server"):
        Backend.open("trex")


def test_trex_worker_loads_profile_with_its_own_scapy(tmp_path):
    """The TRex library runs in the worker with its bundled Scapy; this process keeps Scapy 2.8."""
    prof = tmp_path / "prof_tiny.py"
    prof.write_text(PROFILE)
    c = TrexClient()
    try:
        v = c.call("version")
        assert v["scapy"] != scapy.VERSION and scapy.VERSION.startswith("2.8")
        (s,) = c.profile_streams(str(prof), tunables={"flows": 9})
        assert s["mode"]["type"] == "continuous" and s["mode"]["rate"]["value"] == 10
        var = next(i for i in s["vm"]["instructions"] if i["type"] == "flow_var")
        assert var["name"] == "src" and var["max_value"] - var["min_value"] == 8  # --flows 9 reached it
        with pytest.raises(TrexError, match="does not exist"):
            c.profile_streams(str(tmp_path / "missing.py"))
        # the worker survives an error and keeps answering
        assert len(c.profile_streams(str(prof))) == 1
    finally:
        c.close()


@pytest.mark.lab
def test_local_backend_builds_drives_and_removes_a_lab(tmp_path):
    """Backend.open("local") builds a lab, connects the engine; close() removes the lab again."""
    prof = tmp_path / "prof_tiny.py"
    prof.write_text(PROFILE)
    with Backend.open("local", dut="tx") as be:   # the DUT reflects: port 0 receives what it sends
        assert be.kind == "local" and be.lab is not None
        name = be.lab.name
        c = be.client
        c.reset(ports=[0, 1])
        assert len(c.load_profile(str(prof), ports=[0], tunables={"flows": 3})) == 1
        c.clear_stats()
        c.start(ports=[0], mult="1000pps", duration=0.5)
        c.wait_on_traffic(ports=[0], timeout=30)
        deadline = time.monotonic() + 5
        while (st := c.get_stats())[0]["ipackets"] < st[0]["opackets"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 300 <= st[0]["opackets"] <= 700, st[0]
        assert st[0]["ipackets"] == st[0]["opackets"]
    assert leftovers(name) == []
