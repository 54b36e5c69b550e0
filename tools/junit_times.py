#!/usr/bin/env python3
"""The suite's time per test file, from a JUnit report, as the markdown table of docs/testing.md.

    .venv/bin/python tools/junit_times.py                       # prints the table for results/junit.xml
    .venv/bin/python tools/junit_times.py REPORT --write docs/testing.md
                                                                # replaces the table between its markers

One row per test file, slowest first: its tests, how many were skipped (undecided ones among them) and
failed, its time (setup, call and teardown of every test, as pytest's JUnit report counts it) and its
slowest test. The first line says which run it was: when, how many tests, how long.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- junit_times:begin -->", "<!-- junit_times:end -->"
UNDECIDED = "undecided:"        # tests/conftest.py: a skip that says the test could not decide


def _file_of(case: ET.Element) -> str:
    """The test file of a testcase: its `file` attribute (junit_family xunit1), else from its classname
    (tests.pfcp.test_pfcp_cp[.TestClass]): the longest prefix that is a file."""
    if case.get("file"):
        return case.get("file")
    parts = case.get("classname", "").split(".")
    for n in range(len(parts), 0, -1):
        p = "/".join(parts[:n]) + ".py"
        if (REPO / p).is_file():
            return p
    return "/".join(parts) + ".py"


def _utc(stamp: str | None) -> str:
    """pytest's timestamp (ISO 8601, local time, with its offset since pytest 8) as 'YYYY-MM-DD HH:MM' UTC;
    one without an offset is taken as UTC."""
    try:
        t = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return "?"
    return (t.astimezone(timezone.utc) if t.tzinfo else t).strftime("%Y-%m-%d %H:%M")


def table(report: Path) -> str:
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    rows: dict[str, dict] = defaultdict(lambda: {"tests": 0, "skipped": 0, "undecided": 0, "failed": 0,
                                                 "time": 0.0, "slowest": (0.0, "")})
    for case in root.iter("testcase"):
        r = rows[_file_of(case)]
        t = float(case.get("time") or 0)
        r["tests"] += 1
        r["time"] += t
        r["slowest"] = max(r["slowest"], (t, case.get("name", "")))
        skip = case.find("skipped")
        if skip is not None:
            r["skipped"] += 1
            r["undecided"] += (skip.get("message") or "").startswith(UNDECIDED)
        if case.find("failure") is not None or case.find("error") is not None:
            r["failed"] += 1
    total = sum(float(s.get("time") or 0) for s in suites)
    when = _utc(suites[0].get("timestamp")) if suites else "?"
    out = [f"From {report.name} of a run started {when} UTC: {sum(r['tests'] for r in rows.values())} tests, "
           f"{total / 60:.1f} min (`tools/junit_times.py`).", "",
           "| file | tests | skipped (undecided) | failed | time | slowest test |", "|---|---|---|---|---|---|"]
    for f, r in sorted(rows.items(), key=lambda kv: -kv[1]["time"]):
        name = Path(f).name
        slow_t, slow = r["slowest"]
        out.append(f"| [{name}](../{f}) | {r['tests']} | {r['skipped']} ({r['undecided']}) | {r['failed']} | "
                   f"{r['time']:.0f} s | {slow_t:.0f} s `{slow[:70]}` |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", nargs="?", default=str(REPO / "results" / "junit.xml"), help="a JUnit XML report")
    ap.add_argument("--write", metavar="MD", help=f"replace the text between {BEGIN} and {END} in MD")
    a = ap.parse_args(argv)
    t = table(Path(a.report))
    if not a.write:
        sys.stdout.write(t)
        return 0
    md = Path(a.write)
    s = md.read_text()
    if s.count(BEGIN) != 1 or s.count(END) != 1:
        print(f"{md}: needs one {BEGIN} and one {END}", file=sys.stderr)
        return 1
    head, rest = s.split(BEGIN)
    md.write_text(head + BEGIN + "\n" + t + END + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
