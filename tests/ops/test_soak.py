"""Soak (issue 15): short sweeps back to back for GTPLAB_SOAK_SECONDS (default 1800), with bearer
churn on the DUT while they run and a Pushgateway that is killed (SIGKILL) and restarted every few
minutes. At the end nothing has leaked and nothing is lost:

- no network namespace, /sys/fs/bpf pin, lab state file or process of any lab a sweep made is left,
  and the test process holds the file descriptors it held before;
- every sweep exited 0 with run.json finished and every planned case in cases.jsonl;
- once the gateway is back (and `gtplab push` has pushed what a sweep could not, as the sweep said
  to), every case of every run is in the gateway or, when the killed gateway lost it after its run
  ended (SIGKILL before its persistence file was written: a sweep re-pushes what a restarted
  gateway lost only while it runs), in Prometheus' history scraped from it; and no "sweep running"
  group of a finished sweep is left.

Each sweep is the real CLI (`python -m gtplab sweep`) on the embedded lab: 2 cases (uplink and
downlink, one frame size, 16 flows at 10 kpps for 1 s) with a bearer count that changes from sweep
to sweep (1 to 4,000: the tables are flushed and refilled at every case). While a sweep's lab is
up, a churn thread loads and unloads blocks of 500 other bearers (TEIDs and UEs no sweep uses) on
its PGW-U with `pgwu session load/unload`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.lib.pgwu import pgwu
from tests.lib.monitor_stack import gateway_groups, pid_alive, prom_query, running_stack
from tests.lib import REPO
from gtplab.kernel.sched import proc_stat

pytestmark = [pytest.mark.long, pytest.mark.lab]

SOAK_S = float(os.environ.get("GTPLAB_SOAK_SECONDS", "1800"))
# the gateway dies every GATEWAY_PERIOD_S and stays down GATEWAY_DOWN_S ("every few minutes" on the
# default 30 min; at least 3 cycles on a short run)
GATEWAY_PERIOD_S = min(180.0, max(20.0, SOAK_S / 6))
GATEWAY_DOWN_S = min(30.0, GATEWAY_PERIOD_S / 3)
BEARERS = (16, 1000, 4000, 200, 1, 2500)
SIZES = (128, 256, 512, 1024)
CHURN_BLOCK = 500
CHURN_TEID0 = 3_000_000_000      # far above the sweep's TEIDs
CHURN_UE = "100.64"              # outside the sweep's UE pool


def _labs_on_disk() -> set[str]:
    d = Path(os.environ.get("GTPLAB_RUN_DIR", "/run/gtplab")) / "labs"
    return {p.stem for p in d.glob("*.json")} if d.is_dir() else set()


def _lab_leftovers(name: str) -> list[str]:
    left = [f"netns {ns}" for ns in (f"gtplab-{name}-gen", f"gtplab-{name}-dut")
            if os.path.exists(f"/run/netns/{ns}")]
    left += [p for p in (f"/sys/fs/bpf/gtplab-{name}", f"/sys/fs/bpf/gtplab-{name}-gen",
                         f"/run/gtplab/labs/{name}.json") if os.path.exists(p)]
    return left


def _processes_mentioning(words: list[str]) -> list[str]:
    """Live processes whose command line names one of words (our labs' names, our stack's dirs)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(w in cmd for w in words) and pid_alive(int(d)):
            found.append(f"{d}: {cmd.strip()}")
    return found


def _children() -> list[str]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = proc_stat(int(d))
        if st and st.ppid == os.getpid() and pid_alive(int(d)):
            out.append(f"{d} ({st.comm}) {st.state}")
    return out


def _block(k: int) -> str:
    return "".join(f"{CHURN_TEID0 + k * CHURN_BLOCK + i} {CHURN_UE}.{(k * CHURN_BLOCK + i) >> 8 & 255}."
                   f"{(k * CHURN_BLOCK + i) & 255} 192.0.2.{1 + i % 200} {i + 1}\n"
                   for i in range(CHURN_BLOCK))


