"""Where a UPF test's results go: the results directory (run.json + cases.jsonl + cases.csv, as
gtplab/results/store.py writes them for the sweep; run.json kind "upftest"), the report
(report.md and report/index.html: the verdict of each kind and every case with its figures), the
Pushgateway (job gtplab_upftest, one group per case) and the verdict table over several runs
(`gtplab upftest table DIR...`, docs/upftests.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from gtplab.errors import ResultsWriteError
from gtplab.pfcp import messages as m
from gtplab.results import store

JOB = "gtplab_upftest"
# "measured": a figure without a criterion (policing: the loss of a burst larger than the required
# tolerance); it counts neither for nor against the kind's verdict. "not decided": a premise of the
# case did not hold (criteria.decide: the load not offered as asked, the handover's switch after the
# traffic ...), so neither pass nor fail; counted apart
VERDICTS = ("pass", "fail", "not supported", "not decided", "measured")
FIGURES = ("delivered_bps", "alone_bps", "mbr_bps", "offered_bps", "error_ratio", "lost_packets", "burst",
           "burst_bytes", "max_burst", "lost_before_policer", "tolerance_bytes", "tolerance_ms", "first_lost_bytes",
           "missing", "duplicates", "end_markers_old", "switch_ms", "gap_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms",
           "rate_per_s")


def summary(cases: list[dict]) -> dict:
    """A kind's verdict: "not supported" if any case is and none passes, else "fail" if any fails
    or is not supported, else "not decided" if any case is (its premises did not hold: what passed
    is not the whole kind), else "pass" (a case passed); with counts."""
    n = {v: sum(1 for c in cases if c.get("verdict") == v) for v in VERDICTS}
    verdict = ("not supported" if n["not supported"] and not n["pass"] else
               "fail" if n["fail"] or n["not supported"] else "not decided" if n["not decided"] else
               "pass" if n["pass"] else "fail")
    return {"verdict": verdict, "counts": n, "cases": len(cases)}


def counts_text(counts: dict) -> str:
    """'3 pass, 1 fail, 0 not supported, 2 not decided, 4 measured' (the last two when nonzero)."""
    return (f"{counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
            f"{counts.get('not supported', 0)} not supported"
            + (f", {counts['not decided']} not decided" if counts.get("not decided") else "")
            + (f", {counts['measured']} measured" if counts.get("measured") else ""))


def write(results_dir: Path, run: dict, cases: list[dict]) -> None:
    run = dict(run, summary=summary(cases))
    store.write_run(results_dir, run)
    for c in cases:
        c.setdefault("direction", "both")           # what results/store.py requires of a case
        c.setdefault("frame_size", 0)
        c.setdefault("criterion", "")
        store.append_case(results_dir, c)
    write_report(results_dir, run, cases)


def write_report(results_dir: Path, run: dict, cases: list[dict]) -> None:
    """report.md, and report/index.html with the kind's plot (gtplab.upftests.plots: report/<kind>.svg;
    a plot that cannot be drawn is a note on the page, never a lost report)."""
    (results_dir / "report.md").write_text(markdown(run, cases))
    rep = results_dir / "report"
    rep.mkdir(exist_ok=True)
    from gtplab.upftests import plots
    name, note = f"{run.get('test')}.svg", ""
    draw = plots.PLOTS.get(run.get("test"))
    try:
        drawn = bool(draw) and draw(rep / name, cases)
    except Exception as e:          # noqa: BLE001 -- the report goes on without its plot, saying why
        drawn, note = False, f"plot not drawn: {type(e).__name__}: {e}"
    if not drawn:
        with contextlib.suppress(OSError):
            (rep / name).unlink()
        note = note or ("no plot: no case has figures to draw yet" if draw else "")
    (rep / "index.html").write_text(page(run, cases, name if drawn else None, note))


def rewrite_report(results_dir: str | os.PathLike) -> Path:
    """report.md and report/index.html again from the run's records (`gtplab report DIR` of an
    upftest run): a run killed before it wrote them (SIGKILL, out of memory, a reboot) gets them,
    saying it was cut short and after how many of its planned cases. Returns the page's path."""
    d = Path(results_dir)
    run = store.read_run(d)
    if run.get("status") == "running" and _writer_alive(d):
        raise store.ResultsError(f"{d}: the upftest run is still running (pid {run.get('pid', '?')}); "
                                 "it writes its report when it ends")
    cases = store.read_cases(d, run.get("uuid"))
    run = dict(run, summary=summary(cases))
    if run.get("status") != "complete":     # as Recorder.end says it: the finished cases are not the kind's verdict
        run["summary"]["verdict"] = run["status"] if run.get("status") in ("interrupted", "error") else "cut short"
    write_report(d, run, cases)
    return d / "report" / "index.html"


