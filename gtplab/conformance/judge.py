"""The judge: what a case's packets should have made the UPF send (Expect: frames on the other port,
frames back to the sending port) against what the lab captured (Got). Pure: no lab, no UPF, so a
fake capture tests it (tests/conformance/test_judge.py).

A verdict is "pass" when the capture is the spec's expectation exactly (as multisets, after the
case's normalisation); "departs" when it is exactly what the UPF's known departures predict
(gtplab/conformance/departs.py); else "fail" with the first packet that differs: a captured frame
nothing expected (with the expected frame closest to it), or an expected frame that never came,
each as a Scapy repr and in hex.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from scapy.layers.l2 import Ether


@dataclass(frozen=True)
class Like:
    """A frame that cannot be predicted byte for byte (e.g. a kernel's ICMP error, whose id and quote
    length are the kernel's): a test and what it stands for."""
    what: str
    test: Callable[[bytes], bool]

    def __call__(self, frame: bytes) -> bool:
        return bool(self.test(frame))


@dataclass
class Expect:
    fwd: list = field(default_factory=list)     # [(bytes | Like, count)] on the other port
    back: list = field(default_factory=list)    # [(bytes | Like, count)] back on the sending port


@dataclass
class Got:
    fwd: list[bytes]
    back: list[bytes]


def show(frame: bytes | Like | None) -> dict | None:
    """A frame for a report: its Scapy repr and hex (a Like: its description)."""
    if frame is None:
        return None
    if isinstance(frame, Like):
        return {"like": frame.what}
    try:
        scapy = Ether(frame).command()
    except Exception as e:          # a frame Scapy cannot dissect is still shown in hex
        scapy = f"(not dissected: {e})"
    return {"scapy": scapy, "hex": bytes(frame).hex()}


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def first_difference(expected: list, got: list[bytes], norm=None) -> dict | None:
    """None when got is exactly expected (each item matched as many times as its count, nothing
    else); else the first difference: {"why": "unexpected" | "missing", "expected", "got"}."""
    norm = norm or (lambda f: f)
    left = [[(norm(e) if isinstance(e, (bytes, bytearray)) else e), n] for e, n in expected]
    for g in got:
        ng = norm(g)
        for item in left:
            e, n = item
            if n > 0 and (e == ng if isinstance(e, (bytes, bytearray)) else e(ng)):
                item[1] -= 1
                break
        else:
            rest = [e for e, n in left if n > 0] or [e for e, _ in left]
            exact = [e for e in rest if isinstance(e, (bytes, bytearray))]
            near = max(exact, key=lambda e: _common_prefix(e, ng)) if exact else (rest[0] if rest else None)
            return {"why": "unexpected", "got": show(g), "expected": show(near)}
    for e, n in left:
        if n > 0:
            return {"why": "missing", "expected": show(e), "got": None, "times": n}
    return None


def compare(exp: Expect, got: Got, norm=None, norm_back=None) -> dict | None:
    """The first difference on either port (the forwarded side first), with "port" set; None if none.
    norm: applied to forwarded frames, expected and captured alike; norm_back: to frames back."""
    for port, e, g, nm in (("forwarded", exp.fwd, got.fwd, norm), ("back", exp.back, got.back, norm_back)):
        d = first_difference(e, g, nm)
        if d:
            return {"port": port, **d}
    return None


def counts(got: list[bytes]) -> dict:
    return dict(Counter(len(g) for g in got))


def judge(spec: Expect, got: Got, *, departing: Expect | None = None, causes: list[str] = (),
          norm=None, norm_back=None) -> dict:
    """The case's verdict: {"result": "pass"} when got is spec's; {"result": "departs", "cause": ...}
    when it is what the UPF's known departures (departing, their causes) predict; else {"result":
    "fail", "diff": the first difference against what was expected of this UPF (its departures'
    prediction when it has some for this case, else the spec's), "spec_diff" too when those differ}."""
    d = compare(spec, got, norm, norm_back)
    if d is None:
        return {"result": "pass"}
    if departing is None:
        return {"result": "fail", "diff": d}
    dd = compare(departing, got, norm, norm_back)
    if dd is None:
        return {"result": "departs", "cause": "; ".join(causes)}
    return {"result": "fail", "diff": dd, "spec_diff": d,
            "note": "neither the spec's output nor the UPF's known departures (" + "; ".join(causes) + ")"}
