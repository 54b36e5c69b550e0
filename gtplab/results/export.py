"""`gtplab export`: a time range of Prometheus series to CSV (CPU per core, XDP counters, sweep results).

Each query is evaluated with /api/v1/query_range over [--start, --end] every --step. Long format
(default) is one row per sample: query, timestamp, time, value, then one column per label (the union
over all series; empty where a series lacks the label; the metric name is the column `__name__`).
Wide format is one row per timestamp and one column per series, named `QUERY{label="v",...}`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
from datetime import datetime, timezone

from gtplab import bounded
from gtplab.errors import ResultsWriteError, UserError
from gtplab.results import store

DEFAULT_PROMETHEUS = "http://127.0.0.1:19090"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def default_queries(window: str) -> dict[str, str]:
    return {
        "cpu_seconds_per_second": f"sum by (instance, cpu, mode) (rate(node_cpu_seconds_total[{window}]))",
        "xdp_packets_per_second": f"sum by (instance, reason, verdict) (rate(pgwu_packets_total[{window}]))",
        "xdp_bytes_per_second": f"sum by (instance, reason, verdict) (rate(pgwu_bytes_total[{window}]))",
        "results": '{__name__=~"gtplab_case_.+", job="gtplab_sweep"}',
    }


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise UserError(f"{text!r} is not a duration (want e.g. 500ms, 15s, 10m, 2h, 1d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_time(text: str, now: float | None = None) -> float:
    """now, now-1h, Unix seconds, or ISO 8601 (naive = UTC) -> Unix seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    if t == "now":
        return now
    if t.startswith("now-"):
        return now - parse_duration(t[4:])
    try:
        v = float(t)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):
            raise UserError(f"{text!r} is not a time (want now, now-1h, Unix seconds or ISO 8601)")
        return v
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{text!r} is not a time (want now, now-1h, Unix seconds or ISO 8601)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def query_range(prometheus: str, expr: str, start: float, end: float, step: float,
                timeout: float = 30.0) -> list[dict]:
    """Prometheus /api/v1/query_range -> its result list ({metric: {...}, values: [[t, "v"], ...]})."""
    q = urllib.parse.urlencode({"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    url = f"{prometheus.rstrip('/')}/api/v1/query_range?{q}"
    try:
        body = json.loads(bounded.http_get(url, bounded.PROMETHEUS_QUERY_BYTES, timeout,
                                           what=f"Prometheus at {prometheus}", error=UserError))
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(bounded.read_at_most(e, bounded.HTTP_ERROR_BODY_BYTES, "its error")).get("error", e.reason)
        except (OSError, ValueError, AttributeError, UserError):
            msg = e.reason
        raise UserError(f"Prometheus refused {expr!r}: {msg}") from None
    except UserError:
        raise
    except (OSError, ValueError) as e:
        raise UserError(f"cannot query Prometheus at {prometheus}: {getattr(e, 'reason', e)}") from None
    if not isinstance(body, dict):
        raise UserError(f"Prometheus at {prometheus}: its answer is not a JSON object")
    if body.get("status") != "success":
        raise UserError(f"Prometheus error for {expr!r}: {body.get('error')}")
    return body["data"]["result"]


def series_name(query: str, metric: dict[str, str]) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()))
    return f"{query}{{{labels}}}"


def write_long(out, results: dict[str, list[dict]]) -> int:
    labels = sorted({k for res in results.values() for s in res for k in s["metric"]})
    w = csv.writer(out)
    w.writerow(["query", "timestamp", "time", "value", *labels])
    rows = 0
    for query, res in results.items():
        for s in res:
            for t, v in s["values"]:
                iso = datetime.fromtimestamp(float(t), timezone.utc).isoformat()
                w.writerow([query, t, iso, v, *(s["metric"].get(k, "") for k in labels)])
                rows += 1
    return rows


def write_wide(out, results: dict[str, list[dict]]) -> int:
    columns: dict[str, dict] = {}
    for query, res in results.items():
        for s in res:
            columns[series_name(query, s["metric"])] = {float(t): v for t, v in s["values"]}
    stamps = sorted({t for col in columns.values() for t in col})
    w = csv.writer(out)
    w.writerow(["timestamp", "time", *columns])
    for t in stamps:
        w.writerow([f"{t:.3f}", datetime.fromtimestamp(t, timezone.utc).isoformat(),
                    *(col.get(t, "") for col in columns.values())])
    return len(stamps)


def _option(flag: str, value: str, parse):
    """parse(value), its UserError naming the option."""
    try:
        return parse(value)
    except UserError as e:
        raise UserError(f"{flag} {value!r}: {e}") from None


def do_export(args: argparse.Namespace) -> int:
    now = time.time()
    end = _option("--end", args.end, lambda v: parse_time(v, now))
    start = _option("--start", args.start, lambda v: parse_time(v, now))
    step = _option("--step", args.step, parse_duration)
    window = _option("--rate-window", args.rate_window, parse_duration)
    if start >= end:
        raise UserError(f"--start ({args.start}) must be before --end ({args.end})")
    if step <= 0:
        raise UserError(f"--step {args.step!r} must be > 0")
    if window <= 0:
        raise UserError(f"--rate-window {args.rate_window!r} must be > 0")
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        raise UserError(f"--timeout {args.timeout}: seconds, > 0 and at most 3600")
    queries: dict[str, str] = {}
    for q in args.query:
        name, sep, expr = q.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not expr.strip():
            raise UserError(f"--query {q!r}: want NAME=PROMQL (NAME a plain identifier)")
        queries[name] = expr
    if not queries:
        queries = default_queries(args.rate_window)
    if args.output != "-":          # before Prometheus is asked: a read-only or full -o costs no query
        store.check_writable(args.output, "the export")
    results = {name: query_range(args.prometheus, expr, start, end, step, args.timeout)
               for name, expr in queries.items()}
    write = write_wide if args.format == "wide" else write_long
    if args.output == "-":
        rows = write(sys.stdout, results)
    else:
        tmp = f"{args.output}.tmp{os.getpid()}"
        try:
            with open(tmp, "w", newline="") as f:
                rows = write(f, results)
            os.replace(tmp, args.output)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise ResultsWriteError(f"Couldn't write the export {args.output}: {e.strerror or e}") from None
    nseries = sum(len(r) for r in results.values())
    print(f"exported {nseries} series, {rows} rows ({args.format}) to {args.output}", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write a time range of Prometheus series to CSV",
                       description=__doc__.splitlines()[0])
    p.add_argument("--prometheus", default=os.environ.get("GTPLAB_PROMETHEUS", DEFAULT_PROMETHEUS),
                   metavar="URL", help="Prometheus URL (default: $GTPLAB_PROMETHEUS or %(default)s)")
    p.add_argument("--start", default="now-1h", help="now, now-1h, Unix seconds or ISO 8601 (default: %(default)s)")
    p.add_argument("--end", default="now", help="same forms as --start (default: %(default)s)")
    p.add_argument("--step", default="5s", help="resolution (default: %(default)s)")
    p.add_argument("--rate-window", default="15s",
                   help="rate() window of the default queries; >= 4 scrape intervals (default: %(default)s)")
    p.add_argument("--query", action="append", default=[], metavar="NAME=PROMQL",
                   help="export this query instead of the defaults (CPU per core, XDP counters, results); repeatable")
    p.add_argument("--format", choices=("long", "wide"), default="long", help="(default: %(default)s)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait for each query's answer (default: %(default)s)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.csv", help="output file, - for stdout")
    p.set_defaults(func=do_export)
