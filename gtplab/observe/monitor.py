"""`gtplab monitor up|down|status`: a local Prometheus + Pushgateway + node-exporter from Debian's packages.

systemd is not PID 1 on the lab machines we run on, so the three are plain background processes, each
in its own session (setsid), started by `up` and stopped by `down`:

    STATE_DIR/monitor.json            the settings `up` used (ports, targets, data dir)
    STATE_DIR/<name>/pid, cmdline     the process and the exact command line it was started with
    STATE_DIR/<name>/log              its stdout and stderr
    STATE_DIR/prometheus/prometheus.yml   the generated Prometheus configuration
    DATA_DIR/<name>/                  Prometheus' TSDB, the Pushgateway's persistence file

`down` signals a pid only if /proc/PID/cmdline is still the command line `up` recorded, so it never
stops anything it did not start. Everything listens on 127.0.0.1 unless --listen-address says otherwise.
docs/monitoring.md has the metric names and the dashboards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import sys
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from gtplab import bounded
from gtplab.errors import UserError
from gtplab.kernel.sched import live_stat
from gtplab.results.push import clear_stale_live_groups
from gtplab.results.store import check_writable

DEFAULT_STATE_DIR = "/run/gtplab/monitor"
DEFAULT_DATA_DIR = "/var/lib/gtplab/monitor"
DEFAULT_PGWU_TARGET = "127.0.0.1:9464"
NAMES = ("node-exporter", "pushgateway", "prometheus")  # start order; stop in reverse
BINARIES = {
    "prometheus": "/usr/bin/prometheus",
    "pushgateway": "/usr/bin/prometheus-pushgateway",
    "node-exporter": "/usr/bin/prometheus-node-exporter",
}
# node-exporter collectors the dashboards use (the defaults also stat every filesystem: slow, useless here)
NODE_COLLECTORS = ("cpu", "stat", "softnet", "interrupts", "netdev", "meminfo", "loadavg", "pressure")


@dataclass
class Settings:
    state_dir: str = DEFAULT_STATE_DIR
    data_dir: str = DEFAULT_DATA_DIR
    listen_address: str = "127.0.0.1"
    prometheus_port: int = 19090
    pushgateway_port: int = 19091
    node_exporter_port: int = 19100
    pgwu_targets: list[str] = field(default_factory=lambda: [DEFAULT_PGWU_TARGET])
    scrape_interval: str = "2s"
    retention: str = "30d"

    def address(self, name: str) -> str:
        port = {"prometheus": self.prometheus_port, "pushgateway": self.pushgateway_port,
                "node-exporter": self.node_exporter_port}[name]
        host = self.listen_address
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def url(self, name: str) -> str:
        return f"http://{self.address(name)}"


def ready_path(name: str) -> str:
    return "/metrics" if name == "node-exporter" else "/-/ready"


def prometheus_config(s: Settings) -> dict:
    jobs = [
        {"job_name": "pushgateway", "honor_labels": True,
         "static_configs": [{"targets": [s.address("pushgateway")]}]},
        {"job_name": "node", "static_configs": [{"targets": [s.address("node-exporter")]}]},
    ]
    if s.pgwu_targets:
        jobs.append({"job_name": "pgwu", "static_configs": [{"targets": list(s.pgwu_targets)}]})
    return {"global": {"scrape_interval": s.scrape_interval, "evaluation_interval": s.scrape_interval,
                       "scrape_timeout": s.scrape_interval},
            "scrape_configs": jobs}


def command(s: Settings, name: str) -> list[str]:
    data = Path(s.data_dir) / name
    state = Path(s.state_dir) / name
    if name == "prometheus":
        return [BINARIES[name], f"--config.file={state / 'prometheus.yml'}",
                f"--storage.tsdb.path={data}", f"--storage.tsdb.retention.time={s.retention}",
                f"--web.listen-address={s.address(name)}"]
    if name == "pushgateway":
        return [BINARIES[name], f"--web.listen-address={s.address(name)}",
                f"--persistence.file={data / 'pushgateway.data'}", "--persistence.interval=1s"]
    # the textfile directory also makes the command line unique to this state dir
    return [BINARIES[name], f"--web.listen-address={s.address(name)}", "--collector.disable-defaults",
            *(f"--collector.{c}" for c in NODE_COLLECTORS),
            f"--collector.textfile.directory={state / 'textfile'}", "--collector.textfile"]


# ---- processes -------------------------------------------------------------------------------------

def _read_cmdline(pid: int) -> list[str] | None:
    """The live process's argv, or None if it is gone (zombies count as gone)."""
    if live_stat(pid) is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def running_pid(state_dir: str, name: str) -> int | None:
    """The pid of OUR process `name` if it runs: the pid file's process with the recorded cmdline."""
    d = Path(state_dir) / name
    try:
        pid = int(_state_file(d / "pid"))
        want = _recorded_cmdline(d)
    except (FileNotFoundError, ValueError):
        return None
    return pid if _read_cmdline(pid) == want else None


