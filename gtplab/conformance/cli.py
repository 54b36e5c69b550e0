"""`gtplab conformance`: any UPF's packet-level correctness, from the captures (docs/conformance.md).

    gtplab conformance --lab-config embedded              # the PGW-U
    gtplab conformance --lab-config embedded-eupf -o results/conf-eupf
    gtplab conformance --lab-config embedded --cases 'uplink-*,echo'
    gtplab conformance --lab-config embedded --n3 4,6     # the cases again with GTP-U over IPv6
    gtplab conformance table results/conf-pgwu results/conf-eupf    # the UPFs side by side

A run builds the lab its config describes, provisions the bearers, sends each case's packets and
judges what comes out (pass; fail with the first differing packet; departs, as the UPF is known to:
gtplab/conformance/departs.py; not supported), tears the lab down. It writes DIR/run.json (the UPF,
the lab config, the commit, the date, the host; status running, then complete, interrupted or
error) before the lab is built and DIR/cases.jsonl a case at a time as each finishes, so a run cut
short keeps what it measured. Exit 0 when every case passed, departed as known or is not supported
by the UPF, 1 when one failed (or the run could not finish), 2 on bad input.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

from gtplab import bounded
from gtplab.conformance import cases as C
from gtplab.conformance import departs
from gtplab.errors import Terminated, UserError
from gtplab.lab import config as labconfig
from gtplab.results.store import check_writable

RUN_FILE, CASES_FILE = "run.json", "cases.jsonl"
REPO = Path(__file__).resolve().parents[2]
OK = ("pass", "departs", "not supported")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def commit() -> str:
    """The checkout's commit (short), "+dirty" when it has changes; "unknown" outside git."""
    try:
        c = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        if c.returncode != 0:
            return "unknown"
        d = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=10)
        return c.stdout.strip() + ("+dirty" if d.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _write_run(out: Path, run: dict) -> None:
    tmp = out / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps(run, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / RUN_FILE)


def _append(out: Path, rec: dict) -> None:
    with open(out / CASES_FILE, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _outdir(o: str | None, key: str, rid: str) -> Path:
    out = Path(o) if o else Path("results") / f"conformance-{key}-{rid[:8]}"
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"-o {out}: exists and is not empty (nothing is overwritten): give another")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"-o {out}: {e.strerror or e}") from None
    check_writable(out, "-o", directory=True)       # a full file system: refused before the lab
    return out


def label(rec: dict) -> str:
    """A record's case as a row names it: over N3 IPv6, "(N3 IPv6)" after the name."""
    return rec["case"] + (" (N3 IPv6)" if str(rec.get("n3", "4")) == "6" else "")


def line(rec: dict) -> str:
    """One line per case, as printed."""
    r = rec["result"]
    s = f"{label(rec):<40} {r}"
    if r == "departs":
        s += f" ({', '.join(rec.get('departs_from', []))}): {rec.get('cause', '')}"
    elif r == "not supported":
        s += f": {rec.get('why', '')}"
    elif r == "fail":
        d = rec.get("diff") or {}
        got, exp = d.get("got"), d.get("expected")
        what = (f"{d.get('why')} frame {d.get('port')}: got {(got or {}).get('scapy', 'nothing')}"
                if d.get("why") == "unexpected" else
                f"missing {d.get('port')} frame: {(exp or {}).get('scapy') or (exp or {}).get('like')}")
        s += f": {what}"[:400]
    return s



def _sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)      # once: the teardown runs to its end
    raise Terminated()


def n3_families(v: str | None) -> list[str]:
    """--n3: "4" (the default), "6" or "4,6"; anything else a UserError (one line, exit 2)."""
    fams = [x.strip() for x in (v or "4").split(",")]
    if not fams or any(x not in ("4", "6") for x in fams) or len(set(fams)) != len(fams):
        raise UserError(f"--n3 {v!r}: give 4, 6 or 4,6 (the N3 (GTP-U) IP families to run the cases over)")
    return fams


