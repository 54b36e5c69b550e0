"""`gtplab upftest`: the UPF behaviour tests (issue 25) against any UPF the lab provisions over PFCP.

    gtplab upftest policing --lab-config embedded-pfcp      # the PGW-U through its agent
    gtplab upftest handover --lab-config embedded-eupf      # eUPF in the namespace lab
    gtplab upftest handover --n3 6                          # the tunnels over IPv6: End Markers over IPv6
    gtplab upftest usage    --lab-config embedded-pfcp
    gtplab upftest n4       --lab-config embedded-eupf
    gtplab upftest rules    --lab-config embedded-open5gs   # classification: SDF filters, precedence, OHR
    gtplab upftest table results/upftest-*                  # the verdict table of several runs

Each kind builds the lab its config describes, runs, tears it down, and writes a results directory
(-o, default results/upftest-<kind>-<uuid>): run.json, cases.jsonl, report.md, report/index.html;
with --push URL every case goes to the Pushgateway (job gtplab_upftest). Exit 0 when no case fails
and none is not supported (every case passed, or some were "not decided": a premise of theirs, the
load offered as asked, the handover's switch while the traffic ran ..., did not hold, which says
nothing against the UPF; the summary line and run.json count them, run again on a quieter host to
decide them), 1 when one fails or is not supported (the UPF's Cause says why). docs/upftests.md.

Whatever ends the run, what it measured is kept: run.json is written before the lab is built
(status "running", the command, the lab config, the kind, the cases planned) and each case is
appended to cases.jsonl as it finishes; SIGINT and SIGTERM (the sweep's handler) tear the lab down
and mark the run "interrupted", an error marks it "error" with its text and, for an N4 failure, the
PFCP exchange that failed (the request, its sequence number, how many sends, the Cause or "no
answer"). One run writes a results directory (its claim, gtplab.results.store.claim); a directory
holding another run's results is refused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import urllib.error
import uuid
from datetime import datetime, timezone
from pathlib import Path

from gtplab.errors import ResultsWriteError, Terminated, UserError
from gtplab.lab import claims
from gtplab.lab import config as labconfig
from gtplab.lab.cpu import overridden
from gtplab.measure.sweep import _sigterm
from gtplab.results import report as results_report
from gtplab.results import store
from gtplab.results.push import _reason, check_gateway_url, gateway_start_time
from gtplab.traffic import backend
from gtplab.upftests import classification, handover, n4, policing, record, usage
from gtplab.upftests.harness import Unsupported, Upf

KINDS = {"policing": policing, "handover": handover, "usage": usage, "n4": n4, "rules": classification}
N3V6_KINDS = ("handover", "usage")     # --n3 6: every session's tunnel over IPv6 (GTP-U over IPv6)
PUSH_PROBE_TIMEOUT_S = 2.0      # the sweep's Pusher's timeout: a gateway that answers does so in ms


def _probe_gateway(url: str) -> None:
    """--push URL answers, asked before anything is built the way the sweep's Pusher first asks it
    (its /api/v1/status, gateway_start_time; an HTTP error is an answer): UserError in one line if it
    refuses or does not answer within PUSH_PROBE_TIMEOUT_S."""
    check_gateway_url(url)
    try:
        gateway_start_time(url, PUSH_PROBE_TIMEOUT_S)
    except urllib.error.HTTPError:
        return
    except Exception as e:          # noqa: BLE001 -- refused, timed out, not a gateway: one line
        raise UserError(f"--push {url}: the Pushgateway does not answer ({_reason(e)}); nothing was built") from None


def _sizes(text: str) -> tuple[int, ...]:
    from gtplab.measure.plan import common
    c = common()
    # a G-PDU with inner IPv4/UDP and the engine's per-stream trailer (its counters are the reference)
    lo = max(c.min_frame_size(d) for d in ("uplink", "downlink")) + c.STATS_PAYLOAD
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or any(not lo <= x <= c.MAX_FRAME for x in out) or len(set(out)) != len(out):
        raise UserError(f"--sizes {text!r}: comma-separated frame sizes in bytes on the wire incl. FCS, "
                        f"{lo}..{c.MAX_FRAME}, each once")
    return out


def _bursts(text: str) -> tuple[int, ...]:
    from gtplab.traffic.engine.vm import MAX_PACED_BURST
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or any(not 1 <= b <= MAX_PACED_BURST for b in out):
        raise UserError(f"--bursts {text!r}: comma-separated burst sizes in frames, 1..{MAX_PACED_BURST}")
    return out


def _table(dirs: list[str]) -> int:
    if not dirs:
        raise UserError("table: give the results directories of upftest runs")
    for d in dirs:
        if not Path(d).is_dir():
            raise UserError(f"table: {d}: {'not a directory' if Path(d).exists() else 'no such directory'}")
    print(record.table(dirs), end="")
    return 0



def _claim(out: Path, rid: str, kind: str) -> store.Claim:
    """The results directory, made and claimed for this run (gtplab.results.store.claim: one writer),
    before the lab is built: refused, in one line, when it is not a directory, holds another run's
    results (its run.json named) or cannot be written."""
    if out.exists() and not out.is_dir():
        raise ResultsWriteError(f"results directory {out} exists and is not a directory")

    def refuse_full():
        run = out / store.RUN_FILE
        if run.exists():
            try:
                o = store.read_run(out)
                who = (f"run.json of {o.get('kind', 'sweep')} {o.get('test', '')} run {o['uuid']} "
                       f"(started {o['started']}, status {o.get('status', 'complete')})").replace("  ", " ")
            except store.ResultsError:
                who = "a run.json"
            raise UserError(f"results directory {out} holds {who}: give another -o (nothing is overwritten)")
        if store.contents(out):
            raise UserError(f"results directory {out} exists and is not empty (nothing is overwritten)")

    if out.is_dir():
        refuse_full()
    owner = {"run_uuid": rid, "pid": os.getpid(), "host": socket.gethostname(), "what": f"upftest {kind}",
             "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        cl = store.claim(out, owner)
    except store.ClaimError as e:
        raise UserError(str(e)) from None
    except OSError as e:
        raise ResultsWriteError(f"Couldn't write to results directory {out}: {e.strerror or e}") from None
    try:
        refuse_full()                   # written meanwhile by a run that has ended since
    except BaseException:
        cl.release()
        raise
    return cl


def _on_sigterm(signum, frame):
    """The sweep's SIGTERM handler (Terminated, handled like Ctrl-C), once: a second SIGTERM while the
    lab is torn down is ignored, so the teardown runs to its end."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _sigterm(signum, frame)