def _state_file(path: Path) -> bytes:
    """A file of the state directory, at most bounded.STATE_FILE_BYTES (the directory is the user's:
    --state-dir); FileNotFoundError when it is missing, UserError in one line when it is not one."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    return bounded.read_file(path, bounded.STATE_FILE_BYTES, f"monitor state file {path}")


def _recorded_cmdline(d: Path) -> list:
    want = json.loads(_state_file(d / "cmdline"))
    if not isinstance(want, list):
        raise ValueError(f"{d / 'cmdline'}: not a command line")
    return want


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)  # only if it is our child (in-process use, e.g. tests)
    except ChildProcessError:
        pass


def stop(state_dir: str, name: str, timeout: float = 10.0) -> bool:
    """Stop our `name` process; True if it was running."""
    pid = running_pid(state_dir, name)
    d = Path(state_dir) / name
    if pid is None:
        (d / "pid").unlink(missing_ok=True)
        return False
    want = _recorded_cmdline(d)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _read_cmdline(pid) == want:
        _reap(pid)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    _reap(pid)
    (d / "pid").unlink(missing_ok=True)
    return True


def probe(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (OSError, ValueError):
        return False


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # as the Go servers do: connections in TIME_WAIT from a previous run do not block the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _log_tail(path: Path, lines: int = 5) -> str:
    return " | ".join(bounded.read_tail(path).strip().splitlines()[-lines:])


def _start(s: Settings, name: str) -> subprocess.Popen:
    state = Path(s.state_dir) / name
    state.mkdir(parents=True, exist_ok=True)
    (Path(s.data_dir) / name).mkdir(parents=True, exist_ok=True)
    if name == "prometheus":
        (state / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(s), sort_keys=False))
    if name == "node-exporter":
        (state / "textfile").mkdir(exist_ok=True)
    argv = command(s, name)
    with open(state / "log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)
    (state / "cmdline").write_text(json.dumps(argv))
    (state / "pid").write_text(f"{proc.pid}\n")
    return proc


def _wait_ready(s: Settings, name: str, proc: subprocess.Popen, deadline: float) -> None:
    # proc.poll(), not /proc/PID/cmdline: right after fork the child still shows our own cmdline
    url = s.url(name) + ready_path(name)
    while True:
        if probe(url):
            return
        if proc.poll() is not None:
            raise UserError(f"{name} exited at start: {_log_tail(Path(s.state_dir) / name / 'log')}")
        if time.monotonic() > deadline:
            raise UserError(f"{name} did not answer {url} in time: "
                            f"{_log_tail(Path(s.state_dir) / name / 'log')}")
        time.sleep(0.1)


def load_settings(state_dir: str) -> Settings | None:
    try:
        raw = _state_file(Path(state_dir) / "monitor.json")
    except FileNotFoundError:
        return None
    try:
        return Settings(**json.loads(raw))
    except (ValueError, TypeError):
        raise UserError(f"monitor state file {Path(state_dir) / 'monitor.json'}: not the settings of "
                        "`gtplab monitor up` (remove it, or give another --state-dir)") from None


def up(s: Settings, timeout: float = 30.0) -> None:
    """Start whatever of the three is not running; all-or-nothing for what this call starts."""
    old = load_settings(s.state_dir)
    alive = [n for n in NAMES if running_pid(s.state_dir, n)]
    if alive and old is not None and old != s:
        raise UserError(f"already running from {s.state_dir} with other settings ({', '.join(alive)}); "
                        "run `gtplab monitor down` first")
    for n in NAMES:
        if n in alive:
            continue
        host, port = s.listen_address, int(s.address(n).rsplit(":", 1)[1])
        if not _port_free(host, port):
            raise UserError(f"{n}: port {port} on {host} is in use (choose another with "
                            f"--{n}-port)")
    Path(s.state_dir).mkdir(parents=True, exist_ok=True)
    (Path(s.state_dir) / "monitor.json").write_text(json.dumps(asdict(s), indent=2) + "\n")
    started: list[subprocess.Popen] = []
    deadline = time.monotonic() + timeout
    try:
        for n in NAMES:
            if n in alive:
                continue
            proc = _start(s, n)
            started.append(proc)
            _wait_ready(s, n, proc, deadline)
    except BaseException:
        for proc in reversed(started):  # our own children: no cmdline check needed
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for n in NAMES:
            if n not in alive:
                (Path(s.state_dir) / n / "pid").unlink(missing_ok=True)
        raise


def down(state_dir: str) -> list[str]:
    """Stop our processes; returns the names that were running."""
    return [n for n in reversed(NAMES) if stop(state_dir, n)]


def status(state_dir: str) -> dict[str, dict]:
    s = load_settings(state_dir)
    out = {}
    for n in NAMES:
        pid = running_pid(state_dir, n)
        url = s.url(n) if s else None
        ready = bool(pid and url and probe(url + ready_path(n)))
        out[n] = {"state": "up" if ready else ("starting" if pid else "down"), "pid": pid, "url": url}
    return out


# ---- CLI -------------------------------------------------------------------------------------------

def _print_status(st: dict[str, dict]) -> None:
    for n, v in st.items():
        print(f"{n:14} {v['state']:8} {v['url'] or '-':28} {'pid ' + str(v['pid']) if v['pid'] else ''}")


def _clear_stale_sweeps(gateway_url: str) -> None:
    """A sweep killed while pushing leaves its "sweep running" group (kept across restarts by the
    gateway's persistence file): remove the ones whose sweep is gone."""
    try:
        gone = clear_stale_live_groups(gateway_url)
    except Exception as e:  # the stack is up; a gateway that does not answer this is not fatal
        print(f"gtplab monitor: couldn't look for stale 'sweep running' groups: {e}", file=sys.stderr)
        return
    for key in gone:
        print(f"removed the stale 'sweep running' group of run {key.get('uuid', '?')} (its sweep is gone)")


_RETENTION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")     # Prometheus' duration form, e.g. 30d, 1w2d


def do_up(args: argparse.Namespace) -> int:
    """Everything checked before anything starts (a bad --retention would stop Prometheus only at
    its start, after the gateway), then up."""
    for t in args.pgwu_target:
        host, _, port = t.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UserError(f"--pgwu-target {t!r}: want HOST:PORT")
    iv = args.scrape_interval
    if not iv[:-1].isdigit() or iv[-1:] not in ("s", "m") or int(iv[:-1]) == 0:
        raise UserError(f"--scrape-interval {iv!r}: want e.g. 2s (seconds or minutes, > 0)")
    if not _RETENTION.match(args.retention) or not any(c in "123456789" for c in args.retention):
        raise UserError(f"--retention {args.retention!r}: want a duration > 0, e.g. 30d, 12h, 1w")
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= 3600):
        raise UserError(f"--timeout {args.timeout}: seconds, > 0 and at most 3600")
    check_writable(args.state_dir, "the monitor's state directory", directory=True)
    check_writable(args.data_dir, "the monitor's data directory", directory=True)
    s = Settings(state_dir=os.path.abspath(args.state_dir), data_dir=os.path.abspath(args.data_dir),
                 listen_address=args.listen_address, prometheus_port=args.prometheus_port,
                 pushgateway_port=args.pushgateway_port, node_exporter_port=args.node_exporter_port,
                 pgwu_targets=args.pgwu_target or [DEFAULT_PGWU_TARGET], scrape_interval=args.scrape_interval,
                 retention=args.retention)
    if args.no_pgwu:
        s.pgwu_targets = []
    up(s, args.timeout)
    _print_status(status(s.state_dir))
    _clear_stale_sweeps(s.url("pushgateway"))
    return 0


