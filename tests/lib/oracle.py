"""Independent expectations for the PGW-U tests, written from docs/DATAPLANE spec, not from the program.

One copy: the model lives in gtplab/conformance/oracle.py (the expectations of `gtplab conformance`
too) and is re-exported here for the tests, names as before.
"""

from __future__ import annotations

from gtplab.conformance.oracle import *  # noqa: F401,F403
from gtplab.conformance.oracle import _reply_eth, _reply_l2_ip, _time_exceeded  # noqa: F401