class Churn(threading.Thread):
    """Load and unload blocks of bearers on the PGW-U of the sweep writing to `out` while it runs."""

    def __init__(self, out: Path, sweep: subprocess.Popen, tmp: Path):
        super().__init__(daemon=True)
        self.out, self.sweep, self.tmp = out, sweep, tmp
        self.loads = self.unloads = self.refused = 0
        self.error: BaseException | None = None
        self.reasons: dict[str, int] = {}

    def _pgwu(self, pin: str, *args: str) -> bool:
        cp = pgwu(pin, *args, check=False, timeout=60)
        if cp.returncode:
            why = (cp.stderr.strip().splitlines() or ["?"])[-1].replace(pin, "PIN")
            why = why.split(": ", 1)[-1] if why.startswith("/") else why
            self.reasons[why] = self.reasons.get(why, 0) + 1
        return cp.returncode == 0

    def run(self) -> None:
        try:
            self._churn()
        except BaseException as e:  # reported by the test
            self.error = e

    def _churn(self) -> None:
        pin = None
        while self.sweep.poll() is None and pin is None:
            try:
                name = json.loads((self.out / "run.json").read_text()).get("lab_name")
                if name and os.path.exists(f"/sys/fs/bpf/gtplab-{name}/config"):
                    pin = f"/sys/fs/bpf/gtplab-{name}"
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        k = 0
        files = []
        for j in range(4):
            f = self.tmp / f"churn-{j}.txt"
            f.write_text(_block(j))
            files.append(str(f))
        # until the sweep ends or tears its lab down
        while pin and self.sweep.poll() is None and os.path.exists(f"{pin}/config"):
            ok = self._pgwu(pin, "session", "load", files[k % 4])
            self.loads += ok
            self.refused += not ok
            time.sleep(0.05)
            if ok:
                ok = self._pgwu(pin, "session", "unload", files[k % 4])
                self.unloads += ok
                self.refused += not ok
            k += 1


class GatewayKiller(threading.Thread):
    """SIGKILL the stack's Pushgateway every GATEWAY_PERIOD_S; restart it GATEWAY_DOWN_S later."""

    def __init__(self, stack):
        super().__init__(daemon=True)
        self.stack = stack
        self.stop = threading.Event()
        self.kills = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stop.wait(GATEWAY_PERIOD_S - GATEWAY_DOWN_S):
            pid = self.stack.pids().get("pushgateway")
            if pid and pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                self.kills += 1
            self.stop.wait(GATEWAY_DOWN_S)
            cp = self.stack.up_cp()
            if cp.returncode:
                self.errors.append(cp.stderr)


