"""The one gtplab command line: `gtplab <command> ...`.

Each command lives in its own module, which defines `add_parser(subparsers)`; that function creates
the subcommand's parser and sets `func=<handler(args) -> int>` on it. Add a module to COMMANDS to
make its command appear. main() only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# module names under gtplab/, each providing add_parser(subparsers)
COMMANDS: list[str] = [
    "monitor",
    "push",
    "export",
    "lab",
    "bearers",
    "report",
    "sweep",
    "pfcp.cli",
]


class UserError(Exception):
    """Bad input or a failed precondition: printed as one line, exit status 2, no traceback."""
    exit_code = 2


class Terminated(BaseException):
    """SIGTERM while a command runs (a `timeout`, a CI cancel, systemd): handled like Ctrl-C, exit 143."""


class ResultsWriteError(UserError):
    """Results could not be written (read-only, not a directory, disk full): exit status 3."""
    exit_code = 3


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gtplab", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="more output, tracebacks on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"gtplab.{name}").add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
