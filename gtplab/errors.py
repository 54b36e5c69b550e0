"""The errors every gtplab command shares, and how the CLI turns them into exit statuses.

Any module raises UserError for bad input or a failed precondition; gtplab.cli.main catches it and
prints one line (exit 2). This module imports nothing from gtplab, so core modules (the engine, the
lab, the measurement) depend on it and never on the CLI.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a failed precondition: printed as one line, exit status 2, no traceback."""
    exit_code = 2


class Terminated(BaseException):
    """SIGTERM while a command runs (a `timeout`, a CI cancel, systemd): handled like Ctrl-C, exit 143."""


class ResultsWriteError(UserError):
    """Results could not be written (read-only, not a directory, disk full): exit status 3."""
    exit_code = 3


class LabError(UserError):
    """A lab operation failed: one line saying what could not be done and why (gtplab.lab.topology, gtplab.lab.cpu)."""