@contextlib.contextmanager
def _ending(rec: record.Recorder):
    """SIGTERM raises Terminated meanwhile; the block's end is recorded in run.json: complete,
    interrupted (SIGINT, SIGTERM) or error (with the exchange of an N4 failure). The block tears the
    lab down itself (Upf's with), before this records the end."""
    main = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    try:
        yield
    except KeyboardInterrupt:
        rec.end("interrupted", signal="SIGINT")
        print(f"results: {rec.rdir}")
        raise
    except Terminated:
        rec.end("interrupted", signal="SIGTERM")
        print(f"results: {rec.rdir}")
        raise
    except BaseException as e:
        rec.end("error", error=e)
        print(f"results: {rec.rdir}")
        raise
    else:
        rec.end("complete")
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _run(args) -> int:
    if args.kind == "table":
        return _table(args.dirs)
    if args.dirs:
        raise UserError(f"{args.kind} takes no directories (-o DIR for its results)")
    kw = {}
    if args.kind == "policing":
        if args.sizes is not None:      # '' is no list of sizes, not the default
            kw["sizes"] = _sizes(args.sizes)
        if args.bursts is not None:
            kw["bursts"] = _bursts(args.bursts)
    elif args.sizes is not None or args.bursts is not None:
        raise UserError(f"--sizes and --bursts are policing's; {args.kind} has its own")
    if args.n3 not in (None, "4", "6"):
        raise UserError(f"--n3 {args.n3!r}: give 4 or 6 (the N3 (GTP-U) IP family of the sessions' tunnels)")
    if args.n3 == "6" and args.kind not in N3V6_KINDS:
        raise UserError(f"--n3 6: built for {' and '.join(N3V6_KINDS)} only, not {args.kind} (its sessions are "
                        "over N3 IPv4; rules has its own row over IPv6, rules-ohr-1)")
    if args.push is not None:
        _probe_gateway(args.push)
    cfg = labconfig.load(args.lab_config)
    Upf.check_config(cfg)
    _cpu_options(cfg, args)
    # --lab looked up (and what else the lab's setup can check: backend.choose builds nothing) before
    # the run's first line and -o; Upf.open looks it up again to use it
    backend.choose(cfg, kind="local", lab=args.lab)
    rid = str(uuid.uuid4())
    out = Path(args.output or f"results/upftest-{args.kind}-{rid[:8]}")
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kind = KINDS[args.kind]
    run = {"uuid": rid, "started": started, "backend": "local", "lab": None, "host": socket.gethostname(),
           "kind": "upftest", "test": args.kind, "upf": Upf.name_of(cfg), "lab_config": cfg.name,
           "lab_config_path": str(cfg.path), "command": " ".join(["gtplab"] + sys.argv[1:]),
           "cases_planned": kind.planned(**kw), "pid": os.getpid(), "n3": args.n3 or "4"}
    made = not out.exists()
    with _claim(out, rid, args.kind):
        rec = record.Recorder(out, run)
        try:
            rec.start()
        except BaseException:
            # nothing half-done: what start() wrote goes, and the directory if this run made it
            for f in (store.RUN_FILE, record.RESERVE):
                with contextlib.suppress(OSError):
                    (out / f).unlink()
            if made:
                with contextlib.suppress(OSError):
                    (out / store.LOCK_FILE).unlink()
                    out.rmdir()
            raise
        print(f"gtplab upftest {args.kind}: {run['upf']} (lab config {cfg.name}), {run['cases_planned']} case(s) "
              f"planned; results in {out}", file=sys.stderr, flush=True)
        rec.on_case = lambda c: print(f"[{len(rec.cases)}/{run['cases_planned']}] {c['case_id']}: {c['verdict']}",
                                      file=sys.stderr, flush=True)
        with _ending(rec):
            with Upf.open(cfg, args.lab) as upf:
                rec.update(lab=upf.lab.name, share_cpus=bool(cfg.lab.get("share_cpus")),
                           cpu_layout={"generator": upf.lab.cpus.generator, "dut": upf.lab.cpus.dut}
                           if upf.lab.cpus else None,
                           cpus_shared_with=[claims.holder_text(h) for h in upf.lab.shared_with()])

                def on_case(c, lab=upf.lab):
                    # whoever else held the lab's CPUs as the case ended: its figures are the host's too
                    c.setdefault("cpus_shared_with", [claims.holder_text(h) for h in lab.shared_with()])
                    rec.case(c)
                upf.on_case = on_case
                if args.n3 == "6":
                    upf.use_n3("6")
                try:
                    cases = kind.run(upf, **kw)
                except Unsupported as e:        # a rejection outside what the kind handles itself
                    cases = [{"case_id": f"{args.kind}-setup", "kind": args.kind, "verdict": "not supported",
                              "why": str(e), "cause": e.cause}]
                for c in cases:                 # those the kind returned without adding (not supported)
                    rec.case(c)
                run["warnings"] = upf.close()
    cases = rec.cases
    s = record.summary(cases)
    for c in cases:
        if c["verdict"] not in ("pass", "measured"):
            why = c.get("why", "")          # a not decided case's why starts with "not decided: "
            print(f"  {c['case_id']}: " + (why if why.startswith(c["verdict"]) else f"{c['verdict']}: {why}"),
                  file=sys.stderr)
    print(f"gtplab upftest {args.kind}: {run['upf']}: {s['verdict']} ({record.counts_text(s['counts'])})")
    print(f"results: {out}")
    if args.push:
        try:
            record.push(args.push, run, cases)
        except Exception as e:          # noqa: BLE001 -- the results are written; one line says what failed
            print(f"gtplab upftest: push to {args.push} failed: {e}", file=sys.stderr)
            return 1
    # "not decided" is no failure of the UPF: exit 0 with the cases counted apart (module doc)
    return 0 if s["verdict"] in ("pass", "not decided") else 1


