"""Two labs never share CPUs silently (gtplab/lab/claims.py): a lab claims its CPUs machine-wide, a
second lab that would overlap is refused with the holder named unless it asks to share, and then it
says so; claims go with teardown and with a dead owner. Each test uses a claims directory of its own
($GTPLAB_CLAIMS_DIR), so another suite's labs on this machine never meet these."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from gtplab.errors import LabError
from gtplab.lab import claims
from tests.lib import REPO


@pytest.fixture
def claims_dir(tmp_path, monkeypatch):
    d = tmp_path / "cpus"
    monkeypatch.setenv("GTPLAB_CLAIMS_DIR", str(d))
    monkeypatch.delenv(claims.SHARE_ENV, raising=False)
    return d


def _state(tmp_path, name: str, **kw) -> str:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"name": name, **kw}))
    return str(p)


def test_an_overlapping_claim_is_refused_naming_the_holder(claims_dir, tmp_path):
    a = claims.claim("laba", [0, 1], _state(tmp_path, "laba"))
    assert a["shared_with"] == [] and sorted(p.name for p in claims_dir.glob("cpu*.json")) == [
        "cpu0.laba.json", "cpu1.laba.json"]
    with pytest.raises(LabError, match=rf"lab laba \(pid {os.getpid()}\) on CPU\(s\) 1.*--share-cpus"):
        claims.claim("labb", [1, 2], _state(tmp_path, "labb"))
    assert not list(claims_dir.glob("cpu*.labb.json"))          # nothing half-claimed
    assert claims.claim("labc", [2, 3], _state(tmp_path, "labc"))["shared_with"] == []   # no overlap


def test_a_lab_asked_to_share_is_let_in_and_says_with_whom(claims_dir, tmp_path):
    claims.claim("laba", [0, 1], _state(tmp_path, "laba"))
    b = claims.claim("labb", [1], _state(tmp_path, "labb"), share=True)
    assert b["shared"] and [h["lab"] for h in b["shared_with"]] == ["laba"] and b["shared_with"][0]["cpus"] == [1]
    assert [h["lab"] for h in claims.holders([0, 1], but="labb")] == ["laba"]
    assert [h["lab"] for h in claims.holders([1], but="laba")] == ["labb"]
    assert claims.release("labb") == ["CPU claim cpu1.labb.json"]
    assert claims.holders([1], but="laba") == [] and claims.release("labb") == []


def test_claims_of_a_gone_lab_or_a_dead_owner_are_stale(claims_dir, tmp_path):
    gone = _state(tmp_path, "gone")
    claims.claim("gone", [0], gone)
    os.unlink(gone)                                 # its lab is gone (state file removed)
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(p.stdout)
    (claims_dir / "cpu1.dead.json").write_text(json.dumps(
        {"lab": "dead", "cpu": 1, "pid": dead, "start": 1, "state": _state(tmp_path, "dead")}))
    c = claims.claim("new", [0, 1], _state(tmp_path, "new"))
    assert c["shared_with"] == [] and len(c["stale_removed"]) == 2, c
    assert any("state file is gone" in s for s in c["stale_removed"])
    assert any(f"owner (pid {dead}) is gone" in s for s in c["stale_removed"])
    # a standalone lab (`gtplab lab up`) holds its CPUs after its creator exited, until lab down
    (claims_dir / "cpu2.alone.json").write_text(json.dumps(
        {"lab": "alone", "cpu": 2, "pid": dead, "start": 1, "state": _state(tmp_path, "alone", standalone=True)}))
    with pytest.raises(LabError, match="lab alone"):
        claims.claim("other", [2], _state(tmp_path, "other"))


def test_share_from_the_environment(monkeypatch):
    for v, want in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(claims.SHARE_ENV, v)
        assert claims.share_from_env() is want
    monkeypatch.setenv(claims.SHARE_ENV, "maybe")
    with pytest.raises(LabError, match="GTPLAB_SHARE_CPUS"):
        claims.share_from_env()


@pytest.mark.lab
def test_two_labs_on_the_same_cpus(claims_dir):
    """Lab.up claims its layout's CPUs: a second lab on them is refused (the first named, nothing of it
    left behind), one asked to share is built and says so in its layout; teardown releases, and a
    lab whose owner was killed no longer holds its CPUs."""
    from gtplab.lab.cpu import CpuLayout
    from gtplab.lab.topology import Lab
    from tests.lib.lab import leftovers
    cpus = CpuLayout.default()
    with Lab.up(dut="drop", cpus=cpus, share_cpus=False) as one:
        assert one.state["claim"]["cpus"] == sorted(set(cpus.generator + cpus.dut))
        with pytest.raises(LabError, match=f"lab {one.name} \\(pid {os.getpid()}\\)"):
            Lab.up(name="clm" + os.urandom(3).hex(), dut="drop", cpus=cpus, share_cpus=False)
        assert not [p for p in claims_dir.glob("cpu*.json") if one.name not in p.name]
        with Lab.up(dut="drop", cpus=cpus, share_cpus=True) as two:
            lay = two.state["cpu_layout"]
            assert lay["claim"]["shared"] and [h["lab"] for h in lay["claim"]["shared_with"]] == [one.name]
            assert any(f"shared with lab {one.name}" in n for n in lay["notes"]), lay["notes"]
            assert [h["lab"] for h in one.shared_with()] == [two.name]      # what one's trials record
        assert one.shared_with() == [] and leftovers(two.name) == []
    assert not list(claims_dir.glob("cpu*.json"))
    # the owner dies with its lab up: the next lab gets the CPUs, the stale claim named
    code = ("import os; from gtplab.lab.topology import Lab; lab = Lab.up(dut='drop', share_cpus=False); "
            "print(lab.name, flush=True); os.kill(os.getpid(), 9)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, GTPLAB_CLAIMS_DIR=str(claims_dir)))
    dead = p.stdout.strip()
    try:
        assert dead and p.returncode == -signal.SIGKILL, p.stderr
        with Lab.up(dut="drop", cpus=cpus, share_cpus=False) as three:
            assert any(f"lab {dead}" in s for s in three.state["claim"]["stale_removed"])
    finally:
        subprocess.run([sys.executable, "-m", "gtplab", "lab", "down", "--name", dead], capture_output=True, cwd=REPO)
