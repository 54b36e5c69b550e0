"""Fixtures of the PFCP agent's tests (test_pfcp_agent.py, test_pfcp_enforce.py, test_pfcp_usage.py,
test_pfcp_end_marker.py, test_pfcp_agent_smf.py, test_pfcp_peers.py): a PGW-U of the test's own and
`pgwu pfcp` on it (tests/lib/pfcp_agent.py), or agents and CPs at several addresses (`lab`,
tests/lib/pfcp_smf.py). A module that needs another agent or lab defines its own `agent`, `assoc` or
`lab`, which then wins for that module."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil

import pytest

from tests.lib import pfcp_msgs as M
from tests.lib.pfcp_agent import PGWU, Agent, cause
from tests.lib.pgwu import pgwu
from tests.lib import pfcp_smf


@contextlib.contextmanager
def loaded_pgwu(*extra: str):
    """A PGW-U loaded on /sys/fs/bpf/gtplab-pfcp-<id> (64 bearers, the agent's GTP-U address, and
    `pgwu load` options extra); unloaded and removed afterwards, also on failure."""
    if not os.access(PGWU, os.X_OK):
        pytest.fail(f"{PGWU} is not built: run `make -C dataplane` first")
    d = f"/sys/fs/bpf/gtplab-pfcp-{secrets.token_hex(4)}"
    try:
        pgwu(d, "load", "--max-bearers", "64", "--local-addr", M.GTPU_ADDR, "--ue-pool", "10.45.0.0/16",
             "--no-fib-cache", *extra)
        yield d
    finally:
        if os.path.exists(d):
            pgwu(d, "unload", check=False)
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pin_dir():
    """loaded_pgwu()'s PGW-U."""
    with loaded_pgwu() as d:
        yield d


@pytest.fixture
def agent(pin_dir):
    """`pgwu pfcp` on pin_dir, stopped afterwards."""
    a = Agent(pin_dir)
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture
def assoc(agent):
    """The agent, associated with the test's CP (Node ID 127.0.0.1)."""
    r = agent.req(M.assoc_setup(seq=1))
    assert cause(r) == 1
    return agent


@pytest.fixture
def lab(pin_dir):
    """SMF-shaped peers (test_pfcp_agent_smf.py, test_pfcp_peers.py): start(*options) -> (agent, cp): an
    agent and a CP at 127.0.0.1; cp_at(agent, addr) -> another CP. Everything is closed and stopped at
    the end."""
    agents, cps = [], []

    class Lab:
        pin = pin_dir

        @staticmethod
        def start(*extra, associate=True, node=M.CP_NODE, rts=M.CP_RTS):
            a = pfcp_smf.Agent(pin_dir, *extra)
            agents.append(a)
            cp = Lab.cp_at(a)
            if associate:
                assert pfcp_smf.cause(cp.req(M.assoc_setup(seq=1, node=node, rts=rts))) == 1
            return a, cp

        @staticmethod
        def cp_at(a, addr="127.0.0.1", port=0):
            cp = pfcp_smf.CP(a.addr, addr, port)
            cps.append(cp)
            return cp
    try:
        yield Lab
    finally:
        for c in cps:
            c.close()
        for a in agents:
            a.stop()