def _cpu_options(cfg, args) -> None:
    """--share-cpus, --generator-cpus, --dut-cpus into the lab config the lab is built from (as the
    sweep and `gtplab lab up` take them); UserError for CPUs this host has not, before anything is built."""
    if args.share_cpus:
        cfg.lab["share_cpus"] = True
    if args.generator_cpus is not None or args.dut_cpus is not None:
        if args.lab:
            raise UserError("--generator-cpus/--dut-cpus lay out a lab this run builds; --lab NAME runs on "
                            "that lab's CPUs")
        cfg.cpus = overridden(cfg.cpu_layout(), args.generator_cpus, args.dut_cpus)


def add_parser(subparsers) -> None:
    results_report.REPORT_WRITERS["upftest"] = record.rewrite_report     # `gtplab report DIR` of a run
    p = subparsers.add_parser("upftest", help="UPF behaviour tests over PFCP: policing, usage, handover, n4, rules",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(KINDS) + ["table"], help="the test kind, or `table` of finished runs")
    p.add_argument("dirs", nargs="*", help="table: upftest results directories")
    p.add_argument("--lab-config", metavar="NAME|FILE", default="embedded-pfcp",
                   help="the UPF: a lab config with dut.provision pfcp (default embedded-pfcp, the PGW-U)")
    p.add_argument("--lab", metavar="NAME", help="a running namespace lab (gtplab lab up) instead of building one")
    p.add_argument("-o", "--output", metavar="DIR", help="results directory (default results/upftest-KIND-ID)")
    p.add_argument("--sizes", metavar="B[,B...]", help="policing: frame sizes (default 512)")
    p.add_argument("--bursts", metavar="N[,N...]",
                   help="policing: burst sizes in frames back to back, same average rate (default 1,8,32,128; "
                        "a burst of 15,000 octets is always added below the MBR)")
    p.add_argument("--n3", metavar="4|6", help="the N3 (GTP-U) IP family of every session's tunnel (default "
                   f"4; 6: GTP-U over IPv6, F-TEID V6 and the gNBs' IPv6 addresses; {', '.join(N3V6_KINDS)} only)")
    p.add_argument("--push", metavar="URL", help="push every case to this Pushgateway")
    p.add_argument("--share-cpus", action="store_true",
                   help="run on CPUs another lab holds, and say so in run.json and every case (default: "
                        "refused, naming that lab; also lab config lab.share_cpus, $GTPLAB_SHARE_CPUS=1)")
    p.add_argument("--generator-cpus", metavar="CPUS",
                   help="CPUs of the generator, e.g. 0 or 0-1 (default: the lab config's cpus, else the "
                        "first half of this host's CPUs)")
    p.add_argument("--dut-cpus", metavar="CPUS",
                   help="CPUs of the DUT's receive NAPI threads (default: the lab config's cpus, else the "
                        "second half)")
    p.set_defaults(func=_run)
