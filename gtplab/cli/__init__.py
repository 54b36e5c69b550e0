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

# command -> the module under gtplab/ providing add_parser(subparsers), which adds that command; the
# order is the order of `gtplab -h`
COMMANDS: dict[str, str] = {
    "monitor": "observe.monitor",
    "push": "results.push",
    "export": "results.export",
    "lab": "lab.cli",
    "bearers": "gtpu.bearers",
    "report": "results.report",
    "sweep": "measure.sweep",
    "pfcp": "cli.pfcp",
    "pairs": "cli.pairs",
    "upftest": "upftests.cli",
    "conformance": "conformance.cli",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; only: just that command's parser (its module alone imported), else all."""
    p = argparse.ArgumentParser(prog="gtplab", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="more output, tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in COMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"gtplab.{module}").add_parser(sub)
    return p


def _command_of(argv: list[str]) -> str | None:
    """The command argv names when it names one of COMMANDS (after the top-level options, none of
    which takes a value), else None."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
        if a in ("-h", "--help"):
            return None
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        # the command's module only (a report needs neither scapy nor the lab: 0.3 s, not 1-2 s); all
        # of them for `gtplab -h` or a command that is not one. Ctrl-C during the imports is one line
        # too, not a traceback from inside an import
        args = build_parser(_command_of(sys.argv[1:] if argv is None else argv)).parse_args(argv)
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
