"""The Prometheus text of a UPF read by prometheus_client's parser (issue 33): label values holding
the characters a regex reader breaks on, and a selector with them, still match the right series."""

import pytest

from gtplab.dut import prometheus
from tests.lib.http_server import serving


@pytest.fixture
def endpoint():
    text = {"body": ""}
    with serving(get=lambda path: (200, text["body"].encode())) as url:
        yield text, f"{url}/metrics"


EXPOSITION = """# HELP upf_packets_total Packets by interface.
# TYPE upf_packets_total counter
upf_packets_total{iface="n3",note="a \\"quoted\\" } brace"} 120
upf_packets_total{iface="n6",note="plain"} 999
upf_packets_total{iface="n3",note="back\\\\slash"} 7
# TYPE upf_up gauge
upf_up 1
"""


def test_label_values_with_quotes_braces_and_backslashes_are_read_whole(endpoint):
    text, url = endpoint
    text["body"] = EXPOSITION
    rows = prometheus.scrape(url)
    assert ("upf_packets_total", {"iface": "n3", "note": 'a "quoted" } brace'}, 120.0) in rows
    assert ("upf_packets_total", {"iface": "n3", "note": "back\\slash"}, 7.0) in rows
    assert ("upf_up", {}, 1.0) in rows and len(rows) == 4


def test_a_selector_with_an_escaped_quote_sums_only_its_series(endpoint):
    from types import SimpleNamespace
    text, url = endpoint
    text["body"] = EXPOSITION
    cfg = SimpleNamespace(path="t", dut={"prometheus": {"url": url, "metrics": {
        "fwd": 'upf_packets_total{note="a \\"quoted\\" } brace"}', "rx": 'upf_packets_total{iface="n3"}'}}})
    d = prometheus.PrometheusDut(cfg)
    assert d.counters() == {("upf_fwd", "tx"): 120, ("upf", "drop"): 0, ("upf_unaccounted", "other"): 7}


def test_an_endpoint_answering_something_else_is_one_that_did_not_answer(endpoint):
    text, url = endpoint
    text["body"] = "<html>login</html>\n"
    with pytest.raises(OSError, match="did not answer Prometheus text"):
        prometheus.scrape(url)


@pytest.mark.parametrize("sel", ["a{", "a b", "1a", 'a{x="1"', ""])
def test_a_malformed_selector_is_refused_in_the_lab_config(sel):
    from gtplab.errors import UserError
    with pytest.raises(UserError, match="use name or name"):
        prometheus.parse_prometheus({"url": "http://h:1/m", "metrics": {"fwd": sel}}, "lab config t")


def test_a_counter_written_without_total_is_summed_by_the_name_its_text_gives(endpoint):
    """prometheus_client's parser names a counter's samples NAME_total even when the text writes NAME
    (eUPF a8d774a: `# TYPE upf_xdp_drop counter` then `upf_xdp_drop{...} 5`): a selector naming
    upf_xdp_drop still counts them (it summed 0 before, silently)."""
    from types import SimpleNamespace
    text, url = endpoint
    text["body"] = ("# TYPE upf_xdp_drop counter\nupf_xdp_drop{iface=\"n3\"} 5\nupf_xdp_drop{iface=\"n6\"} 2\n"
                    "# TYPE upf_xdp_redirect_total counter\nupf_xdp_redirect_total 40\n"
                    "# TYPE upf_rx gauge\nupf_rx 50\n")
    cfg = SimpleNamespace(path="t", dut={"prometheus": {"url": url, "metrics": {
        "fwd": "upf_xdp_redirect", "drop": ["upf_xdp_drop", 'upf_xdp_drop_total{iface="n6"}'], "rx": "upf_rx"}}})
    d = prometheus.PrometheusDut(cfg)
    assert d.counters() == {("upf_fwd", "tx"): 40, ("upf", "drop"): 9, ("upf_unaccounted", "other"): 1}
