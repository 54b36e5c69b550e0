"""A sweep case's results record (docs/results.md): one typed structure, written as JSON by
`to_dict()` to cases.jsonl, cases.csv and the Pushgateway. The fields' order is the JSON's; a field
a case does not have (a fixed-rate case has no goals, a case without latency no latency_pdr, a
sweep without --flamegraph no flamegraph) is ABSENT and left out of the dict, never written null.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


class _Absent:
    """The value of a field the case does not have: to_dict() leaves it out."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

# what the case record copies from its recorded trial, under the same names
CASE_KEYS = ("offered_pps", "offered_bps_l1", "offered_bps_l2", "rx_pps", "rx_bps_l1", "rx_bps_l2",
             "tx_packets", "rx_packets", "loss_ratio", "latency_us", "dut", "conservation")


@dataclass(kw_only=True)
class CaseRecord:
    # the case (measure.plan.CaseParams)
    case_id: str
    direction: str
    frame_size: int
    requested_frame_size: int
    flows: int
    flow_mode: str
    order: str
    ip: str
    n3: str
    checksum: str
    bearers: int
    # generator port pairs driven together (gtplab.measure.pairs): only with several
    pairs: int = ABSENT
    rate_mode: str
    duration_s: float
    # the recorded trial (CASE_KEYS)
    offered_pps: float | None
    offered_bps_l1: float | None
    offered_bps_l2: float | None
    rx_pps: float | None
    rx_bps_l1: float | None
    rx_bps_l2: float | None
    tx_packets: int | None
    rx_packets: int | None
    loss_ratio: float | None
    latency_us: dict | None
    dut: dict
    conservation: dict
    rate_asked: Any
    status: str
    # the result: goal..goals, search, disturbance and latency_pdr only for a searched case
    goal: str | None = ABSENT
    goal_rfc_code: str = ABSENT
    goals: dict = ABSENT
    limit: str | None
    generator_bound: bool
    ndr_pps: float | None
    ndr: dict
    search: dict = ABSENT
    disturbance: dict | None = ABSENT
    latency_pdr: dict = ABSENT
    # every trial, and what the case's result rests on
    conservation_ok: bool
    # frames of its trials that were not the test's, by place and kind, summed over the trials
    # (gtplab/measure/conservation.py, Background); only where the generator counts them (the engine)
    background: dict = ABSENT
    trials: list[dict]
    rx_path: dict | None
    host: dict
    cost: dict
    tunables: dict
    pcap: str | None
    notes: list[str]
    end_timestamp: float
    premises: list[dict] = ABSENT
    decided: bool = ABSENT
    # set by the sweep that ran it
    run_uuid: str = ABSENT
    flamegraph: str = ABSENT

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON data, in the fields' order, without the ABSENT ones (values shared, not copied)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not ABSENT}
