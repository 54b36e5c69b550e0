"""RFC 9971's names of a search goal, below the layers that search (gtplab.measure.mlrsearch) and
that read results (gtplab.results): the dense code of appendix C ("0.5f1d0l50e": final trial
duration, duration sum, loss ratio and exceed ratio, the two ratios in percent) and a short name with
the code beside it ("NDR [0.5f1d0l50e]"). Imports nothing of gtplab."""

from __future__ import annotations

from typing import Any, Mapping


def pct(ratio: float) -> str:
    """A ratio as a short percentage: 0.005 -> '0.5', 0 -> '0', 0.5 -> '50'."""
    return f"{ratio * 100:.6g}"


def dense(final: float, dsum: float, loss: float, exceed: float) -> str:
    return f"{final:g}f{dsum:g}d{pct(loss)}l{pct(exceed)}e"


def dense_code(attrs: Mapping[str, Any] | None) -> str | None:
    """RFC 9971 appendix C's dense code of a goal record (SearchGoal.as_dict(), as results files keep
    it): its `rfc_code` when it has one, else computed from the four required attributes; None when
    a record lacks them (results of fixed-rate cases, hand-written records)."""
    if not attrs:
        return None
    if attrs.get("rfc_code"):
        return str(attrs["rfc_code"])
    try:
        return dense(float(attrs["final_trial_duration"]), float(attrs["duration_sum"]),
                      float(attrs["loss_ratio"]), float(attrs["exceed_ratio"]))
    except (KeyError, TypeError, ValueError):
        return None


def label(code: str, rfc_code: str | None) -> str:
    """A short name with its dense code beside it: 'NDR [0.5f1d0l50e]'; the code alone when the short
    name is the dense code (a goal without a name) or the dense code is unknown."""
    return code if not rfc_code or rfc_code == code else f"{code} [{rfc_code}]"
