"""Pushing a sweep's cases to the Pushgateway: Pusher (what the sweep calls, case by case) and
push_results_dir (`gtplab push RESULTS_DIR`).

The sweep keeps its results on disk (gtplab/results/store.py) whatever happens here; a Pusher only pushes.
If the gateway is down, the Pusher says so once, holds the cases it could not push, and pushes them
as soon as the gateway answers again; what is still held at the end is pushed later with
`gtplab push RESULTS_DIR`. Nothing is lost.
"""

from __future__ import annotations

import sys
import time
import urllib.error
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from gtplab.results import store as results
from gtplab.results.gateway import (GATEWAY_STATUS_MAX_BYTES, LIVE_JOB, _gateway_json, _reason,
                                    clear_stale_live_groups, delete_live_group, gateway_start_time,
                                    go_duration, owner_labels)
from gtplab.results.push_metrics import JOB, case_registry, grouping_key

# finish() waits for the gateway's next persistence write when its interval is at most this long
# (gtplab monitor runs it with 1 s; the gateway's own default is 5 min: not waited for)
MAX_PERSIST_WAIT_S = 10.0


def _push(gateway_url: str, run: dict[str, Any], case: dict[str, Any], timeout: float) -> None:
    """Push one case; raises OSError (URLError, HTTPError, timeouts) if the gateway does not take it."""
    push_to_gateway(gateway_url, job=JOB, registry=case_registry(run, case),
                    grouping_key=grouping_key(run, case), timeout=timeout)


def push_case(gateway_url: str, run: dict[str, Any], case: dict[str, Any], timeout: float = 5.0) -> bool:
    """Push one case's results; True if the gateway took them, False if not (never raises for that)."""
    try:
        _push(gateway_url, run, case, timeout)
        return True
    except OSError:
        return False


