"""The errors every gtplab command shares, and how the CLI turns them into exit statuses.

Any module raises UserError for bad input or a failed precondition; gtplab.cli.main catches it and
prints one line (exit 2). This module imports nothing from gtplab, so core modules (the engine, the
lab, the measurement) depend on it and never on the CLI.
"""

from __future__ import annotations

import os


class UserError(Exception):
    """Bad input or a failed precondition: printed as one line, exit status 2, no traceback."""
    exit_code = 2


class Terminated(BaseException):
    """SIGTERM while a command runs (a `timeout`, a CI cancel, systemd): handled like Ctrl-C, exit 143."""


class ResultsWriteError(UserError):
    """Results could not be written (read-only, not a directory, disk full): exit status 3."""
    exit_code = 3


class NotBuilt(UserError, FileNotFoundError):
    """A file ./setup.sh builds (a BPF object, dataplane/pgwu) is missing: one line naming it and how
    to build it, exit status 2 like any missing component (TRex's runtime: TrexUnavailable). Also a
    FileNotFoundError, so that what goes on without an optional object (the socket path's drop probe,
    gtplab.dut.sockdrop) still does."""

    def __init__(self, path: str | os.PathLike, how: str | None = None):
        how = how or f"run ./setup.sh (or make -C {os.path.dirname(os.fspath(path))})"
        super().__init__(f"{os.fspath(path)} is not built: {how}")


def require_built(*paths: str | os.PathLike) -> None:
    """NotBuilt for the first of paths that does not exist."""
    for p in paths:
        if not os.path.exists(p):
            raise NotBuilt(p)


class LabError(UserError):
    """A lab operation failed: one line saying what could not be done and why (gtplab.lab.topology, gtplab.lab.cpu)."""


def note_cleanup(error: BaseException, problem: str) -> None:
    """Keep `error`, the first failure, as the one raised, and add what then went wrong while
    cleaning up after it: as a note (BaseException.add_note) and, where the error is one line of
    text (a UserError), at the end of that line, so that the CLI and run.json show it too. A
    clean-up error never replaces the error that caused the clean-up."""
    error.add_note(f"while cleaning up: {problem}")
    if isinstance(error, Exception) and len(error.args) == 1 and isinstance(error.args[0], str):
        error.args = (f"{error.args[0]}; while cleaning up: {problem}",)
