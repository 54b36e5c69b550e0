"""dut.ssh of a remote DUT's lab config (issue 34.C): "user@host" as before, or {host, user, port,
key, options}; install_bearers() runs scp/ssh with them. Fake ssh/scp on PATH record their argv."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from gtplab.dut.metrics import MetricsDut, ssh_commands
from gtplab.lab.config_schema import validate


def _lab(ssh) -> dict:
    return {"backend": "trex", "dut": {"mode": "pgwu", "metrics_url": "http://dut:9464/metrics", "ssh": ssh}}


@pytest.mark.parametrize("ssh", ["root@dut", None,
                                 {"host": "10.9.0.3"},
                                 {"host": "dut", "user": "root", "port": 2222, "key": "/k/id_ed25519",
                                  "options": ["-o", "StrictHostKeyChecking=no"]}])
def test_ssh_accepted(ssh):
    assert validate(_lab(ssh)) is None


@pytest.mark.parametrize("ssh, word", [({"user": "root"}, "dut.ssh"), ({"host": "dut", "port": 0}, "dut.ssh"),
                                       ({"host": "dut", "agent": True}, "dut.ssh"), ("", "dut.ssh")])
def test_ssh_refused(ssh, word):
    err = validate(_lab(ssh))
    assert err and word in err, err


def test_ssh_commands():
    assert ssh_commands("root@dut") == (["ssh"], ["scp"], "root@dut")
    ssh, scp, target = ssh_commands({"host": "dut", "user": "gt", "port": 2222, "key": "/k/id",
                                     "options": ["-o", "BatchMode=yes"]})
    assert target == "gt@dut"
    assert ssh == ["ssh", "-p", "2222", "-i", "/k/id", "-o", "BatchMode=yes"]
    assert scp == ["scp", "-P", "2222", "-i", "/k/id", "-o", "BatchMode=yes"]


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    """ssh and scp on PATH that record their argv, one JSON list per line, in the file returned."""
    log = tmp_path / "argv.jsonl"
    for tool in ("ssh", "scp"):
        f = tmp_path / tool
        f.write_text(f"#!/usr/bin/env python3\nimport json, sys\n"
                     f"open({str(log)!r}, 'a').write(json.dumps([{tool!r}] + sys.argv[1:]) + '\\n')\n")
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return log


def test_install_bearers_uses_user_key_port_options(fake_ssh):
    log = fake_ssh
    ssh = {"host": "10.9.0.3", "user": "root", "port": 2222, "key": "/k/id", "options": ["-o", "BatchMode=yes"]}
    cfg = SimpleNamespace(path="lab.yaml", dut={"metrics_url": "http://x/metrics", "ssh": ssh, "pin_dir": "/p"})
    MetricsDut(cfg).install_bearers("/tmp/b.txt")
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls[0][:7] == ["scp", "-P", "2222", "-i", "/k/id", "-o", "BatchMode=yes"]
    assert calls[0][-1].startswith("root@10.9.0.3:/tmp/gtplab-bearers-")
    for call, cmd in zip(calls[1:], ("session flush", "session load")):
        assert call[:8] == ["ssh", "-p", "2222", "-i", "/k/id", "-o", "BatchMode=yes", "root@10.9.0.3"]
        assert call[8].startswith(f"pgwu -d /p {cmd}")


def test_the_dut_host_is_left_without_the_runs_bearers(fake_ssh):
    """The copy of the bearer file is removed once loaded, and close() flushes the bearers it loaded
    (a control plane provisioning the host next finds the UEs free: the multihost lab's PFCP sweep
    after an ssh one was refused 73, UE in use); nothing is flushed by a DUT that loaded nothing."""
    log = fake_ssh
    cfg = SimpleNamespace(path="lab.yaml", dut={"metrics_url": "http://x/metrics", "ssh": "root@dut", "pin_dir": "/p"})
    MetricsDut(cfg).close()
    assert not log.exists()
    d = MetricsDut(cfg)
    d.install_bearers("/tmp/b.txt")
    d.close()
    d.close()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    remote = calls[0][-1].split(":", 1)[1]
    assert [c[-1] for c in calls[1:]] == ["pgwu -d /p session flush",
                                          f"pgwu -d /p session load {remote}; rc=$?; rm -f {remote}; exit $rc",
                                          "pgwu -d /p session flush"]
