"""Sweep results to the Prometheus Pushgateway: `gtplab push RESULTS_DIR`, and the API the sweep calls.

The parts, one idea each: the metrics of a case (gtplab/results/push_metrics.py), the pusher that
holds what the gateway did not take (gtplab/results/pusher.py), the gateway's answers and its
"sweep running" groups (gtplab/results/gateway.py). This module keeps the command line and
re-exports the names other modules import from it.
"""

from __future__ import annotations

import argparse
import math
import sys

from gtplab.errors import UserError
from gtplab.results import store as results
from gtplab.results.gateway import (LIVE_JOB, UNCHECKABLE_STALE_AFTER_S, _reason, check_gateway_url,
                                    clear_stale_live_groups, default_gateway, gateway_start_time, live_groups)
from gtplab.results.push_metrics import case_registry, grouping_key
from gtplab.results.pusher import Pusher, push_case, push_results_dir

# what other modules import from here (observe.monitor, upftests.cli, tests)
__all__ = ["LIVE_JOB", "UNCHECKABLE_STALE_AFTER_S", "Pusher", "_reason", "add_parser", "case_registry",
           "check_gateway_url", "clear_stale_live_groups", "default_gateway", "do_push", "gateway_start_time",
           "grouping_key", "live_groups", "push_case", "push_results_dir"]


def do_push(args: argparse.Namespace) -> int:
    check_gateway_url(args.gateway)
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        raise UserError(f"--timeout {args.timeout}: seconds, > 0 and at most 3600")
    try:
        for key in clear_stale_live_groups(args.gateway, args.timeout):
            print(f"gtplab push: removed the stale 'sweep running' group of run {key.get('uuid', '?')} "
                  "(its sweep is gone)", file=sys.stderr)
    except Exception:
        pass  # the pushes below say whether the gateway answers
    torn = results.torn_last_line(args.results_dir)
    if torn:
        print(f"gtplab push: line {torn} of {args.results_dir}/cases.jsonl is torn (the run was killed "
              "while writing it): pushing the cases before it", file=sys.stderr)
    try:
        pushed, failed, err = push_results_dir(args.results_dir, args.gateway, args.timeout)
    except results.ResultsError as e:
        raise UserError(str(e)) from None
    total = pushed + failed
    print(f"pushed {pushed} of {total} case(s) from {args.results_dir} to {args.gateway}")
    if failed:
        print(f"gtplab push: {failed} case(s) not pushed to {args.gateway}: {err}; nothing is lost, try again later",
              file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("push", help="push a sweep's results (RESULTS_DIR) to the Pushgateway",
                       description=__doc__.splitlines()[0])
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a sweep results directory (run.json, cases.jsonl)")
    p.add_argument("--gateway", default=default_gateway(), metavar="URL",
                   help="Pushgateway URL (default: $GTPLAB_PUSHGATEWAY or %(default)s)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per push (default: %(default)s)")
    p.set_defaults(func=do_push)
