"""tests/lib/eupf.py's metric() reads eUPF's Prometheus text through gtplab's one parser
(gtplab/dut/prometheus.py, prometheus_client's): a sample is its name and exactly its labels, in any
order, and one the endpoint does not have is an error, never 0 (a renamed metric or label read as 0
would pass a test that expects none). A unit test: the endpoint is a canned exposition, as eUPF's
Go client writes it; no lab, no eUPF."""

from __future__ import annotations

import io
import urllib.request
from types import SimpleNamespace

import pytest

from tests.lib import eupf as E

EXPOSITION = b"""\
# HELP upf_pfcp_rx The total number of received PFCP messages
# TYPE upf_pfcp_rx counter
upf_pfcp_rx{message_name="Association Setup Request"} 1
upf_pfcp_rx{message_name="Heartbeat Response"} 7
# HELP upf_xdp_drop The total number of dropped packets
# TYPE upf_xdp_drop counter
upf_xdp_drop 3
# HELP upf_rx_gtp_pdu The total number of received GTP PDU packets
# TYPE upf_rx_gtp_pdu counter
upf_rx_gtp_pdu{packet_type="gtp-pdu",direction="uplink"} 12
"""

LAB = SimpleNamespace(cp_ns=None, addressing=SimpleNamespace(dut_n4="192.0.2.1"))


@pytest.fixture
def endpoint(monkeypatch):
    """eUPF's metrics endpoint answering EXPOSITION; the URLs asked, in order."""
    asked = []

    class Answer(io.BytesIO):           # what urlopen returns: a body with headers (no Content-Length)
        headers: dict = {}

    def urlopen(url, timeout=None):
        asked.append(url)
        return Answer(EXPOSITION)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return asked


def test_a_sample_is_read_by_its_name_and_labels(endpoint):
    assert E.metric(LAB, 'upf_pfcp_rx{message_name="Heartbeat Response"}') == 7
    assert E.metric(LAB, "upf_xdp_drop") == E.metric(LAB, "upf_xdp_drop_total") == 3   # the parser's name
    assert E.metric(LAB, 'upf_rx_gtp_pdu{direction="uplink",packet_type="gtp-pdu"}') == 12
    assert endpoint == ["http://192.0.2.1:9090/metrics"] * 4


def test_a_caller_that_expects_a_sample_may_be_absent_says_so(endpoint):
    """eUPF has no sample of a labelled counter before its first count: a baseline read says what
    absent means there."""
    assert E.metric(LAB, 'upf_pfcp_rx{message_name="Heartbeat Request"}', default=0) == 0
    assert E.metric(LAB, 'upf_pfcp_rx{message_name="Heartbeat Response"}', default=0) == 7


@pytest.mark.parametrize("selector", [
    'upf_pfcp_rx{message_name="Heartbeat Request"}',   # a label value it has not counted
    "upf_pfcp_rxx",                                     # a name it does not have
    "upf_pfcp_rx",                                      # only labelled samples of that name
    'upf_rx_gtp_pdu{direction="uplink"}',               # fewer labels than the sample has
    'upf_xdp_drop{direction="uplink"}',                 # more
])
def test_an_absent_sample_is_an_error_not_0(endpoint, selector):
    with pytest.raises(LookupError, match="no sample"):
        E.metric(LAB, selector)
