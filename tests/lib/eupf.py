"""eUPF in the tests: the lab config embedded-eupf (with its vars changed, e.g. feature_ftup), a skip
naming the reason when its runtime is absent, and eUPF's own view (its REST API and Prometheus
endpoint, on the lab's N4 link, read from the lab's control-plane namespace; its metrics through
gtplab's one Prometheus parser, gtplab/dut/prometheus.py). Used by tests/lab/test_eupf.py and
tests/dataplane/test_suite_correctness.py.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from gtplab.dut.prometheus import _match, same_metric, scrape
from gtplab.kernel.netns import run_in
from tests.lib import REPO
from tests.lib import external_upf as X

LAB_CONFIG = REPO / "gtplab/lab/labs/embedded-eupf.yaml"


def lab_config(tmp_path: Path | None = None, dut: dict | None = None, **vars_):
    """embedded-eupf as a LabConfig; with vars (e.g. feature_ftup="true") or dut keys (e.g.
    {"counters": "kernel"}: None removes a key), a copy in tmp_path (tests/lib/external_upf.py)."""
    return X.lab_config("embedded-eupf", tmp_path, dut, **vars_)


require_runtime = X.require_runtime


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def api(lab, path: str):
    """eUPF's REST API (api_address {n4}:8080), e.g. api(lab, "/api/v1/pfcp_sessions")."""
    return json.loads(run_in(lab.cp_ns, _get, f"http://{lab.addressing.dut_n4}:8080{path}"))


def metric(lab, selector: str, default: float | None = None) -> float:
    """The sample of eUPF's Prometheus endpoint ({n4}:9090) that a selector names, e.g.
    'upf_pfcp_rx{message_name="Heartbeat Response"}': its name and exactly its labels (in any order),
    both read by gtplab.dut.prometheus (prometheus_client's parser, which names a counter's samples
    NAME_total, as OpenMetrics does, though eUPF writes NAME: either name selects them). A sample it
    does not have is a LookupError naming those it has of that name, never 0 (a renamed metric or
    label would read as "nothing counted"); `default` is for a caller that expects it may be absent:
    eUPF's labelled counters have no sample before their first count."""
    name, labels = _match(selector)
    rows = run_in(lab.cp_ns, scrape, f"http://{lab.addressing.dut_n4}:9090/metrics")
    got = [v for n, lb, v in rows if same_metric(n, name) and lb == labels]
    if len(got) == 1:
        return got[0]
    if got:
        raise LookupError(f"eUPF's metrics have {len(got)} samples {selector} (as {name} and {name}_total)")
    if default is not None:
        return default
    have = [f"{n}{lb or ''} {v:g}" for n, lb, v in rows if same_metric(n, name)]
    raise LookupError(f"eUPF's metrics have no sample {selector}; of that name: {have or 'none'}")


def sessions(lab) -> list[dict]:
    """eUPF's sessions (/api/v1/pfcp_sessions: null when it has none)."""
    return api(lab, "/api/v1/pfcp_sessions") or []