def run(args) -> int:
    from gtplab.conformance.runner import Run, check_config
    if not args.lab_config:
        raise UserError("give --lab-config NAME|FILE (e.g. embedded, embedded-eupf), or: table DIR [DIR ...]")
    fams = n3_families(args.n3)
    cfg = labconfig.load(args.lab_config)
    check_config(cfg)
    plan = [(n3, C.select(args.cases, n3)) for n3 in fams]
    chosen = [c for _, cs in plan for c in cs]
    if not chosen:
        raise UserError(f"--cases {args.cases!r}: matches none of {', '.join(c.name for c in C.CASES)}"
                        + (" built over N3 IPv6" if fams == ["6"] else ""))
    key = departs.upf_key(cfg)
    rid = str(uuid.uuid4())
    out = _outdir(args.output, key, rid)
    upf_name = cfg.dut_name or ("PGW-U" if key == "pgwu" else cfg.name)
    rec_run = {"kind": "conformance", "uuid": rid, "status": "running", "upf": upf_name, "upf_key": key,
               "lab_config": cfg.name, "lab_config_path": str(cfg.path), "dut_mode": cfg.dut_mode,
               "commit": commit(), "started": _now(), "host": socket.gethostname(),
               "command": "gtplab " + " ".join(sys.argv[1:]) if sys.argv else "gtplab conformance",
               "cases_planned": [c.name for c in chosen], "n3": fams}
    _write_run(out, rec_run)
    print(f"conformance of {upf_name} (lab config {cfg.name}): {len(chosen)} cases, results in {out}", file=sys.stderr)
    if "6" in fams:
        print(f"N3 over IPv6: the {len(C.N3V6_CASES)} cases built for it (gtplab/conformance/cases.py N3V6_CASES)",
              file=sys.stderr)
    prev = signal.signal(signal.SIGTERM, _sigterm)
    results: list[dict] = []
    try:
        rec_run["notes"] = []
        for n3, cases in plan:          # a lab per family: a bearer has one peer
            if not cases:
                continue
            with Run(cfg, n3=n3) as r:
                rec_run["lab"] = r.lab.name
                rec_run.setdefault("labs", []).append(r.lab.name)
                _write_run(out, rec_run)
                for case in cases:
                    rec = r.case(case)
                    if rec["result"] == "departs":
                        rec["departs_from"] = [k for k in case.uses if k in departs.DEPARTS.get(key, {})]
                    rec["run_uuid"] = rid
                    _append(out, rec)
                    results.append(rec)
                    print(line(rec), flush=True)
                rec_run["notes"] += r.notes
        rec_run["status"] = "complete"
    except (KeyboardInterrupt, Terminated):
        rec_run["status"] = "interrupted"
        raise
    except UserError as e:
        rec_run.update(status="error", error=str(e))
        raise
    except Exception as e:          # the UPF or the lab failed: recorded, one line, exit 1
        rec_run.update(status="error", error=f"{type(e).__name__}: {e}")
        print(f"gtplab conformance: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, prev)
        rec_run["ended"] = _now()
        rec_run["summary"] = {k: sum(1 for x in results if x["result"] == k)
                              for k in ("pass", "departs", "not supported", "fail")}
        rec_run["cases_done"] = len(results)
        _write_run(out, rec_run)
    s = rec_run["summary"]
    print(f"{s['pass']} passed, {s['departs']} departed as known, {s['not supported']} not supported, "
          f"{s['fail']} failed: {out}")
    return 0 if all(x["result"] in OK for x in results) else 1


# ------------------------------------------------------------------------------------------ table

def read(d: str) -> tuple[dict, list[dict]]:
    p = Path(d)
    if not p.is_dir():
        raise UserError(f"table: {d}: {'not a directory' if p.exists() else 'no such directory'}")
    if not os.path.lexists(p / RUN_FILE):
        raise UserError(f"table: {d}: no run.json (not a conformance run)")
    # both files read to a bound (gtplab.bounded: run.json's, and cases.jsonl a line at a time); a
    # FIFO, /dev/zero or a file over the bound is refused in one line
    try:
        run_ = json.loads(bounded.read_file(p / RUN_FILE, bounded.RUN_JSON_BYTES, f"table: {d}/run.json", UserError))
    except ValueError:
        raise UserError(f"table: {d}/run.json: not JSON") from None
    if not isinstance(run_, dict) or run_.get("kind") != "conformance":
        kind = run_.get("kind") if isinstance(run_, dict) else None
        raise UserError(f"table: {d}: not a conformance run (run.json kind {kind!r})")
    cases = []
    if os.path.lexists(p / CASES_FILE):
        for _, ln in bounded.read_lines(p / CASES_FILE, bounded.CASES_FILE_BYTES, bounded.CASE_LINE_BYTES,
                                        f"table: {d}/{CASES_FILE}", UserError):
            try:
                cases.append(json.loads(ln))
            except ValueError:
                pass                        # a line torn by an interrupted run
    return run_, cases


def cell(rec: dict | None) -> str:
    if rec is None:
        return "-"
    r = rec["result"]
    if r == "departs":
        return "departs: " + ", ".join(rec.get("departs_from") or []) if rec.get("departs_from") else "departs"
    if r == "fail":
        return "**FAIL**"
    if r == "not supported":
        return "not supported"
    return r


def table(dirs: list[str]) -> str:
    """A markdown table: a row per case, a column per run (its UPF); with runs over N3 IPv6 (--n3 6),
    a row per case and N3 family, the family in its own column."""
    runs = [read(d) for d in dirs]
    fam = lambda c: str(c.get("n3", "4"))                       # noqa: E731
    both = any(fam(c) == "6" for _, cs in runs for c in cs)
    names = [(c.name, n3) for n3 in ("4", "6") for c in C.CASES]
    for _, cs in runs:
        names += [(c["case"], fam(c)) for c in cs if (c["case"], fam(c)) not in names]
    heads = []
    for r, _ in runs:
        h = str(r.get("upf", "?"))
        if r.get("status") != "complete":
            h += f" ({r.get('status')})"
        heads.append(h)
    n3col = ("N3 | ", "---|") if both else ("", "")
    out = [f"| case | {n3col[0]}clause | " + " | ".join(heads) + " |", f"|---|{n3col[1]}---|" + "---|" * len(runs)]
    for n, n3 in names:
        recs = [{(c["case"], fam(c)): c for c in cs}.get((n, n3)) for _, cs in runs]
        if all(x is None for x in recs):
            continue
        clause = C.BY_NAME[n].clause if n in C.BY_NAME else next(x["clause"] for x in recs if x)
        fcell = f"IPv{n3} | " if both else ""
        out.append(f"| {n} | {fcell}{clause} | " + " | ".join(cell(x) for x in recs) + " |")
    tot = []
    for (r, cs) in runs:
        k = {x: sum(1 for c in cs if c["result"] == x) for x in ("pass", "departs", "not supported", "fail")}
        tot.append(f"{k['pass']} pass, {k['departs']} departs, {k['not supported']} n/s, {k['fail']} fail")
    out.append("| **total** | | " + ("| " if both else "") + " | ".join(tot) + " |")
    return "\n".join(out) + "\n"


def cmd(args) -> int:
    if args.what:
        if args.what[0] != "table":
            raise UserError(f"unknown action {args.what[0]!r}: give --lab-config X, or: table DIR [DIR ...]")
        if not args.what[1:]:
            raise UserError("table: give the results directories of conformance runs")
        print(table(args.what[1:]), end="")
        return 0
    if args.list:
        for n3 in n3_families(args.n3):
            for c in C.select(args.cases, n3):
                print(f"{label({'case': c.name, 'n3': n3}):<40} {c.clause}: {c.what}")
        return 0
    return run(args)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("conformance", help="any UPF's packet-level correctness from the captures; "
                              "`conformance table DIR...`: the UPFs side by side",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="*", metavar="table DIR", help="table DIR [DIR ...]: the runs side by side")
    p.add_argument("--lab-config", metavar="NAME|FILE", help="the lab and its UPF (embedded: the PGW-U, "
                   "embedded-eupf, embedded-open5gs, or a file)")
    p.add_argument("-o", "--output", metavar="DIR", help="results directory (default "
                   "results/conformance-<upf>-<uuid>; must not hold anything)")
    p.add_argument("--cases", metavar="PATTERN", help="only the cases matching these comma-separated shell "
                   "patterns, e.g. 'uplink-*,echo'")
    p.add_argument("--n3", metavar="4|6|4,6", help="the N3 (GTP-U) IP family of the bearers' tunnels "
                   "(default 4; 6: the cases built for GTP-U over IPv6 with every peer an IPv6 address, a "
                   "lab of their own; 4,6: both, each row says its family)")
    p.add_argument("--list", action="store_true", help="list the cases (with --cases: those) and exit")
    p.set_defaults(func=cmd)
