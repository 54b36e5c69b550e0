"""What can go wrong on Sx/N4, each as one clear line (a UserError: exit status 2, no traceback).

Every error that concerns a session names the bearer (its index in the run and its UE address), the
message and, for a rejection, the Cause (TS 29.244 8.2.1) by number and name.
"""

from __future__ import annotations

from gtplab.errors import UserError


class PfcpError(UserError):
    """Any PFCP failure."""


class PfcpTimeout(PfcpError):
    """No response after T1 x (N1 + 1) (TS 29.244 6.4: the request and N1 retransmissions)."""


class PfcpRejected(PfcpError):
    """A response whose Cause is not 1 (Request accepted)."""

    def __init__(self, msg: str, cause: int | None = None, message: str = "", bearer=None):
        super().__init__(msg)
        self.cause = cause
        self.message = message
        self.bearer = bearer


class PfcpMalformed(PfcpError):
    """A message that does not decode: lengths that overrun the message or the parent IE, a
    missing mandatory IE, a response of the wrong type."""


class PfcpSequenceError(PfcpError):
    """A response whose sequence number matches no request in flight."""


class PfcpBindError(PfcpError):
    """The node's port (8805 by default) could not be bound on gtplab's N4 address."""
