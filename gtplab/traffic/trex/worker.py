"""TRex's STLClient in a process of its own, driven with JSON lines on stdin/stdout.

    python -m gtplab.traffic.trex.worker    (started by gtplab.traffic.trex.client.TrexClient; not a user command)

Why a process: importing lbr-trex-client puts its bundled Scapy 2.4.3 first on sys.path, which would
break every module of gtplab that uses Scapy 2.8. This module imports nothing from gtplab that pulls
Scapy in, and nothing else may run in this process.

Protocol: one request per line {"id": N, "method": NAME, "params": {...}}, one answer per line
{"id": N, "result": ...} or {"id": N, "error": "...", "type": "TRexError"}. Dict keys that are port or
pg ids become strings in JSON; the caller turns them back into ints. Everything TRex prints goes to
stderr, so stdout carries answers only.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _tunable_argv(tunables) -> list[str]:
    """TRex profiles parse tunables with argparse: a dict becomes ["--key", "value", ...]."""
    if tunables is None:
        return []
    if isinstance(tunables, dict):
        argv = []
        for k, v in tunables.items():
            argv += [f"--{k.replace('_', '-')}", str(v)]
        return argv
    return [str(t) for t in tunables]


class Worker:
    def __init__(self):
        import lbr_trex_client  # noqa: F401  (puts trex on sys.path)
        from trex.stl import api
        self.api = api
        self.client = None

    def _c(self):
        if self.client is None:
            raise RuntimeError("not connected: call connect first")
        return self.client

    def _profile(self, path, direction, port_id, tunables):
        try:
            prof = self.api.STLProfile.load(path, direction=direction, port_id=port_id,
                                            tunables=_tunable_argv(tunables))
        except Exception as e:
            # TRex wraps the profile's own error (ProfileError: bad tunables) in a summary with the
            # traceback's text: the caller gets its last line, the reason, as one line
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            raise ProfileRefused(lines[-1] if lines else type(e).__name__) from None
        if prof is None:
            raise RuntimeError(f"profile {path} returned no streams (help requested?)")
        return prof

    # -------------------------------------------------------------- methods

    def version(self):
        return {"python": sys.version.split()[0], "scapy": __import__("scapy").VERSION}

    def profile_streams(self, path, direction=0, port_id=0, tunables=None):
        """The profile's streams as TRex stream JSON, without a server."""
        return [s.to_json() for s in self._profile(path, direction, port_id, tunables).get_streams()]

    def connect(self, server, sync_port=4501, async_port=4500, verbose_level="error"):
        self.client = self.api.STLClient(server=server, sync_port=sync_port, async_port=async_port,
                                         verbose_level=verbose_level)
        self.client.connect()
        return {"server": server, "ports": self.client.get_all_ports()}

    def disconnect(self):
        if self.client is not None:
            self.client.disconnect()
            self.client = None

    def reset(self, ports=None):
        self._c().reset(ports=ports)

    @staticmethod
    def _ids(r) -> list:
        """STLClient.add_streams returns a plain int for a single stream, a list for several."""
        return list(r) if isinstance(r, (list, tuple)) else [r]

    def add_streams(self, streams, ports=None):
        objs = [self.api.STLStream.from_json(s) for s in streams]
        return self._ids(self._c().add_streams(objs, ports=ports))

    def load_profile(self, path, ports, direction=0, tunables=None):
        ids = []
        for port in ports:
            prof = self._profile(path, direction, port, tunables)
            ids += self._ids(self._c().add_streams(prof.get_streams(), ports=[port]))
        return ids

    def start(self, ports=None, mult="1", duration=-1, force=True):
        self._c().start(ports=ports, mult=mult, duration=duration, force=force)

    def stop(self, ports=None):
        self._c().stop(ports=ports)

    def wait_on_traffic(self, ports=None, timeout=None):
        self._c().wait_on_traffic(ports=ports, timeout=timeout)

    def get_stats(self, ports=None):
        return self._c().get_stats(ports=ports)

    def clear_stats(self, ports=None):
        self._c().clear_stats(ports=ports)

    def get_xstats(self, port_id):
        """The port's extended counters (DPDK xstats)."""
        return self._c().get_xstats(port_id)

    def start_capture(self, rx_ports=None, tx_ports=None, limit=1000):
        r = self._c().start_capture(tx_ports=tx_ports, rx_ports=rx_ports, limit=limit)
        return {"id": r["id"]}

    def stop_capture(self, capture_id, output=None):
        r = self._c().stop_capture(capture_id, output=output)
        return None if output else r

    def background_start(self, ports, bpf_filter, limit=1000, snaplen=0):
        """A capture of the frames matching bpf_filter received on ports (the trial's background,
        gtplab/traffic/trex/background.py): {"id"}."""
        r = self._c().start_capture(rx_ports=list(ports), limit=limit, bpf_filter=bpf_filter, snaplen=snaplen)
        return {"id": r["id"]}

    def background_fetch(self, capture_id):
        """Stop the capture, return its status (matched, count, limit) and its frames, base64."""
        import base64
        status = self._c().get_capture_status().get(capture_id)
        pkts = []
        self._c().stop_capture(capture_id, output=pkts)
        return {"status": status, "pkts": [{"port": p["port"], "origin": p["origin"],
                                            "binary": base64.b64encode(p["binary"]).decode()} for p in pkts]}

    def port_macs(self):
        """{port: its own source MAC} (TRex's layer-2 config of each port)."""
        out = {}
        for p in self._c().get_all_ports():
            attr = self._c().get_port_attr(p)
            out[p] = attr.get("src_mac")
        return out

    METHODS = ("background_start", "background_fetch", "port_macs", "version", "profile_streams", "connect", "disconnect", "reset", "add_streams",
               "load_profile", "start", "stop", "wait_on_traffic", "get_stats", "get_xstats", "clear_stats",
               "start_capture", "stop_capture")


class ProfileRefused(Exception):
    """A profile that did not load: its reason (a ProfileError's message) as one line."""


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever TRex prints must not corrupt the answers
    sys.stdout = sys.stderr
    worker = Worker()
    for line in sys.stdin:
        if not line.strip():
            continue
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            method = req["method"]
            if method not in Worker.METHODS:
                raise ValueError(f"unknown method {method!r}")
            result = getattr(worker, method)(**req.get("params", {}))
            answer = {"id": rid, "result": result}
        except ProfileRefused as e:     # the profile's reason, one line: no traceback
            answer = {"id": rid, "error": str(e), "type": type(e).__name__}
        except Exception as e:  # reported to the caller, who raises it
            traceback.print_exc(file=sys.stderr)
            answer = {"id": rid, "error": str(e).strip() or type(e).__name__, "type": type(e).__name__}
        out.write(json.dumps(answer, default=str) + "\n")
    worker.disconnect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
