"""Choose the traffic backend: `local` (the embedded engine on a namespace lab) or `trex` (a TRex server).

Both give a client with the same methods (those of TRex's STLClient that gtplab uses), so the runner
does not care which one it drives:
    connect() disconnect() reset(ports) add_streams(streams, ports)
    load_profile(path, ports, direction=0, tunables=None) -> stream ids
    start(ports, mult, duration, force) stop(ports) wait_on_traffic(ports, timeout)
    get_stats() clear_stats() start_capture(rx_ports, limit) -> {"id": n} stop_capture(id, output)

    with Backend.open("local") as be:     # builds a lab, tears it down at the end
        be.client.load_profile("trex_profiles/gtpu_uplink.py", ports=[0])

The TRex client runs in a subprocess (gtplab/trex_worker.py): lbr-trex-client puts its bundled Scapy
2.4.3 first on sys.path, which must not happen in a process that uses Scapy 2.8.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
from typing import Any

from gtplab.cli import UserError

BACKENDS = ("local", "trex")


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
    """STLClient's methods, forwarded to a gtplab.trex_worker subprocess as JSON lines."""

    def __init__(self, server: str | None = None, timeout: float = 120.0, netns: str | None = None):
        """netns: run the worker (hence TRex's client) inside that network namespace, for a
        server listening only there (the tests' TRex, tests/trex_server.py)."""
        self.server = server
        self.netns = netns
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            cmd = [sys.executable, "-m", "gtplab.trex_worker"]
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


class Backend:
    """A connected client plus what it runs on: `kind`, `client`, `lab` (local only)."""

    def __init__(self, kind: str, client, lab=None, own_lab: bool = False):
        self.kind = kind
        self.client = client
        self.lab = lab
        self._own_lab = own_lab

    @classmethod
    def open(cls, kind: str | None = None, *, lab=None, server: str | None = None,
             config: dict | None = None, connect: bool = True, netns: str | None = None,
             **lab_kwargs) -> "Backend":
        """kind: "local" or "trex"; default: $GTPLAB_BACKEND, else "trex" when a TRex server is
        known ($TREX_SERVER or config["trex_server"]), else "local".
        local: drives `lab` (a gtplab.lab.Lab), or builds one with Lab.up(**lab_kwargs) and removes
        it on close(). trex: server, else config["trex_server"], else $TREX_SERVER; netns (else
        $TREX_NETNS): the network namespace the TRex client runs in (default: this process's).
        trex with `lab` (or lab_kwargs with generator="trex"): the namespace lab's own TRex server
        (built with Lab.up(**lab_kwargs) and removed on close() when no lab is given)."""
        config = config or {}
        server = server or config.get("trex_server") or os.environ.get("TREX_SERVER")
        kind = kind or os.environ.get("GTPLAB_BACKEND") or ("trex" if server else "local")
        if kind not in BACKENDS:
            raise UserError(f"unknown backend {kind!r} (use one of {', '.join(BACKENDS)})")
        if kind == "trex" and (lab is not None or lab_kwargs.get("generator") == "trex"):
            # the namespace lab with TRex as its generator (gtplab lab up --generator trex)
            from gtplab.lab import Lab
            own = lab is None
            lab = lab or Lab.up(**lab_kwargs)
            if lab.generator != "trex":
                if own:
                    lab.down()
                raise UserError(f"lab {lab.name} generates with the {lab.generator}, not TRex: use "
                                "--backend local, or a lab from `gtplab lab up --generator trex`")
            be = cls("trex", lab.trex_client(), lab, own_lab=own)
        elif kind == "trex":
            if not server:
                raise UserError("the trex backend needs a server: set TREX_SERVER or trex_server in the lab config")
            parse_server(server)
            be = cls("trex", TrexClient(server, netns=netns or os.environ.get("TREX_NETNS") or None))
        else:
            from gtplab.lab import Lab
            own = lab is None
            lab = lab or Lab.up(**lab_kwargs)
            try:
                be = cls("local", lab.client(), lab, own_lab=own)
            except BaseException:
                if own:
                    lab.down()
                raise
        if connect:
            try:
                be.client.connect()
            except BaseException:
                be.close(disconnect=False)
                raise
        return be

    def close(self, disconnect: bool = True) -> None:
        try:
            if disconnect:
                self.client.disconnect()
            elif isinstance(self.client, TrexClient):
                self.client.close()
        finally:
            if self._own_lab and self.lab is not None:
                self.lab.down()
                self.lab = None
            elif self.lab is not None and self.kind == "local":
                # the engine's XDP link went with it: keep the borrowed lab's ports receiving
                self.lab.attach_gen_pass()

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
