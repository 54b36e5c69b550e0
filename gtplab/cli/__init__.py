"""The one gtplab command line: `gtplab <command> ...`.

Each command lives in its own module, which defines `add_parser(subparsers)`; that function creates
the subcommand's parser and sets `func=<handler(args) -> int>` on it. Add a module to COMMANDS to
make its command appear. main() only dispatches; no other gtplab module imports this package (the
errors it turns into exit statuses are in gtplab.errors). Used by `gtplab` (pyproject's script) and
`python -m gtplab`.

A command module sits in the folder of what it drives when that folder holds all it uses (lab/cli.py,
measure/sweep.py, ...). A command line that reads from above its own folder lives here, on top of
every layer: pfcp.py, `gtplab pfcp`, reads a lab config (lab/), which is above pfcp/.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from gtplab.errors import Terminated, UserError

# modules under gtplab/, each providing add_parser(subparsers); the order is the order of `gtplab -h`
COMMANDS: list[str] = [
    "observe.monitor",
    "results.push",
    "results.export",
    "lab.cli",
    "gtpu.bearers",
    "results.report",
    "measure.sweep",
    "cli.pfcp",
    "upftests.cli",
    "conformance.cli",
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gtplab", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="more output, tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"gtplab.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        # building the parser imports every command's module (scapy, the lab, the engine): a second or
        # so, during which Ctrl-C is one line too, not a traceback from inside an import
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        print("gtplab: interrupted", file=sys.stderr)
        return 130
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"gtplab {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"gtplab {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"gtplab {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 143
