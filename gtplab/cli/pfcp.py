"""`gtplab pfcp`: provision a profile's bearers on a UPF over PFCP and hold them, by hand.

    gtplab pfcp --lab-config eupf --profile uplink -t flows=1024,sgws=4 -o provisioned.txt
    gtplab pfcp --upf 10.0.0.2:8805 --n3 10.0.0.2 --n6 10.0.1.2 --duration 60
    gtplab pfcp --lab NAME --lab-config embedded-eupf -t flows=64 --duration 60   # a namespace lab's UPF

Listens on port 8805 of its N4 address (--local, --listen-port), sets the association up,
establishes one session per bearer of the profile's tunables (the same bearers `gtplab bearers`
writes; F-TEIDs chosen by the UPF when it offers FTUP, unless --choose/--no-choose), writes the
bearer file as the UPF returned it (-o; the uplink profile takes it as -t teid_file=...), then holds
them: answers the UPF's heartbeats and reports, sends its own heartbeats, re-establishes after a UPF
restart, until --duration ends or Ctrl-C / SIGTERM. Then deletes every session (prints the usage
reports with --urr) and releases the association (a UPF that does not answer the release is a
warning). The first error is the one printed; what failed while cleaning up after it is added to it.
With --lab NAME (a namespace lab running an external UPF, `gtplab lab up --lab-config
embedded-eupf`), the node runs in the lab's control-plane namespace and reaches the UPF over the
lab's N4 link only; --upf, --n3, --n6 and --local default to the lab's addresses.

It lives in gtplab/cli/, not in pfcp/, because it reads lab configs (gtplab.lab.config), which check
their dut.pfcp section with gtplab.pfcp.provision: pfcp/ stays below lab/ (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import tempfile
import threading
import time

from gtplab.dut.pfcp import in_lab, provisioner
from gtplab.errors import Terminated, UserError
from gtplab.gtpu import bearers as gb
from gtplab.lab import config as labconfig
from gtplab.lab.topology import Lab
from gtplab.pfcp import provision as prov
from gtplab.results.store import check_writable


def _config(args) -> prov.PfcpConfig:
    if args.lab_config:
        cfg = labconfig.load(args.lab_config)
        if cfg.provision != "pfcp":
            raise UserError(f"lab config {cfg.path}: dut.provision is {cfg.provision}, not pfcp")
        d = dict(cfg.dut["pfcp"])
        where = f"lab config {cfg.path}"
    else:
        d, where = ({"upf": prov.LAB} if args.lab else {}), "the command line"
    for key in ("upf", "n3", "n6", "node_id", "local", "listen_port", "window", "qfi", "release_wait"):
        v = getattr(args, key)
        if v is not None:
            d[key] = v.split(",") if key == "n3" and "," in v else v
    if args.choose is not None:
        d["choose"] = args.choose
    if args.urr:
        d["urr"] = True
    if d.get("upf") == prov.EMBEDDED:
        raise UserError(f"{where}: upf: embedded is started by the lab; give --upf HOST[:PORT]")
    if d.get("upf") == prov.LAB and not args.lab:
        raise UserError(f"{where}: upf: lab is a namespace lab's external UPF: give --lab NAME "
                        "(gtplab lab up --lab-config ... prints it), or --upf HOST[:PORT]")
    return prov.parse_config(d, where)


MAX_DURATION_S = 30 * 86400      # longer is a typo (and 1e11 s overflows the platform's time_t)


def _check_args(args) -> None:
    """What the command line alone decides, checked before the UPF is asked anything: --duration,
    the profile's tunables (the bearer file), a writable -o."""
    if not (math.isfinite(args.duration) and 0 <= args.duration <= MAX_DURATION_S):
        raise UserError(f"--duration {args.duration}: seconds, 0 (until Ctrl-C) .. {MAX_DURATION_S}")
    for key in prov.NUMBERS:
        v = getattr(args, key, None)
        if v is not None:
            prov.check_number(key, v, f"--{key.replace('_', '-')}")
    gb.profile_args(args.profile, gb.tunable_argv(args.tunables))
    if args.output:
        check_writable(args.output, "the bearer file")


