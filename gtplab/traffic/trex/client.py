"""The TRex client: TrexClient drives a TRex server (or only TRex's client library, to turn profiles
into stream JSON) from a subprocess, gtplab/traffic/trex/worker.py, through JSON lines on its stdin
and stdout. Its methods are those of TRex's STLClient that gtplab uses (see gtplab.traffic.backend).

The subprocess is needed: lbr-trex-client puts its bundled Scapy 2.4.3 first on sys.path, which must
not happen in a process that uses Scapy 2.8. Used by gtplab.traffic.backend (the trex backend) and
gtplab.measure.runner.Runner (stream JSON for every backend).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from typing import Any

from gtplab.errors import UserError



class TrexError(RuntimeError):
    """A TRex call failed (the message is TRex's)."""


def _int_keys(obj: Any) -> Any:
    """JSON made port and pg ids strings; give them back as ints, as STLClient returns them."""
    if isinstance(obj, dict):
        return {(int(k) if isinstance(k, str) and k.isdigit() else k): _int_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_int_keys(v) for v in obj]
    return obj


def parse_server(server: str) -> dict:
    """"host", "host:sync_port" or "host:sync_port:async_port" (TRex defaults 4501 and 4500)."""
    parts = server.strip().split(":")
    if not parts[0] or len(parts) > 3 or not all(p.isdigit() for p in parts[1:]):
        raise UserError(f"bad TRex server {server!r}: use HOST[:SYNC_PORT[:ASYNC_PORT]]")
    sync = int(parts[1]) if len(parts) > 1 else 4501
    asyn = int(parts[2]) if len(parts) > 2 else (sync - 1 if len(parts) > 1 else 4500)
    return {"server": parts[0], "sync_port": sync, "async_port": asyn}


class TrexClient:
    """STLClient's methods, forwarded to a gtplab.traffic.trex.worker subprocess as JSON lines."""

    def __init__(self, server: str | None = None, timeout: float = 120.0, netns: str | None = None):
        """netns: run the worker (hence TRex's client) inside that network namespace, for a
        server listening only there (the tests' TRex, tests/lib/trex_server.py)."""
        self.server = server
        self.netns = netns
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            cmd = [sys.executable, "-m", "gtplab.traffic.trex.worker"]
            if self.netns:
                cmd = ["ip", "netns", "exec", self.netns] + cmd
            self._proc = subprocess.Popen(cmd,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=None, text=True, bufsize=1)
        return self._proc

    def call(self, method: str, **params) -> Any:
        with self._lock:
            p = self._start()
            rid = next(self._ids)
            p.stdin.write(json.dumps({"id": rid, "method": method, "params": params}) + "\n")
            p.stdin.flush()
            line = p.stdout.readline()
        if not line:
            raise TrexError(f"TRex worker exited (status {p.wait()}) during {method}")
        answer = json.loads(line)
        if answer.get("id") != rid:
            raise TrexError(f"TRex worker answered request {answer.get('id')} instead of {rid}")
        if "error" in answer:
            raise TrexError(f"{method}: {answer['error']}")
        return _int_keys(answer.get("result"))

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.stdin.close()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None

    # STLClient's API ---------------------------------------------------------------------------

    def connect(self) -> dict:
        if not self.server:
            raise UserError("no TRex server: set TREX_SERVER or give one in the lab config")
        return self.call("connect", **parse_server(self.server))

    def disconnect(self) -> None:
        try:
            self.call("disconnect")
        finally:
            self.close()

    def reset(self, ports=None) -> None:
        self.call("reset", ports=ports)

    def add_streams(self, streams: list[dict], ports=None) -> list[int]:
        return self.call("add_streams", streams=streams, ports=ports)

    def load_profile(self, path: str, ports, direction: int = 0, tunables=None) -> list[int]:
        return self.call("load_profile", path=os.path.abspath(path), ports=list(ports),
                         direction=direction, tunables=tunables)

    def profile_streams(self, path: str, direction: int = 0, port_id: int = 0, tunables=None) -> list[dict]:
        """The profile's streams as TRex stream JSON (no server needed)."""
        return self.call("profile_streams", path=os.path.abspath(path), direction=direction,
                         port_id=port_id, tunables=tunables)

    def start(self, ports=None, mult: str = "1", duration: float = -1, force: bool = True) -> None:
        self.call("start", ports=ports, mult=mult, duration=duration, force=force)

    def stop(self, ports=None) -> None:
        self.call("stop", ports=ports)

    def wait_on_traffic(self, ports=None, timeout=None) -> None:
        self.call("wait_on_traffic", ports=ports, timeout=timeout)

    def get_stats(self, ports=None) -> dict:
        return self.call("get_stats", ports=ports)

    def clear_stats(self, ports=None) -> None:
        self.call("clear_stats", ports=ports)

    def start_capture(self, rx_ports=None, limit: int = 1000, tx_ports=None) -> dict:
        return self.call("start_capture", rx_ports=rx_ports, tx_ports=tx_ports, limit=limit)

    def stop_capture(self, capture_id: int, output: str | None = None):
        return self.call("stop_capture", capture_id=capture_id,
                         output=os.path.abspath(output) if output else None)

    # gtplab's own (worker.py): the trial's background frames (gtplab/traffic/trex/background.py)

    def background_start(self, ports, bpf_filter: str, limit: int = 1000, snaplen: int = 0) -> dict:
        return self.call("background_start", ports=list(ports), bpf_filter=bpf_filter, limit=limit,
                         snaplen=snaplen)

    def background_fetch(self, capture_id: int) -> dict:
        return self.call("background_fetch", capture_id=capture_id)

    def port_macs(self) -> dict:
        return self.call("port_macs")