def do_down(args: argparse.Namespace) -> int:
    stopped = down(args.state_dir)
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def do_status(args: argparse.Namespace) -> int:
    st = status(args.state_dir)
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        _print_status(st)
    return 0 if all(v["state"] == "up" for v in st.values()) else 1


def _port(v: str) -> int:
    if not v.isdigit() or not 0 < int(v) < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port: {v!r}")
    return int(v)


def add_parser(sub) -> None:
    p = sub.add_parser("monitor", help="start/stop/show the local Prometheus, Pushgateway, node-exporter",
                       description=__doc__.splitlines()[0])
    msub = p.add_subparsers(dest="monitor_command", metavar="up|down|status")
    msub.required = True
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", default=os.environ.get("GTPLAB_MONITOR_STATE_DIR", DEFAULT_STATE_DIR),
                        help="pids, logs, generated config (default: $GTPLAB_MONITOR_STATE_DIR or %(default)s)")

    u = msub.add_parser("up", parents=[common], help="start the stack and wait until each part answers")
    u.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="TSDB and gateway data (default: %(default)s)")
    u.add_argument("--listen-address", default="127.0.0.1", help="address all three listen on (default: %(default)s)")
    u.add_argument("--prometheus-port", type=_port, default=19090, help="(default: %(default)s)")
    u.add_argument("--pushgateway-port", type=_port, default=19091, help="(default: %(default)s)")
    u.add_argument("--node-exporter-port", type=_port, default=19100, help="(default: %(default)s)")
    u.add_argument("--pgwu-target", action="append", default=[], metavar="HOST:PORT",
                   help=f"a `pgwu metrics` exporter to scrape; repeat for several (default: {DEFAULT_PGWU_TARGET})")
    u.add_argument("--no-pgwu", action="store_true", help="do not scrape any pgwu exporter")
    u.add_argument("--scrape-interval", default="2s", help="(default: %(default)s)")
    u.add_argument("--retention", default="30d", help="how long Prometheus keeps data (default: %(default)s)")
    u.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each to answer (default: %(default)s)")
    u.set_defaults(func=do_up)

    d = msub.add_parser("down", parents=[common], help="stop what `up` started (only that)")
    d.set_defaults(func=do_down)

    st = msub.add_parser("status", parents=[common], help="up/down and URL of each part (exit 1 unless all up)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=do_status)
