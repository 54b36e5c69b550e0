"""Where a UPF test's results go: the results directory (run.json + cases.jsonl + cases.csv, as
gtplab/results/store.py writes them for the sweep; run.json kind "upftest"), the report
(report.md and report/index.html: the verdict of each kind and every case with its figures), the
Pushgateway (job gtplab_upftest, one group per case) and the verdict table over several runs
(`gtplab upftest table DIR...`, docs/upftests.md).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from gtplab.results import store

JOB = "gtplab_upftest"
# "measured": a figure without a criterion (policing: the loss of a burst larger than the required
# tolerance); it counts neither for nor against the kind's verdict
VERDICTS = ("pass", "fail", "not supported", "measured")
FIGURES = ("delivered_bps", "alone_bps", "mbr_bps", "offered_bps", "error_ratio", "lost_packets", "burst",
           "burst_bytes", "max_burst", "tolerance_bytes", "tolerance_ms", "first_lost_bytes", "missing", "duplicates",
           "end_markers_old", "switch_ms", "gap_ms", "p50_ms", "p99_ms", "rate_per_s")


def summary(cases: list[dict]) -> dict:
    """A kind's verdict: "not supported" if any case is, else "fail" if any fails, else "pass";
    with counts."""
    n = {v: sum(1 for c in cases if c.get("verdict") == v) for v in VERDICTS}
    verdict = ("not supported" if n["not supported"] and not n["pass"] else
               "fail" if n["fail"] or n["not supported"] else "pass" if n["pass"] else "fail")
    return {"verdict": verdict, "counts": n, "cases": len(cases)}


def write(results_dir: Path, run: dict, cases: list[dict]) -> None:
    run = dict(run, summary=summary(cases))
    store.write_run(results_dir, run)
    for c in cases:
        c.setdefault("direction", "both")           # what results/store.py requires of a case
        c.setdefault("frame_size", 0)
        c.setdefault("criterion", "")
        store.append_case(results_dir, c)
    (results_dir / "report.md").write_text(markdown(run, cases))
    rep = results_dir / "report"
    rep.mkdir(exist_ok=True)
    (rep / "index.html").write_text(page(run, cases))


def _fig(c: dict) -> str:
    parts = []
    for k in FIGURES:
        v = c.get(k)
        if v is None:
            continue
        if k.endswith("_bps"):
            parts.append(f"{k[:-4]} {v / 1e6:.3f} Mb/s")
        elif isinstance(v, float):
            parts.append(f"{k} {v:.4g}")
        else:
            parts.append(f"{k} {v}")
    return ", ".join(parts)


def markdown(run: dict, cases: list[dict]) -> str:
    s = run["summary"]
    lines = [f"# gtplab upftest {run['test']}: {run['upf']}", "",
             f"lab config {run['lab_config']}, {run['started']}, command `{run.get('command', '')}`", "",
             f"**{s['verdict']}**: {s['counts']['pass']} pass, {s['counts']['fail']} fail, "
             f"{s['counts']['not supported']} not supported"
             + (f", {s['counts']['measured']} measured (no criterion)" if s['counts'].get('measured') else "")
             + f" of {s['cases']} cases", "",
             "| case | verdict | criterion | figures | why |", "|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c['case_id']} | {c['verdict']} | {c.get('criterion', '')} | {_fig(c)} | "
                     f"{c.get('why', '')} |")
    return "\n".join(lines) + "\n"


def page(run: dict, cases: list[dict]) -> str:
    rows = "".join(f"<tr class='{html.escape(c['verdict'].replace(' ', '-'))}'><td>{html.escape(c['case_id'])}</td>"
                   f"<td>{html.escape(c['verdict'])}</td><td>{html.escape(c.get('criterion', ''))}</td>"
                   f"<td>{html.escape(_fig(c))}</td><td>{html.escape(c.get('why', ''))}</td></tr>" for c in cases)
    s = run["summary"]
    return (f"<!doctype html><meta charset='utf-8'><title>gtplab upftest {html.escape(run['test'])}</title>"
            "<style>td,th{border:1px solid #ccc;padding:2px 6px}.fail{background:#fdd}.pass{background:#dfd}"
            ".not-supported{background:#eee}</style>"
            f"<h1>gtplab upftest {html.escape(run['test'])}: {html.escape(run['upf'])}</h1>"
            f"<p>{html.escape(run['lab_config'])}, {html.escape(run['started'])}: <b>{s['verdict']}</b> "
            f"({s['counts']})</p><table><tr><th>case</th><th>verdict</th><th>criterion</th><th>figures</th>"
            f"<th>why</th></tr>{rows}</table><pre>{html.escape(json.dumps(run, indent=1))}</pre>")


def registry(run: dict, case: dict) -> CollectorRegistry:
    """One case's gauges: gtplab_upftest_case_pass (1 pass, 0 fail, -1 not supported; none for a
    "measured" case, which has no criterion) and its figures (gtplab_upftest_case_value{figure=...})."""
    reg = CollectorRegistry()
    if case.get("verdict") != "measured":
        v = {"pass": 1, "fail": 0}.get(case.get("verdict"), -1)
        Gauge("gtplab_upftest_case_pass", "1 pass, 0 fail, -1 not supported (the UPF rejected it)",
              ["upf", "test"], registry=reg).labels(upf=run["upf"], test=run["test"]).set(v)
    g = Gauge("gtplab_upftest_case_value", "A measured figure of the case (rates in bit/s, times in ms)",
              ["upf", "test", "figure"], registry=reg)
    for k in FIGURES:
        x = case.get(k)
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            g.labels(upf=run["upf"], test=run["test"], figure=k).set(float(x))
    return reg


def push(gateway: str, run: dict, cases: list[dict], timeout: float = 5.0) -> int:
    """Push every case (grouping key: uuid, case_id, and the policing cases' frame_size and burst:
    labels of every series of the case); returns how many were pushed."""
    n = 0
    for c in cases:
        key = {"uuid": run["uuid"], "case_id": c["case_id"]}
        for k in ("frame_size", "burst"):
            if c.get(k) is not None and run.get("test") == "policing":
                key[k] = str(c[k])
        push_to_gateway(gateway, job=JOB, registry=registry(run, c), timeout=timeout, grouping_key=key)
        n += 1
    return n


def table(dirs: list[str]) -> str:
    """The verdict table of several upftest runs: one row per UPF, one column per test kind."""
    runs = [store.read_run(d) for d in dirs]
    upfs = list(dict.fromkeys(r["upf"] for r in runs))
    kinds = list(dict.fromkeys(r["test"] for r in runs))
    cell = {}
    for d, r in zip(dirs, runs):
        cases = store.read_cases(d)
        s = r["summary"]
        fails = [c for c in cases if c.get("verdict") not in ("pass", "measured")]
        why = "; ".join(f"{c['case_id']}: {c.get('why', '')}" for c in fails[:2])
        measured = s["counts"].get("measured", 0)
        tol = [c for c in cases if c.get("tolerance_bytes") is not None]
        extra = ""
        if tol:       # policing: the UPF's burst tolerance over its sessions and directions
            b, ms = [c["tolerance_bytes"] for c in tol], [c["tolerance_ms"] or 0 for c in tol]
            extra = (f"; burst tolerance {min(b)}-{max(b)} octets ({min(ms):.1f}-{max(ms):.1f} ms at the MBR; "
                     f"{tol[0]['min_burst_bytes']} required)")
        cell[(r["upf"], r["test"])] = (f"**{s['verdict']}** ({s['counts']['pass']}/{s['cases'] - measured} pass"
                                       + (f", {measured} measured" if measured else "") + ")" + extra
                                       + (f": {why}" if why else ""))
    lines = ["| UPF | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for u in upfs:
        lines.append(f"| {u} | " + " | ".join(cell.get((u, k), "not run").replace("|", "/") for k in kinds) + " |")
    return "\n".join(lines) + "\n"
