"""`gtplab upftest`: the UPF behaviour tests (issue 25) against any UPF the lab provisions over PFCP.

    gtplab upftest policing --lab-config embedded-pfcp      # the PGW-U through its agent
    gtplab upftest handover --lab-config embedded-eupf      # eUPF in the namespace lab
    gtplab upftest usage    --lab-config embedded-pfcp
    gtplab upftest n4       --lab-config embedded-eupf
    gtplab upftest table results/upftest-*                  # the verdict table of several runs

Each kind builds the lab its config describes, runs, tears it down, and writes a results directory
(-o, default results/upftest-<kind>-<uuid>): run.json, cases.jsonl, report.md, report/index.html;
with --push URL every case goes to the Pushgateway (job gtplab_upftest). Exit 0 when every case
passes, 1 when one fails or is not supported (the UPF's Cause says why). docs/upftests.md.
"""

from __future__ import annotations

import socket
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.upftests import handover, n4, policing, record, usage
from gtplab.upftests.harness import Upf

KINDS = {"policing": policing, "handover": handover, "usage": usage, "n4": n4}


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--sizes {text!r}: comma-separated frame sizes in bytes") from None


def _bursts(text: str) -> tuple[int, ...]:
    from gtplab.traffic.engine.vm import MAX_PACED_BURST
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or any(not 1 <= b <= MAX_PACED_BURST for b in out):
        raise UserError(f"--bursts {text!r}: comma-separated burst sizes in frames, 1..{MAX_PACED_BURST}")
    return out


def _run(args) -> int:
    if args.kind == "table":
        if not args.dirs:
            raise UserError("table: give the results directories of upftest runs")
        print(record.table(args.dirs), end="")
        return 0
    kw = {}
    if args.kind == "policing":
        if args.sizes:
            kw["sizes"] = _sizes(args.sizes)
        if args.bursts:
            kw["bursts"] = _bursts(args.bursts)
    elif args.sizes or args.bursts:
        raise UserError(f"--sizes and --bursts are policing's; {args.kind} has its own")
    cfg = labconfig.load(args.lab_config)
    rid = str(uuid.uuid4())
    out = Path(args.output or f"results/upftest-{args.kind}-{rid[:8]}")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"results directory {out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with Upf.open(cfg, args.lab) as upf:
        run = {"uuid": rid, "started": started, "backend": "local", "lab": upf.lab.name,
               "host": socket.gethostname(), "kind": "upftest", "test": args.kind, "upf": upf.name,
               "lab_config": cfg.name, "command": " ".join(["gtplab"] + sys.argv[1:])}
        cases = KINDS[args.kind].run(upf, **kw)
        run["warnings"] = upf.close()
    record.write(out, run, cases)
    s = record.summary(cases)
    for c in cases:
        if c["verdict"] not in ("pass", "measured"):
            print(f"  {c['case_id']}: {c['verdict']}: {c.get('why', '')}", file=sys.stderr)
    print(f"gtplab upftest {args.kind}: {upf.name}: {s['verdict']} ({s['counts']['pass']} pass, "
          f"{s['counts']['fail']} fail, {s['counts']['not supported']} not supported"
          + (f", {s['counts']['measured']} measured" if s['counts']['measured'] else "") + ")")
    print(f"results: {out}")
    if args.push:
        record.push(args.push, run, cases)
    return 0 if s["verdict"] == "pass" else 1


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("upftest", help="UPF behaviour tests over PFCP: policing, usage, handover, n4",
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
    p.add_argument("--push", metavar="URL", help="push every case to this Pushgateway")
    p.set_defaults(func=_run)
