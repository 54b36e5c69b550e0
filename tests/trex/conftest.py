"""Fixtures of the TRex profile tests (test_profiles.py, test_profiles_ipv6.py)."""

from __future__ import annotations

import pytest

from tests.lib.trex_ref import TrexWorker


@pytest.fixture(scope="module")
def trex():
    w = TrexWorker()
    try:
        yield w
    finally:
        w.close()
