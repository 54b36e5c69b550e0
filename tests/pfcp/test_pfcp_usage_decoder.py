"""The one Usage Report decoder (gtplab.pfcp.messages.usage_report): what the sweep's sessions read
through scan() and what the UPF tests read through usage_reports() come from the same bytes the same
way, Start and End Time included, and a short field is a malformed message for both."""

from __future__ import annotations

import struct

import pytest
from scapy.contrib import pfcp as sp

from gtplab.pfcp import messages as m
from gtplab.pfcp.errors import PfcpMalformed

T0 = 1_800_000_000          # Unix seconds


def _ie(t: int, v: bytes) -> bytes:
    return struct.pack("!HH", t, len(v)) + v


def _report(urr_id: bytes = struct.pack("!I", 7), *, start: int = T0, end: int = T0 + 5) -> bytes:
    vol = struct.pack("!B6Q", 0x3F, 3000, 1000, 2000, 30, 10, 20)
    ies = (_ie(m.IE_URR_ID, urr_id) + _ie(m.IE_UR_SEQN, struct.pack("!I", 2))
           + _ie(m.IE_USAGE_REPORT_TRIGGER, bytes([0x01, 0x00, 0x00]))      # PERIO, 3 octets (Rel-16+)
           + _ie(m.IE_VOLUME_MEASUREMENT, vol) + _ie(m.IE_DURATION_MEASUREMENT, struct.pack("!I", 5))
           + _ie(m.IE_START_TIME, struct.pack("!I", start + m.NTP_UNIX_OFFSET))
           + _ie(m.IE_END_TIME, struct.pack("!I", end + m.NTP_UNIX_OFFSET)))
    msg = bytearray(bytes(m.header(m.SESS_REPORT_REQ, 9, 0x55))[:16] + bytes(sp.IE_ReportType(USAR=1))
                    + _ie(m.IE_USAGE_REPORT_SRR, ies))
    struct.pack_into("!H", msg, 2, len(msg) - 4)
    return bytes(msg)


def test_scan_and_usage_reports_read_one_report_alike():
    buf = _report()
    (u,) = m.usage_reports(buf, at=123.0)
    assert (u.urr, u.seqn, u.triggers, u.volume, u.packets, u.duration) == \
        (7, 2, ["PERIO"], (3000, 1000, 2000), (30, 10, 20), 5)
    assert (u.start, u.end, u.at, u.where) == (T0, T0 + 5, 123.0, "report")
    assert m.scan(buf).usage == {7: u.volume}


@pytest.mark.parametrize("reader", [m.scan, m.usage_reports], ids=["scan", "usage_reports"])
def test_a_short_urr_id_is_malformed_for_every_reader(reader):
    with pytest.raises(PfcpMalformed, match="URR ID"):
        reader(_report(urr_id=b"\x00\x07"))
