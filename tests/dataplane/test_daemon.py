"""pgwu's daemons (`watch`, `reassemble`, `socket` with --daemon; dataplane/pgwu_daemon.c) report a
pid only once the child says it runs: one that fails at once exits 1 with the child's own reason,
not "running as pid N" for a process already gone. Nothing loaded in a fresh pin directory makes each
fail in the child, after the fork."""

from __future__ import annotations

import secrets

import pytest

from tests.lib.pgwu import pgwu

pytestmark = pytest.mark.bpf


@pytest.mark.parametrize("cmd", [["watch", "--daemon"], ["reassemble", "--daemon"],
                                 ["socket", "--daemon", "--access", "lo", "--sgi", "lo"]],
                         ids=["watch", "reassemble", "socket"])
def test_a_daemon_that_fails_at_once_is_not_reported_running(cmd):
    pin = f"/sys/fs/bpf/gtplab-daemon-{secrets.token_hex(3)}"      # never created: nothing loaded
    cp = pgwu(pin, *cmd, check=False, timeout=30)
    assert cp.returncode == 1, (cp.returncode, cp.stdout, cp.stderr)
    assert "running as pid" not in cp.stdout, cp.stdout
    assert f"pgwu is not loaded in {pin}" in cp.stderr, cp.stderr
