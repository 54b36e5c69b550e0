"""The sweep's case record (gtplab/measure/caserecord.py): its JSON is the one the sweep wrote before
the record was typed, byte for byte. case_record_golden.json holds what run_case returned then, with
the fake runner (tests/lib/fake_runner.py) and the clock fixed, for a searched case, a searched case
with latency points and a fixed-rate case; a renamed, reordered or dropped field fails here. No lab.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from gtplab.lab import config as labconfig
from gtplab.measure import plan, sweep
from gtplab.measure.caserecord import ABSENT, CaseRecord
from gtplab.results import store as results
from tests.lib.fake_runner import FakeRunner

GOLDEN = json.loads((Path(__file__).parent / "case_record_golden.json").read_text())


def _records(tmp: Path) -> dict[str, dict]:
    """What run_case returns for the golden's three cases (the same calls that captured it)."""
    cfg = labconfig.load("embedded")
    out = {}
    with mock.patch.object(sweep.time, "time", return_value=1767225600.0):
        spec = plan.validate({"frame_sizes": [64, 128], "directions": ["uplink"], "rate_mode": "search",
                              "pcap_limit": 8, "search": {"latency_duration": 0.1}})
        p64, p128 = plan.plan(spec)[0]
        out["search"] = sweep.run_case(FakeRunner(), p64, spec, cfg, tmp / "pcaps", None)
        out["search_latency"] = sweep.run_case(FakeRunner(), p128, spec, cfg, None, None)
        spec = plan.validate({"frame_sizes": [256], "directions": ["downlink"], "rate_mode": "fixed",
                              "rate": 100000, "pcap_limit": 0})
        (pf,) = plan.plan(spec)[0]
        out["fixed"] = sweep.run_case(FakeRunner(), pf, spec, cfg, None, None)
    return out


def test_run_case_writes_the_golden_records(tmp_path):
    got = _records(tmp_path)
    for kind, want in GOLDEN.items():
        assert list(got[kind]) == list(want), kind           # the same fields in the same order
        assert json.dumps(got[kind]) == json.dumps(want), kind


@pytest.mark.parametrize("kind", sorted(GOLDEN))
def test_a_record_built_from_its_fields_gives_them_back(kind):
    want = GOLDEN[kind]
    rec = CaseRecord(**want)
    assert json.dumps(rec.to_dict()) == json.dumps(want)
    # the sweep's own fields come last, in this order, and only once set
    rec.run_uuid, rec.flamegraph = "u", "flamegraphs/case-x.svg"
    assert list(rec.to_dict())[-2:] == ["run_uuid", "flamegraph"]
    assert list(rec.to_dict())[:-2] == list(want)


def test_a_case_without_a_field_leaves_it_out_and_a_null_stays():
    fixed = CaseRecord(**GOLDEN["fixed"])
    assert fixed.goals is ABSENT and "goals" not in fixed.to_dict() and "latency_pdr" not in fixed.to_dict()
    assert fixed.to_dict()["pcap"] is None and "pcap" in fixed.to_dict()


def test_cases_jsonl_and_csv_are_the_same_bytes(tmp_path):
    """results.append_case of a record's to_dict() and of the golden dict write the same files."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        results.write_run(d, {"uuid": "u", "started": "2026-01-01T00:00:00+00:00", "backend": "local",
                              "lab": "embedded", "host": "h"})
    for kind in sorted(GOLDEN):
        results.append_case(a, {**GOLDEN[kind], "run_uuid": "u"})
        rec = CaseRecord(**GOLDEN[kind])
        rec.run_uuid = "u"
        results.append_case(b, rec.to_dict())
    for name in (results.CASES_FILE, results.CSV_FILE):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
