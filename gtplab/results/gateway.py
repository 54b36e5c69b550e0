"""The Pushgateway's side of a sweep, apart from its cases' metrics: its address, its answers
(status, the groups it holds; bounded: gtplab.bounded), and the "sweep running" groups.

While a sweep runs it keeps one "sweep running" group (job gtplab_sweep_live) that names its owner
(host, boot, pid and the pid's start time: gtplab.kernel.sched); Pusher.finish() deletes it. A sweep
killed with SIGKILL never gets there, so the next push (a Pusher's first contact, `gtplab push`) and
`gtplab monitor up` delete every running group whose owner is gone (clear_stale_live_groups).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.parse
from typing import Any

from prometheus_client import delete_from_gateway

from gtplab.bounded import http_get
from gtplab.errors import UserError
from gtplab.kernel.sched import boot_id, live_stat
from gtplab.results.push_metrics import _num

LIVE_JOB = "gtplab_sweep_live"
DEFAULT_GATEWAY = "http://127.0.0.1:19091"


# A running group whose owner cannot be checked from here (another host, another boot) is taken as
# stale once it has not been pushed for this long (a running sweep pushes at every case start).
UNCHECKABLE_STALE_AFTER_S = 24 * 3600


def default_gateway() -> str:
    return os.environ.get("GTPLAB_PUSHGATEWAY", DEFAULT_GATEWAY)


def check_gateway_url(url: str) -> str:
    """The Pushgateway URL, checked before anything starts (UserError naming what is wrong)."""
    try:
        u = urllib.parse.urlsplit(url)
        u.port    # raises ValueError for a bad port, or an unclosed [IPv6 address
    except ValueError as e:
        raise UserError(f"pushgateway URL {url!r}: {e}") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UserError(f"pushgateway URL {url!r}: give http://HOST[:PORT]")
    return url


def _reason(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code} {e.reason}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _pid_start(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22); None if it is gone."""
    st = live_stat(pid)
    return str(st.start_ticks) if st else None


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """Who runs a sweep: enough to tell later, from this host, whether it still runs."""
    pid = os.getpid() if pid is None else pid
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": str(pid),
            "pid_start": _pid_start(pid) or ""}


def owner_alive(owner: dict[str, str]) -> bool | None:
    """True/False for an owner on this host and boot; None when it cannot be checked from here."""
    if owner.get("host") != socket.gethostname() or owner.get("boot_id") != boot_id():
        return None
    try:
        pid = int(owner.get("pid", ""))
    except ValueError:
        return False
    start = _pid_start(pid)
    return start is not None and start == owner.get("pid_start")


# What the gateway's answers may take (gtplab.bounded): its status is a few kB; its metrics are every
# group it holds (a sweep case some 10 kB), so a gateway of thousands of cases stays under the bound
GATEWAY_STATUS_MAX_BYTES = 1 << 20
GATEWAY_METRICS_MAX_BYTES = 64 << 20


def _gateway_json(gateway_url: str, path: str, limit: int, timeout: float) -> Any:
    """The JSON of one of the gateway's API answers, at most `limit` bytes within `timeout` s (OSError
    when it does not answer or answers more or longer, ValueError when it is not JSON)."""
    url = gateway_url.rstrip("/") + path
    return json.loads(http_get(url, limit, timeout, what=f"pushgateway {url}"))


def live_groups(gateway_url: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The gateway's "sweep running" groups: [{"labels": grouping key with job, "owner": labels or
    None, "pushed": push time}] (OSError, ValueError if the gateway does not answer sensibly)."""
    body = _gateway_json(gateway_url, "/api/v1/metrics", GATEWAY_METRICS_MAX_BYTES, timeout)
    out = []
    for g in body.get("data") or []:
        labels = g.get("labels") or {}
        if labels.get("job") != LIVE_JOB:
            continue
        owner = None
        for m in (g.get("gtplab_sweep_owner_info") or {}).get("metrics") or []:
            owner = {k: m["labels"].get(k, "") for k in ("host", "boot_id", "pid", "pid_start")}
        pushed = None
        for m in (g.get("push_time_seconds") or {}).get("metrics") or []:
            pushed = _num(m.get("value"))
        out.append({"labels": labels, "owner": owner, "pushed": pushed})
    return out


def delete_live_group(gateway_url: str, key: dict[str, str], timeout: float = 5.0) -> bool:
    """Delete one "sweep running" group and wait (up to `timeout`) until the gateway no longer lists
    it: the gateway answers a DELETE with 202 and applies it later, so a reader right after the
    call could still see the group. True once it is gone (OSError if the gateway does not answer)."""
    delete_from_gateway(gateway_url, job=LIVE_JOB, grouping_key=key, timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        labels = [{k: v for k, v in g["labels"].items() if k != "job"}
                  for g in live_groups(gateway_url, timeout)]
        if key not in labels:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def clear_stale_live_groups(gateway_url: str, timeout: float = 5.0, now: float | None = None
                            ) -> list[dict[str, str]]:
    """Delete the "sweep running" groups of sweeps that are gone: owner on this host and boot no
    longer running; else (unknown owner, another host) not pushed for UNCHECKABLE_STALE_AFTER_S.
    Returns the grouping keys deleted. Raises OSError/ValueError if the gateway does not answer."""
    now = time.time() if now is None else now
    deleted = []
    for g in live_groups(gateway_url, timeout):
        alive = owner_alive(g["owner"]) if g["owner"] else None
        if alive is None:
            alive = g["pushed"] is None or now - g["pushed"] < UNCHECKABLE_STALE_AFTER_S
        if alive:
            continue
        key = {k: v for k, v in g["labels"].items() if k != "job"}
        delete_live_group(gateway_url, key, timeout)
        deleted.append(key)
    return deleted


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration as the gateway prints its flags ("1s", "5m0s", "1m30.5s", "500ms")."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)", text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * units[u] for n, u in parts)


def gateway_start_time(gateway_url: str, timeout: float = 5.0) -> str:
    """When the gateway process started (its /api/v1/status): changes when it was restarted."""
    return str(_gateway_json(gateway_url, "/api/v1/status", GATEWAY_STATUS_MAX_BYTES, timeout)["data"]["start_time"])