# how a run ended (run.json's status): running until it ends; complete (every case run); interrupted
# (SIGINT/SIGTERM, with the signal); error (with the error's text and, for an N4 failure, the exchange)
STATUSES = ("running", "complete", "interrupted", "error")
RESERVE, RESERVE_BYTES = ".gtplab-reserve", 32 << 10     # room kept for the last run.json (a full disk)
_NO_ANSWER = re.compile(r"to (?P<message>[a-z ]+ request) \(seq (?P<seq>\d+)\) after (?P<sends>\d+) sends?")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def exchange_of(e: BaseException) -> dict | None:
    """The PFCP exchange an error came from, for run.json: {message, seq, sends, answer ("no answer"
    or the Cause), cause}; what the harness attached (Upf._exchange), else what the node's timeout
    says (the association's requests), else a rejection's Cause; None for another error."""
    x = getattr(e, "exchange", None)
    if x:
        return dict(x)
    mt = _NO_ANSWER.search(str(e))
    if mt and "no answer" in str(e):
        return {"message": mt["message"], "seq": int(mt["seq"]), "sends": int(mt["sends"]), "answer": "no answer"}
    cause = getattr(e, "cause", None)
    if isinstance(cause, int):
        return {"message": getattr(e, "message", "") or getattr(e, "what", ""),
                "answer": f"cause {m.cause_name(cause)}", "cause": cause}
    return None


def exchange_text(x: dict) -> str:
    """'no answer to session establishment request after 4 sends', 'session deletion request: cause 64 (...)'."""
    if x.get("answer") == "no answer":
        n = x.get("sends")
        return f"no answer to {x.get('message')}" + (f" after {n} send{'s' if n != 1 else ''}" if n else "")
    return f"{x.get('message')}: {x.get('answer')}"