def test_soak_sweeps_churn_and_a_dying_gateway(tmp_path):
    fds_before = sorted(os.listdir("/proc/self/fd"))
    with running_stack(tmp_path / "monitor") as stack:
        stack.up_cp = lambda: subprocess.run([sys.executable, "-m", "gtplab", *stack.up_args()], cwd=REPO,
                                             capture_output=True, text=True, timeout=120)
        killer = GatewayKiller(stack)
        killer.start()
        runs: list[dict] = []
        t_start = time.monotonic()
        t_end = t_start + SOAK_S
        i = 0
        try:
            while time.monotonic() < t_end:
                out = tmp_path / f"run-{i}"
                bearers = BEARERS[i % len(BEARERS)]
                args = ["sweep", "--no-scale", "--sizes", str(SIZES[i % len(SIZES)]), "--directions", "uplink,downlink",
                        "--flow-modes", "multi", "--flows", str(min(16, bearers)), "--bearers", str(bearers),
                        "--rate-mode", "fixed", "--rate", "10000", "--duration", "1", "--pcap-limit", "0",
                        "--no-latency", "--out", str(out), "--pushgateway", stack.gateway]
                sweep = subprocess.Popen([sys.executable, "-m", "gtplab", *args], cwd=REPO, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                churn = Churn(out, sweep, tmp_path)
                churn.start()
                try:
                    so, se = sweep.communicate(timeout=600)
                finally:
                    if sweep.poll() is None:
                        sweep.kill()
                        sweep.wait()
                churn.join(60)
                assert churn.error is None, f"churn during sweep {i}: {churn.error!r}"
                runs.append({"out": out, "rc": sweep.returncode, "stderr": se, "bearers": bearers,
                             "churn": (churn.loads, churn.unloads, churn.refused), "why": churn.reasons})
                assert sweep.returncode == 0, f"sweep {i} failed ({sweep.returncode}):\n{se[-3000:]}"
                i += 1
        finally:
            killer.stop.set()
            killer.join(120)
        assert not killer.errors, killer.errors
        # the gateway is back (the killer's last act is a restart; up again in case it was mid-cycle)
        assert stack.up_cp().returncode == 0

        # every result is on disk
        uuids = {}
        for r in runs:
            run = json.loads((r["out"] / "run.json").read_text())
            cases = [json.loads(ln) for ln in (r["out"] / "cases.jsonl").read_text().splitlines()]
            assert "finished" in run and "interrupted" not in run, run
            assert run["cases_done"] == run["cases_planned"] == len(cases) == 2
            assert run["conservation_failures"] == 0 and all(c["conservation_ok"] for c in cases)
            uuids[run["uuid"]] = {c["case_id"] for c in cases}
            r["lab"] = run["lab_name"]
        # what a sweep could not push it said so, with the command that pushes it: do that
        repushed = 0
        for r in runs:
            if "gtplab push" in r["stderr"]:
                cp = subprocess.run([sys.executable, "-m", "gtplab", "push", str(r["out"]), "--gateway",
                                     stack.gateway], cwd=REPO, capture_output=True, text=True, timeout=120)
                assert cp.returncode == 0, cp.stderr
                repushed += 1
        # ... then every case of every run is in the gateway or, if the gateway lost it (SIGKILL
        # right after the run's last push, before its persistence file was written), in the
        # Prometheus history scraped from it; and no running group of a finished sweep is left
        from gtplab.results.push import live_groups
        in_gateway = {uuid: set(gateway_groups(stack.gateway, uuid)) for uuid in uuids}
        window = int(time.monotonic() - t_start) + 120
        deadline = time.monotonic() + 60
        while True:
            got = prom_query(stack.prometheus, f'group by (uuid, case_id) (last_over_time('
                                               f'gtplab_case_loss_ratio{{job="gtplab_sweep"}}[{window}s]))')
            in_prom: dict[str, set] = {}
            for sm in got:
                in_prom.setdefault(sm["metric"].get("uuid"), set()).add(sm["metric"].get("case_id"))
            lost = {u: sorted(c - in_gateway[u] - in_prom.get(u, set())) for u, c in uuids.items()}
            lost = {u: c for u, c in lost.items() if c}
            if not lost:
                break
            assert time.monotonic() < deadline, f"in neither the gateway nor Prometheus: {lost}"
            time.sleep(1)
        only_prom = sum(len(c - in_gateway[u]) for u, c in uuids.items())
        assert not [g for g in live_groups(stack.gateway) if g["labels"].get("uuid") in uuids]
        marker = str(tmp_path)
    # nothing leaked: the labs, their processes, the stack's processes, our fds
    labs = [r["lab"] for r in runs]
    assert [left for name in labs for left in _lab_leftovers(name)] == []
    assert not set(labs) & _labs_on_disk()
    assert _processes_mentioning([f"gtplab-{n}" for n in labs] + [marker]) == []
    assert _children() == []
    assert sorted(os.listdir("/proc/self/fd")) == fds_before
    churned = [r["churn"] for r in runs]
    print(f"\nsoak {SOAK_S:.0f} s: {len(runs)} sweeps ({2 * len(runs)} cases), gateway killed "
          f"{killer.kills} times (every {GATEWAY_PERIOD_S:.0f} s, down {GATEWAY_DOWN_S:.0f} s), "
          f"{repushed} runs pushed afterwards with gtplab push, {only_prom} cases in Prometheus only "
          f"(lost by the killed gateway after their run ended), churn loads/unloads/refused "
          f"{sum(c[0] for c in churned)}/{sum(c[1] for c in churned)}/{sum(c[2] for c in churned)}")
    reasons: dict[str, int] = {}
    for r in runs:
        for k, v in r["why"].items():
            reasons[k] = reasons.get(k, 0) + v
    print(f"churn refusals by last stderr line: {reasons}")
    assert killer.kills >= 1
    assert sum(c[0] for c in churned) > 0 and sum(c[1] for c in churned) > 0