class Pusher:
    """What the sweep uses: push(case) after each case. Never raises because of the gateway.

    If a push fails, it warns once (on `warn`), holds the case, and goes on; at the next successful
    push it first pushes every held case, in order. `pending` lists what is still held.

    A gateway killed (SIGKILL, OOM, power) loses what it took since it last wrote its persistence
    file. So each push first asks the gateway when it started; if that changed since the last push,
    the gateway was restarted, and every case this run pushed before is pushed again (a push
    replaces its own group: pushing twice is harmless).
    """

    def __init__(self, gateway_url: str | None, run: dict[str, Any], results_dir: str | None = None,
                 timeout: float = 2.0, warn: Callable[[str], None] | None = None):
        self.gateway_url = gateway_url
        self.run = run
        self.results_dir = results_dir
        self.timeout = timeout
        self.warn = warn or (lambda msg: print(f"gtplab: {msg}", file=sys.stderr, flush=True))
        self.pending: list[dict[str, Any]] = []
        self.pushed = 0
        self.warned = False
        self.cleared = False     # stale "sweep running" groups looked for (once the gateway answers)
        self.owner = owner_labels()
        self.sent: list[dict[str, Any]] = []     # pushed (to the gateway that runs since gateway_start)
        self.gateway_start: str | None = None
        self.restarts_seen = 0

    def _clear_stale(self) -> None:
        """Once, at the first contact with the gateway: remove groups of sweeps killed earlier."""
        if self.cleared:
            return
        try:
            clear_stale_live_groups(self.gateway_url, self.timeout)
            self.cleared = True
        except Exception:       # the gateway is down or odd: try again at the next push
            pass

    def _warn_down(self, e: BaseException) -> None:
        if self.warned:
            return
        self.warned = True
        later = f"; push them later with `gtplab push {self.results_dir}`" if self.results_dir else ""
        self.warn(f"pushgateway {self.gateway_url} is not taking results ({_reason(e)}); "
                  f"the sweep goes on, every result stays on disk{later}")

    def push(self, case: dict[str, Any]) -> bool:
        """Push this case (and any held before it). True if everything is pushed now."""
        if not self.gateway_url:
            return False
        self._clear_stale()
        self.pending.append(case)
        try:
            start: str | None = gateway_start_time(self.gateway_url, self.timeout)
        except urllib.error.HTTPError:
            start = None        # it answers, without the status API: no restart detection
        except Exception as e:
            self._warn_down(e)
            return False
        if start is not None and self.gateway_start is not None and start != self.gateway_start:
            # restarted since our last push: what it had from us may be gone with it
            self.restarts_seen += 1
            self.pending[:0] = self.sent
            self.sent = []
        self.gateway_start = start if start is not None else self.gateway_start
        while self.pending:
            try:
                _push(self.gateway_url, self.run, self.pending[0], self.timeout)
            except Exception as e:      # OSError, and anything else: never the sweep's problem
                self._warn_down(e)
                return False
            self.sent.append(self.pending.pop(0))
            self.pushed += 1
        return True

    def case_started(self, case: dict[str, Any], index: int | None = None, total: int | None = None) -> bool:
        """Optional: tell the live dashboard which case runs now (one group per run, replaced each time)."""
        if not self.gateway_url:
            return False
        self._clear_stale()
        reg = CollectorRegistry()
        key = grouping_key(self.run, case)
        labels = {k: key[k] for k in ("action", "case_id", "frame_size", "direction", "flows", "checksum", "ip", "n3")}
        g = Gauge("gtplab_sweep_running_case_info", "Constant 1; the case running now as labels",
                  list(labels), registry=reg)
        g.labels(**labels).set(1)
        Gauge("gtplab_sweep_owner_info", "Constant 1; the process running the sweep, as labels",
              list(self.owner), registry=reg).labels(**self.owner).set(1)
        Gauge("gtplab_sweep_case_start_timestamp_seconds", "When the running case started (Unix time)",
              registry=reg).set(time.time())
        if index is not None:
            Gauge("gtplab_sweep_cases_done", "Cases finished in this run", registry=reg).set(index)
        if total is not None:
            Gauge("gtplab_sweep_cases", "Cases planned in this run", registry=reg).set(total)
        try:
            push_to_gateway(self.gateway_url, job=LIVE_JOB, registry=reg,
                            grouping_key={"uuid": str(self.run["uuid"]),
                                          "backend": str(self.run.get("backend", ""))},
                            timeout=self.timeout)
            return True
        except Exception as e:
            self._warn_down(e)
            return False

    def _until_persisted(self) -> None:
        """After the run's last push: wait until the gateway has written its persistence file once
        more (its persistence.interval, when that is at most MAX_PERSIST_WAIT_S), then check it
        still runs the same process. If it was restarted meanwhile, push the run again and wait
        again; if it does not answer, hold the run's cases (finish() then says `gtplab push`)."""
        if not self.sent:
            return
        try:
            flags = _gateway_json(self.gateway_url, "/api/v1/status", GATEWAY_STATUS_MAX_BYTES,
                                  self.timeout)["data"]["flags"]
        except (urllib.error.HTTPError, ValueError, KeyError, TypeError):
            return      # it answers, without the status API: nothing to wait for
        except Exception:
            # down since the last push (killed right after it): what it persisted is unknown
            self.pending[:0] = self.sent
            self.sent = []
            return
        interval = go_duration(flags.get("persistence.interval", ""))
        if not flags.get("persistence.file") or interval is None or interval > MAX_PERSIST_WAIT_S:
            return
        for _ in range(3):
            time.sleep(interval + 0.5)
            try:
                start = gateway_start_time(self.gateway_url, self.timeout)
            except Exception:
                self.pending[:0] = self.sent   # gone: what it persisted is unknown
                self.sent = []
                return
            if start == self.gateway_start:
                return
            self.restarts_seen += 1
            self.gateway_start = start
            self.pending[:0] = self.sent
            self.sent = []
            while self.pending:
                try:
                    _push(self.gateway_url, self.run, self.pending[0], self.timeout)
                except Exception:
                    return
                self.sent.append(self.pending.pop(0))

    def finish(self) -> bool:
        """End of the sweep: one last try for held cases, remove the live group. True if none is held."""
        if self.gateway_url and self.pending:
            last = self.pending.pop()
            self.push(last)  # pushes the held cases first, then last
        if self.gateway_url and not self.pending:
            try:
                delete_live_group(self.gateway_url, {"uuid": str(self.run["uuid"]),
                                                     "backend": str(self.run.get("backend", ""))},
                                  timeout=self.timeout)
            except Exception:
                pass
            self._until_persisted()
        if self.pending and self.results_dir:
            self.warn(f"{len(self.pending)} case(s) not pushed; they are in {self.results_dir}: "
                      f"`gtplab push {self.results_dir}` pushes them")
        return not self.pending


def push_results_dir(results_dir: str, gateway_url: str, timeout: float = 5.0) -> tuple[int, int, str | None]:
    """Push every case of a results directory: (pushed, failed, first error or None). A gateway that
    does not answer at all (refused, timed out: not an HTTP error) is not asked again for the
    remaining cases, which count as failed: a hanging gateway costs one timeout, not one per case."""
    run = results.read_run(results_dir)
    cases = results.read_cases(results_dir, run.get("uuid"))
    pushed = failed = 0
    first_error = None
    for i, case in enumerate(cases):
        try:
            _push(gateway_url, run, case, timeout)
            pushed += 1
        except OSError as e:
            failed += 1
            first_error = first_error or _reason(e)
            if not isinstance(e, urllib.error.HTTPError):
                failed += len(cases) - i - 1
                break
    return pushed, failed, first_error