class Recorder:
    """One upftest run's results directory while it runs: run.json written at the start (status
    running) and again at the end with how the run ended; each case appended to cases.jsonl (flushed
    and fsynced, with the run's uuid) as the test kind finishes it; the report at the end. Every
    write error is a ResultsWriteError naming the directory."""

    def __init__(self, rdir: Path, run: dict):
        self.rdir, self.run = Path(rdir), run
        self.cases: list[dict] = []
        self._ids: set[int] = set()
        self.t0 = time.monotonic()
        self.on_case = None         # called after each case is written (the CLI's progress line)

    def _write_run(self) -> None:
        try:
            store.write_run(self.rdir, self.run)
        except OSError as e:
            raise ResultsWriteError(f"Couldn't write {self.rdir / store.RUN_FILE}: {e.strerror or e}") from None

    def start(self) -> None:
        self.run.update(status="running", cases_done=0)
        self._write_run()
        try:
            (self.rdir / RESERVE).write_bytes(bytes(RESERVE_BYTES))
        except OSError as e:
            with contextlib.suppress(OSError):
                (self.rdir / RESERVE).unlink()
            raise ResultsWriteError(f"Couldn't write results to {self.rdir}: {e.strerror or e}") from None

    def update(self, **kw) -> None:
        """run.json again with kw (the lab's name once it is built)."""
        self.run.update(kw)
        self._write_run()

    def case(self, c: dict) -> None:
        """Append one finished case (once: a case already written is not written again)."""
        if id(c) in self._ids:
            return
        c.setdefault("direction", "both")           # what results/store.py requires of a case
        c.setdefault("frame_size", 0)
        c.setdefault("criterion", "")
        c["run_uuid"] = self.run["uuid"]
        try:
            store.append_case(self.rdir, c)
        except OSError as e:
            raise ResultsWriteError(f"Couldn't write case {c.get('case_id')} to {self.rdir}: {e.strerror or e}; "
                                    f"{len(self.cases)} case(s) before it are there") from None
        self._ids.add(id(c))
        self.cases.append(c)
        self.run["cases_done"] = len(self.cases)
        self._write_run()                   # run.json counts what finished, should the run be killed
        if self.on_case is not None:
            self.on_case(c)

    def end(self, status: str, signal: str | None = None, error: BaseException | None = None) -> None:
        """run.json with how the run ended, then the report; never raises (the first failure is
        printed by the caller's error, a failure here only loses the report)."""
        # the cases as cases.jsonl holds them: a signal between a case's line and its count here
        # must not make run.json say one less than was written
        with contextlib.suppress(OSError, store.ResultsError):
            if (self.rdir / store.CASES_FILE).exists():
                self.cases = store.read_cases(self.rdir, self.run["uuid"])
        self.run.update(status=status, ended=_now(), elapsed_s=round(time.monotonic() - self.t0, 1),
                        cases_done=len(self.cases), summary=summary(self.cases))
        if status != "complete":            # what the cases it finished say is not the kind's verdict
            self.run["summary"]["verdict"] = status
        if signal:
            self.run["interrupted"] = {"signal": signal, "at": self.run["ended"]}
        if error is not None:
            err = {"text": str(error) or type(error).__name__, "type": type(error).__name__}
            x = exchange_of(error)
            if x:
                err["exchange"] = x
            self.run["error"] = err
        with contextlib.suppress(OSError):
            (self.rdir / RESERVE).unlink()
        try:
            self._write_run()
            write_report(self.rdir, self.run, self.cases)
        except (OSError, ResultsWriteError) as e:
            print(f"gtplab upftest: results of {self.rdir} not completed: {e}", file=sys.stderr, flush=True)


def ending_text(run: dict, results_dir: str | os.PathLike | None = None) -> str:
    """How a run that did not complete ended, in words ('' for a complete run): 'interrupted (SIGTERM)
    after 3 of 7 cases', 'error after 0 of 2 cases: no answer to session establishment request after
    4 sends'."""
    st = run.get("status")
    done, planned = run.get("cases_done"), run.get("cases_planned")
    of = f"{done if done is not None else '?'} of {planned} cases" if planned else f"{done or 0} cases"
    if st == "interrupted":
        sig = (run.get("interrupted") or {}).get("signal")
        return f"interrupted{f' ({sig})' if sig else ''} after {of}"
    if st == "error":
        err = run.get("error") or {}
        why = exchange_text(err["exchange"]) if err.get("exchange") else (err.get("text") or "").splitlines()[0][:200] \
            if err.get("text") else "unknown error"
        return f"error after {of}: {why}"
    if st == "running":
        alive = results_dir is not None and _writer_alive(results_dir)
        return f"running, {of} so far" if alive else f"cut short (no end recorded) after {of}"
    return ""


