"""Machine-wide claims on CPUs: two labs never share CPUs silently (docs/lab.md, "Who else").

    c = claim("3fa9c1", [0, 1], state_path, share=False)   # LabError naming the holder, or the claim
    holders([0, 1], but="3fa9c1")                           # the other live labs on those CPUs now
    release("3fa9c1")

A lab claims every CPU of its layout (generator and DUT) when it is built. A claim is a file
/run/gtplab/cpus/cpu<N>.<lab>.json ($GTPLAB_CLAIMS_DIR, machine-wide whatever $GTPLAB_RUN_DIR says)
holding the lab's name, its owner's pid and start time, and its state file; it is written and
checked under an exclusive flock of the directory's .lock, so two labs that start at once see each
other. A claim is stale, and is removed by the next claim or look, when its lab's state file is gone
or when its owner process is gone and the lab was not made to outlive it (`gtplab lab up` marks its
labs standalone). Teardown releases the lab's claims.

A second lab whose CPUs overlap a live claim is refused, the holder named, unless it asks to share
(Lab.up(share_cpus=True), `--share-cpus`, lab config `lab.share_cpus: true`, or $GTPLAB_SHARE_CPUS=1);
then its claim records whom it shares with, and every trial records the other labs holding its CPUs
at the time (gtplab.observe.host), so run.json, the case records and the report say so. The test
suite's labs share (tests/conftest.py): several developers run it at once on this machine, every
lab test builds its lab on CPUs 0 and 1, and the tests time nothing (docs/testing.md).

Used by gtplab.lab.topology (Lab.up, teardown) and gtplab.observe.host.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from gtplab.errors import LabError
from gtplab.kernel.sched import alive, start_time

SHARE_ENV = "GTPLAB_SHARE_CPUS"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def claims_dir() -> Path:
    return Path(os.environ.get("GTPLAB_CLAIMS_DIR", "/run/gtplab/cpus"))


def share_from_env() -> bool:
    """$GTPLAB_SHARE_CPUS as a yes/no (unset: no); LabError on anything else."""
    v = os.environ.get(SHARE_ENV, "").strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise LabError(f"${SHARE_ENV}={os.environ[SHARE_ENV]!r}: give 1 (share CPUs with other labs) or 0")


@contextmanager
def _locked():
    d = claims_dir()
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield d
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _live(c: dict) -> tuple[bool, str]:
    """Whether a claim still holds, and if not why."""
    sp = c.get("state")
    try:
        st = json.loads(Path(sp).read_text()) if sp else None
    except (OSError, ValueError):
        st = None
    if st is None:
        return False, "its lab's state file is gone"
    if alive(int(c.get("pid", 0)), c.get("start")):
        return True, ""
    if st.get("standalone"):
        return True, ""          # made by `gtplab lab up` to outlive its creator: holds until lab down
    return False, f"its owner (pid {c.get('pid')}) is gone"


def _scan(d: Path, cpus: list[int] | None, but: str | None) -> tuple[list[dict], list[str]]:
    """Live claims on cpus (None: all) of labs other than `but`; stale claim files are removed."""
    live, stale = [], []
    for f in sorted(d.glob("cpu*.json")):
        try:
            c = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if but is not None and c.get("lab") == but:
            continue
        if cpus is not None and c.get("cpu") not in cpus:
            continue
        ok, why = _live(c)
        if ok:
            live.append(c)
        else:
            stale.append(f"lab {c.get('lab')} on CPU {c.get('cpu')}: {why}")
            f.unlink(missing_ok=True)
    return live, stale


def _by_lab(claims: list[dict]) -> list[dict]:
    out: dict[str, dict] = {}
    for c in claims:
        h = out.setdefault(c["lab"], {"lab": c["lab"], "pid": c.get("pid"), "cpus": [], "shared": c.get("shared")})
        h["cpus"].append(c["cpu"])
    return [dict(h, cpus=sorted(h["cpus"])) for h in out.values()]


def holder_text(h: dict) -> str:
    return f"lab {h['lab']} (pid {h['pid']}) on CPU(s) {','.join(map(str, h['cpus']))}"


def claim(lab: str, cpus: list[int], state_path: Path | str, share: bool = False) -> dict:
    """Claim cpus for lab (whose state file is state_path); LabError naming the holders when another
    live lab holds one of them and share is False. Returns the claim's record for the lab's state:
    {"cpus", "shared": share, "shared_with": [other labs then], "stale_removed": [...]}."""
    cpus = sorted(set(cpus))
    with _locked() as d:
        others, stale = _scan(d, cpus, but=lab)
        held = _by_lab(others)
        if held and not share:
            raise LabError("CPU(s) taken: " + "; ".join(map(holder_text, held)) + ". Use other CPUs "
                           "(--generator-cpus/--dut-cpus, lab config cpus), wait for it, or share them and "
                           f"say so in the results (--share-cpus, lab config lab.share_cpus, ${SHARE_ENV}=1)")
        rec = {"lab": lab, "pid": os.getpid(), "start": start_time(os.getpid()), "state": str(state_path),
               "shared": share, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        for c in cpus:
            tmp = d / f".cpu{c}.{lab}.tmp"
            tmp.write_text(json.dumps(dict(rec, cpu=c)) + "\n")
            os.replace(tmp, d / f"cpu{c}.{lab}.json")
    return {"cpus": cpus, "shared": share, "shared_with": held, "stale_removed": stale, "dir": str(d)}


def holders(cpus: list[int], but: str | None = None) -> list[dict]:
    """The live labs (other than `but`) holding any of cpus now: [{"lab", "pid", "cpus", "shared"}]."""
    d = claims_dir()
    if not d.is_dir():
        return []
    with _locked() as d:
        live, _ = _scan(d, sorted(set(cpus)), but)
    return _by_lab(live)


def release(lab: str) -> list[str]:
    """Remove lab's claims; returns what was removed (nothing when it held none)."""
    d = claims_dir()
    if not d.is_dir():
        return []
    out = []
    with _locked() as d:
        for f in sorted(d.glob(f"cpu*.{lab}.json")):
            try:
                if json.loads(f.read_text()).get("lab") != lab:
                    continue
            except (OSError, ValueError):
                pass
            f.unlink(missing_ok=True)
            out.append(f"CPU claim {f.name}")
    return out
