"""Rates on the wire: what a frame costs on the link, line rate, and TRex's rate multipliers.

    L1_OVERHEAD   bytes a frame costs on the link beyond the frame itself (FCS included in the frame
                  size): preamble 7, SFD 1, inter-frame gap 12 = 20
    line_rate_pps(port_speed_bps, frame_size)     frames per second a port carries (10 GbE, 64 B: 14.88 Mpps)
    wire_rates(pps, frame_size)                   pps as Mpps and Gb/s L1 and L2
    parse_mult(mult) -> (kind, value)             "2x", "10kpps", "1gbps", "1gbpsl1", "50%"
    mult_pps(mult, frame_size, port_speed_bps)    a multiplier as pps for one frame size

Frame sizes here are bytes on the wire including the FCS. Used by the embedded engine (a stream's
rate, the port's rate multiplier, its L1 counters), the lab config (thresholds in % of line rate),
the runner (TRex's measured rates in L1) and the sweep (a fixed rate, a case's NDR in Gb/s). A module
of its own, beside errors.py, because all of them use it and it uses none of them.
"""

from __future__ import annotations

import re

from gtplab.errors import UserError

FCS_LEN = 4
L1_OVERHEAD = 20        # preamble (7) + SFD (1) + inter-frame gap (12)


class RateError(UserError):
    """A rate multiplier that means nothing (the message says why)."""


def line_rate_pps(port_speed_bps: float, frame_size: int) -> float:
    """Frames per second a port carries at frame_size (FCS included) plus L1_OVERHEAD bytes of
    preamble, SFD and inter-frame gap: 10 GbE, 64 B: 14.88 Mpps."""
    return port_speed_bps / ((frame_size + L1_OVERHEAD) * 8)


def l1_bps(bps_l2: float, pps: float) -> float:
    """The L1 bit rate of a stream of pps frames whose L2 bit rate is bps_l2."""
    return bps_l2 + pps * L1_OVERHEAD * 8


def wire_rates(pps: float | None, frame_size: int) -> dict[str, float | None]:
    """pps as Mpps and Gb/s on the wire: L2 (frame incl. FCS) and L1 (+ preamble, SFD, IFG)."""
    if pps is None:
        return {"mpps": None, "gbps_l2": None, "gbps_l1": None}
    return {"mpps": pps / 1e6, "gbps_l2": pps * frame_size * 8 / 1e9,
            "gbps_l1": pps * (frame_size + L1_OVERHEAD) * 8 / 1e9}


def parse_mult(mult) -> tuple[str, float]:
    """TRex multiplier: "2"/"2x" factor, "10kpps", "1.5gbps" (L2), "1gbpsl1", "50%" of line rate."""
    if isinstance(mult, (int, float)) and not isinstance(mult, bool):
        if mult <= 0:
            raise RateError(f"mult {mult!r} must be positive")
        return "factor", float(mult)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kmgKMG]?)(x|pps|bps|bpsl1|%)?\s*",
                     str(mult))
    if not m:
        raise RateError(f"mult '{mult}' is not understood (e.g. 2x, 10kpps, 1gbps, 1gbpsl1, 50%)")
    val = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
    unit = m.group(3) or "x"
    if val <= 0:
        raise RateError(f"mult '{mult}' must be positive")
    if unit == "%" and m.group(2):
        raise RateError(f"mult '{mult}': no k/m/g with %")
    return {"x": "factor", "pps": "pps", "bps": "bps_l2", "bpsl1": "bps_l1", "%": "percent"}[unit], val


def mult_pps(mult, frame_size: int, port_speed_bps: float) -> float | None:
    """The frames per second a multiplier asks for at one frame size (FCS included); None for a
    factor, which scales the streams' own rates and so says nothing without them."""
    kind, val = parse_mult(mult)
    return {"pps": val, "bps_l2": val / (frame_size * 8), "bps_l1": val / ((frame_size + L1_OVERHEAD) * 8),
            "percent": val / 100 * line_rate_pps(port_speed_bps, frame_size)}.get(kind)