def _run(args) -> int:
    _check_args(args)
    cfg, netns = _config(args), None
    if args.lab:
        cfg, netns = in_lab(cfg, Lab.open(args.lab))
    if threading.current_thread() is threading.main_thread():
        def term(*_):
            raise Terminated()
        signal.signal(signal.SIGTERM, term)      # the sessions are deleted on the way out
    p = provisioner(cfg, netns)
    try:
        try:
            _hold(args, p, gb)
        except BaseException as e:
            p.close(error=e)                     # e stays what the user reads; clean-up adds to it
            raise
        usage = p.close()
    finally:
        for w in p.warnings:
            print(f"gtplab pfcp: warning: {w}", file=sys.stderr)
        if p.reports:
            print(f"gtplab pfcp: reports from the UPF: {_reports_line(p)}", file=sys.stderr)
    if cfg.urr:
        ul = sum((u or (0, 0, 0))[1] for u in usage.values())
        dl = sum((u or (0, 0, 0))[2] for u in usage.values())
        print(f"usage reports: {len(usage)} sessions, uplink {ul} octets, downlink {dl} octets")
    released = "association released" if not p.warnings else "association ended"
    print(f"gtplab pfcp: sessions deleted, {released} (UPF restarts seen: {p.node.restarts}"
          + (f", by {', '.join(p.node.restarts_seen)}" if p.node.restarts_seen else "") + ")",
          file=sys.stderr)
    return 0


def _hold(args, p: prov.Provisioner, gb) -> None:
    with tempfile.TemporaryDirectory(prefix="gtplab-pfcp-") as tmp:
        src = os.path.join(tmp, "bearers.txt")
        n = gb.write_bearer_file(args.profile, gb.tunable_argv(args.tunables), src)
        out = args.output or os.path.join(tmp, "provisioned.txt")
        t0 = time.monotonic()
        p.install(src, out)
        dt = time.monotonic() - t0
        teids = "the UPF's (CHOOSE)" if p.cfg.choose else "gtplab's"
        print(f"gtplab pfcp: {n} sessions on {p.upf_label} in {dt:.2f} s ({n / dt:,.0f}/s), F-TEIDs {teids}, "
              f"listening on {p.node.addr}:{p.node.port}"
              + (f", bearer file {args.output}" if args.output else ""), file=sys.stderr)
        end = time.monotonic() + args.duration if args.duration else None
        while end is None or time.monotonic() < end:
            time.sleep(0.1)
            p.node.check()


def _reports_line(p: prov.Provisioner) -> str:
    s = p.reports_summary() or {"count": {}}
    return ", ".join(f"{k} x{v}" for k, v in sorted(s["count"].items()))


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("pfcp", help="provision a profile's bearers on a UPF over PFCP and hold them",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--lab-config", metavar="NAME|FILE", help="take dut.pfcp from this lab config")
    p.add_argument("--lab", metavar="NAME", help="a namespace lab running an external UPF: the node runs in "
                   "its control-plane namespace, the addresses are the lab's (upf: lab)")
    p.add_argument("--upf", metavar="HOST[:PORT]", help="the UPF's N4 address (overrides the lab config)")
    p.add_argument("--n3", metavar="ADDR[,ADDR6]",
                   help="the UPF's N3 GTP-U address: IPv4, IPv6 (GTP-U over IPv6: bearer lines with sgw6=) or one of each")
    p.add_argument("--n6", metavar="IPV4", help="the UPF's N6 address")
    p.add_argument("--node-id", dest="node_id", metavar="IPV4|FQDN", help="our Node ID")
    p.add_argument("--local", metavar="IPV4", help="our N4 address (default: the one the route to the UPF picks)")
    p.add_argument("--listen-port", dest="listen_port", type=int, metavar="PORT",
                   help="our PFCP port on it, where the UPF sends its requests (default 8805; 0: any free port)")
    p.add_argument("--window", type=int, help="requests in flight (default 256)")
    p.add_argument("--choose", action=argparse.BooleanOptionalAction, default=None,
                   help="the UPF allocates the F-TEIDs (CHOOSE) or, --no-choose, gtplab gives them "
                        "(default: dut.pfcp.choose, auto: CHOOSE when the UPF offers FTUP at association)")
    p.add_argument("--urr", action="store_true", help="a volume URR per session; usage printed at the end")
    p.add_argument("--release-wait", dest="release_wait", type=float, metavar="S",
                   help="seconds to wait for the answer to the Association Release Request, sent once "
                        "(for a UPF that never answers it, as eUPF; default: dut.pfcp.release_wait, "
                        "else T1 x (N1 + 1) with retransmissions)")
    p.add_argument("--qfi", type=int, metavar="N", help="5G N3: every session's QoS flow, 0..63 (a QER "
                   "QFI: the UPF marks downlink G-PDUs; an uplink PDI QFI: uplink G-PDUs must carry it)")
    p.add_argument("--profile", choices=("uplink", "downlink"), default="uplink",
                   help="whose tunables define the bearers (default uplink)")
    p.add_argument("-t", "--tunables", action="append", default=[], metavar="K=V[,K=V...]",
                   help="the profile's tunables (repeatable), as for gtplab bearers")
    p.add_argument("-o", "--output", metavar="FILE", help="write the bearer file as the UPF returned it")
    p.add_argument("--duration", type=float, default=0.0,
                   help="seconds to hold the sessions (default 0: until Ctrl-C or SIGTERM)")
    p.set_defaults(func=_run)
