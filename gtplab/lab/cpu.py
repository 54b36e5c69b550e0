"""The lab's CPU layout: which CPUs run the traffic generator and which run the DUT.

Used by gtplab.lab.topology (pins the lab's NAPI threads), gtplab.lab.config (the `cpus:` key of a
lab config) and gtplab.lab.cli (--generator-cpus/--dut-cpus); the threads it pins are found with
gtplab.kernel.threads. Why the lab splits CPUs this way: docs/lab.md, "The measurement model".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gtplab.errors import LabError


@dataclass
class CpuLayout:
    """Which CPUs run the generator (engine threads, its receive NAPI) and which run the DUT (its
    receive NAPI, hence its XDP programs)."""
    generator: list[int]
    dut: list[int]

    @classmethod
    def default(cls) -> "CpuLayout":
        """Half the CPUs this process may use for each, the generator's first (2 CPUs: 0 and 1);
        with one CPU both share it (the lab says so)."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return cls(cpus, cpus)
        half = len(cpus) // 2
        return cls(cpus[:half], cpus[half:])

    @classmethod
    def parse(cls, data: Any, where: str = "cpus") -> "CpuLayout":
        """From {generator: N | [N..] | "N-M,K", dut: ...} (None or "auto": default())."""
        if data is None or data == "auto":
            return cls.default()
        if not isinstance(data, dict) or set(data) != {"generator", "dut"}:
            raise LabError(f"{where}: give {{generator: CPUS, dut: CPUS}} (e.g. generator: 0, dut: 1) or auto")
        have = set(os.sched_getaffinity(0))
        out = {}
        for side in ("generator", "dut"):
            cpus = cpu_list(data[side], f"{where}.{side}")
            missing = sorted(set(cpus) - have)
            if missing:
                raise LabError(f"{where}.{side}: CPU(s) {cpu_text(missing)} not available here "
                               f"(this process may use {cpu_text(sorted(have))})")
            out[side] = cpus
        return cls(**out)

    def shared(self) -> list[int]:
        return sorted(set(self.generator) & set(self.dut))


def cpu_list(v: Any, where: str) -> list[int]:
    """A CPU list from an int, a list of ints or a cpulist string ("0-3,8")."""
    if isinstance(v, bool):
        raise LabError(f"{where}: {v!r} is not a CPU list")
    if isinstance(v, int):
        v = [v]
    if isinstance(v, str):
        out = []
        try:
            for part in filter(None, v.replace(" ", "").split(",")):
                lo, _, hi = part.partition("-")
                out += list(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise LabError(f"{where}: {v!r} is not a CPU list (e.g. 1, [2, 3] or \"2-3\")") from None
        v = out
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool)
                                                    and x >= 0 for x in v):
        raise LabError(f"{where}: {v!r} is not a CPU list (e.g. 1, [2, 3] or \"2-3\")")
    if len(set(v)) != len(v):
        raise LabError(f"{where}: CPU listed twice in {v}")
    return sorted(v)


def cpu_text(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def overridden(base: CpuLayout, generator: str | None, dut: str | None) -> dict[str, str] | None:
    """--generator-cpus/--dut-cpus over base as a layout's {generator, dut} text (None when neither
    is given); LabError for CPUs this host has not. `gtplab lab up` and `gtplab upftest` take them so."""
    if generator is None and dut is None:
        return None
    text = {"generator": generator or cpu_text(base.generator), "dut": dut or cpu_text(base.dut)}
    CpuLayout.parse(text, "--generator-cpus/--dut-cpus")
    return text