def _writer_alive(results_dir: str | os.PathLike) -> bool:
    """Whether the process that claimed the run's directory still holds it (its flock)."""
    d = results_dir
    try:
        fd = os.open(Path(d) / store.LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


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


def sharing_text(run: dict, cases: list[dict]) -> str:
    """Who else ran on the lab's CPUs: "" when nobody did (or the run predates the record)."""
    who = list(dict.fromkeys(list(run.get("cpus_shared_with") or [])
                             + [h for c in cases for h in c.get("cpus_shared_with") or []]))
    if not who:
        return ""
    n = sum(1 for c in cases if c.get("cpus_shared_with"))
    return (f"CPUs shared with {'; '.join(who)}"
            + (f" during {n} of {len(cases)} cases" if cases else "")
            + ": their figures are this host's as much as the UPF's")


def summary_words(run: dict, cases: list[dict]) -> str:
    """The run's verdict in a sentence: "Pass: all 108 decided cases passed; 24 more were measured
    (figures, no criterion)." / "Fail: 80 of 108 decided cases failed, 28 passed; ..." """
    s = summary(cases)
    n = s["counts"]
    decided = n["pass"] + n["fail"] + n["not supported"]
    v = s["verdict"]
    if not cases:
        out = "No case finished"
    elif v == "pass":
        out = f"Pass: {'the' if n['pass'] == 1 else 'all'} {n['pass']} decided case{'s' * (n['pass'] != 1)} passed"
    elif v == "not supported":
        out = (f"Not supported: the UPF rejected what {n['not supported']} of {decided} decided cases asked for "
               "(its Cause in each case's why); none passed")
    elif v == "fail":
        out = (f"Fail: {n['fail']} of {decided} decided cases failed"
               + (f", {n['not supported']} not supported" if n["not supported"] else "")
               + f", {n['pass']} passed")
    else:
        out = f"Not decided: {n['pass']} decided case{'s' * (n['pass'] != 1)} passed"
    if n.get("not decided"):
        out += (f"; {n['not decided']} not decided (a premise did not hold, which says nothing against the UPF: "
                "run again on a quieter host)")
    if n.get("measured"):
        out += f"; {n['measured']} more measured (figures, no criterion)"
    return out + "."


def markdown(run: dict, cases: list[dict]) -> str:
    s = run["summary"]
    lines = [f"# gtplab upftest {run['test']}: {run['upf']}", "",
             f"lab config {run['lab_config']}, {run['started']}, command `{run.get('command', '')}`", "",
             f"**{s['verdict']}**: {s['counts']['pass']} pass, {s['counts']['fail']} fail, "
             f"{s['counts']['not supported']} not supported"
             + (f", {s['counts']['not decided']} not decided (a premise did not hold)"
                if s['counts'].get('not decided') else "")
             + (f", {s['counts']['measured']} measured (no criterion)" if s['counts'].get('measured') else "")
             + f" of {s['cases']} cases", "", summary_words(run, cases), ""]
    if ending_text(run):
        lines += [f"**{ending_text(run)}**", ""]
    if sharing_text(run, cases):
        lines += [f"**{sharing_text(run, cases)}**", ""]
    lines += ["| case | verdict | criterion | figures | why |", "|---|---|---|---|---|"]
    for c in cases:
        lines.append(f"| {c['case_id']} | {c['verdict']} | {c.get('criterion', '')} | {_fig(c)} | "
                     f"{c.get('why', '')} |")
    return "\n".join(lines) + "\n"


RUN_FACTS = (("upf", "UPF"), ("lab_config", "lab config"), ("command", "command"), ("started", "started"),
             ("ended", "ended"), ("elapsed_s", "took (s)"), ("status", "status"), ("cases_planned", "cases planned"),
             ("cases_done", "cases done"), ("lab", "lab"), ("cpu_layout", "CPUs"), ("host", "host"), ("uuid", "run"))


def _facts(run: dict) -> str:
    def text(k, v):
        if k == "cpu_layout" and isinstance(v, dict):
            return "; ".join(f"{who} {','.join(map(str, cpus or []))}" for who, cpus in v.items())
        return str(v)
    rows = "".join(f"<tr><th>{label}</th><td>{html.escape(text(k, run[k]))}</td></tr>"
                   for k, label in RUN_FACTS if run.get(k) not in (None, "", []))
    return f"<table class='facts'>{rows}</table><p>Everything else: <a href='../run.json'>run.json</a>, " \
           "<a href='../cases.jsonl'>cases.jsonl</a>.</p>"


PLOT_TEXT = {
    "policing": "Each session and direction: the rate delivered against the load offered, one line per burst "
                "size (frames back to back at the same average rate), the MBR as the black line with its "
                "±1 % band in grey; the dotted diagonal is delivered = offered. Below each: above the MBR, "
                "delivered / MBR − 1 in %: inside the band passes.",
    "handover": "Each session: every downlink packet's sequence number against its arrival time, blue on the "
                "old path, orange on the new (downsampled to a few hundred points a path, the packets next to "
                "the switch all kept); the Update FAR's send (black) and answer (dashed), the End Marker on the "
                "old tunnel (red). A clean switch: blue ends, red, orange starts, no sequence number missing.",
    "usage": "Each session: its usage reports in order of arrival (labelled by trigger), their UL and DL octets "
             "added up, against the generator's count (dashed) and the threshold or quota (dotted).",
    "n4": "Each procedure: the time from request to answer, p50 / p90 / p99 / max over the batch, with the "
          "data plane idle and under load.",
}


def _verdict_html(run: dict, cases: list[dict]) -> str:
    """The summary in words, its verdict in bold ("<b>Fail</b>: 80 of 108 ..."); a run that did not
    complete says so first (run.json's verdict: interrupted, error)."""
    head, _, rest = summary_words(run, cases).partition(": ")
    v = (run.get("summary") or {}).get("verdict")
    cut = f"<b>{html.escape(str(v))}</b>; the cases that finished: " if v in ("interrupted", "error", "running", "cut short") else ""
    return f"<p class='verdict'>{cut}<b>{html.escape(head)}</b>" + (f": {html.escape(rest)}" if rest else "") + "</p>"


def page(run: dict, cases: list[dict], plot: str | None = None, plot_note: str = "") -> str:
    rows = "".join(f"<tr class='{html.escape(c['verdict'].replace(' ', '-'))}'><td>{html.escape(c['case_id'])}</td>"
                   f"<td>{html.escape(c['verdict'])}</td><td>{html.escape(c.get('criterion', ''))}</td>"
                   f"<td>{html.escape(_fig(c))}</td><td>{html.escape(c.get('why', ''))}</td></tr>" for c in cases)
    s = run["summary"]
    figure = ""
    if plot:
        figure = (f"<h2>{html.escape(run['test'])}</h2><p>{html.escape(PLOT_TEXT.get(run['test'], ''))}</p>"
                  f"<p><a href='{html.escape(plot)}'><img src='{html.escape(plot)}' alt='{html.escape(run['test'])} "
                  "plot' style='max-width:100%'></a></p>")
    elif plot_note:
        figure = f"<p class='note'>{html.escape(plot_note)}</p>"
    return (f"<!doctype html><meta charset='utf-8'><title>gtplab upftest {html.escape(run['test'])}</title>"
            "<style>body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;"
            "font-size:0.85em}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
            ".fail{background:#fdd}.pass{background:#dfd}.not-supported{background:#eee}"
            ".not-decided{background:#ffd}.facts th{background:#f4f4f4}.verdict{font-size:1.15em}"
            ".note{color:#555}</style>"
            f"<h1>gtplab upftest {html.escape(run['test'])}: {html.escape(run['upf'])}</h1>"
            + _verdict_html(run, cases)
            + (f"<p><b>{html.escape(ending_text(run))}</b></p>" if ending_text(run) else "")
            + (f"<p><b>{html.escape(sharing_text(run, cases))}</b></p>" if sharing_text(run, cases) else "")
            + _facts(run) + figure
            + "<h2>Cases</h2><table><tr><th>case</th><th>verdict</th><th>criterion</th><th>figures</th>"
            f"<th>why</th></tr>{rows}</table>")


def registry(run: dict, case: dict) -> CollectorRegistry:
    """One case's gauges: gtplab_upftest_case_pass (1 pass, 0 fail, -1 not supported; none for a
    "measured" case, which has no criterion, nor for a "not decided" one, which has
    gtplab_upftest_case_not_decided 1 instead: it is neither a pass nor a fail) and its figures
    (gtplab_upftest_case_value{figure=...})."""
    reg = CollectorRegistry()
    if case.get("verdict") == "not decided":
        Gauge("gtplab_upftest_case_not_decided", "1: a premise of the case did not hold, no verdict",
              ["upf", "test"], registry=reg).labels(upf=run["upf"], test=run["test"]).set(1)
    elif case.get("verdict") != "measured":
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


def _read(d: str) -> tuple[dict | None, list[dict], str]:
    """(run.json, its cases, '') of an upftest results directory, or (None, [], why not) for one
    without a readable run.json of an upftest run; a run whose cases cannot be read keeps its run
    and says why."""
    if not (Path(d) / store.RUN_FILE).exists():
        return None, [], "no run.json"
    try:
        r = store.read_run(d)
    except store.ResultsError as e:
        return None, [], str(e)
    if r.get("kind") != "upftest" and ("test" not in r or "upf" not in r):
        return None, [], f"not an upftest run (run.json kind {r.get('kind', 'sweep')})"
    if not (Path(d) / store.CASES_FILE).exists():
        return r, [], ""
    try:
        return r, store.read_cases(d, r.get("uuid") if "status" in r else None), ""
    except store.ResultsError as e:
        return r, [], str(e)


def table(dirs: list[str]) -> str:
    """The verdict table of several upftest runs: one row per UPF, one column per test kind. A run
    that did not complete is its cell's words (interrupted after N of M cases, the error: "no answer
    to session establishment request after 4 sends"); a directory without a readable run.json is a
    row of its own saying why."""
    read = [(d, *_read(d)) for d in dirs]
    upfs = list(dict.fromkeys(r["upf"] for _, r, _, _ in read if r))
    kinds = list(dict.fromkeys(r["test"] for _, r, _, _ in read if r)) or ["result"]
    cell, bad = {}, []
    for d, r, cases, problem in read:
        if r is None:
            bad.append((d, problem))
            continue
        s = r.get("summary") or summary(cases)
        # what did not pass: the failures first, then what was not decided (with why)
        fails = sorted((c for c in cases if c.get("verdict") not in ("pass", "measured")),
                       key=lambda c: c.get("verdict") == "not decided")
        why = "; ".join(f"{c['case_id']}: {c.get('why', '')}" for c in fails[:2])
        measured = s["counts"].get("measured", 0)
        undecided = s["counts"].get("not decided", 0)
        tol = [c for c in cases if c.get("tolerance_bytes") is not None]
        extra = ""
        if tol:       # policing: the UPF's burst tolerance over its sessions and directions
            b, ms = [c["tolerance_bytes"] for c in tol], [c["tolerance_ms"] or 0 for c in tol]
            extra = (f"; burst tolerance {min(b)}-{max(b)} octets ({min(ms):.1f}-{max(ms):.1f} ms at the MBR; "
                     f"{tol[0]['min_burst_bytes']} required)")
        ended = ending_text(dict(r, cases_done=len(cases)) if cases else r, d)
        if ended:
            verdict = f"**{ended}**" + (f" ({s['counts']['pass']} pass)" if cases else "")
        else:
            verdict = (f"**{s['verdict']}** ({s['counts']['pass']}/{s['cases'] - measured - undecided} pass"
                       + (f", {undecided} not decided" if undecided else "")
                       + (f", {measured} measured" if measured else "") + ")")
        if problem:
            why = (f"{why}; " if why else "") + f"cases not read: {problem}"
        shared = sharing_text(r, cases)
        if shared:
            extra += f"; {shared.split(':')[0]}"
        cell[(r["upf"], r["test"])] = verdict + extra + (f": {why}" if why else "")
    lines = ["| UPF | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for u in upfs:
        lines.append(f"| {u} | " + " | ".join(cell.get((u, k), "not run").replace("|", "/") for k in kinds) + " |")
    for d, problem in bad:
        lines.append(f"| {d} | " + " | ".join([problem.replace("|", "/")] + [""] * (len(kinds) - 1)) + " |")
    return "\n".join(lines) + "\n"
