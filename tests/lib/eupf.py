"""eUPF in the tests: the lab config embedded-eupf (with its vars changed, e.g. feature_ftup), a skip
naming the reason when its runtime is absent, and eUPF's own view (its REST API and Prometheus
endpoint, on the lab's N4 link, read from the lab's control-plane namespace). Used by
tests/lab/test_eupf.py and tests/dataplane/test_suite_correctness.py.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

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


def metric(lab, name: str) -> float:
    """A sample of eUPF's Prometheus endpoint ({n4}:9090), e.g.
    'upf_pfcp_rx{message_name="Heartbeat Response"}' (0 when absent)."""
    for line in run_in(lab.cp_ns, _get, f"http://{lab.addressing.dut_n4}:9090/metrics").splitlines():
        k, _, v = line.rpartition(" ")
        if k == name:
            return float(v)
    return 0.0


def sessions(lab) -> list[dict]:
    """eUPF's sessions (/api/v1/pfcp_sessions: null when it has none)."""
    return api(lab, "/api/v1/pfcp_sessions") or []
