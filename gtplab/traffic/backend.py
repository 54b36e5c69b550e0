"""Choose the traffic generator: `local` (the embedded engine, gtplab.traffic.engine, on a namespace
lab) or `trex` (a TRex server, through gtplab.traffic.trex.client).

Both give a client with the same methods (those of TRex's STLClient that gtplab uses), so the
measurement (gtplab.measure.runner.Runner) does not care which one it drives:
    connect() disconnect() reset(ports) add_streams(streams, ports)
    load_profile(path, ports, direction=0, tunables=None) -> stream ids
    start(ports, mult, duration, force) stop(ports) wait_on_traffic(ports, timeout)
    get_stats() clear_stats() start_capture(rx_ports, limit) -> {"id": n} stop_capture(id, output)

    with Backend.open("local") as be:     # builds a lab, tears it down at the end
        be.client.load_profile("trex_profiles/gtpu_uplink.py", ports=[0])

Used by gtplab.measure.sweep, the tests and bench/.
"""

from __future__ import annotations

import os

from gtplab.errors import UserError
from gtplab.traffic.trex.client import TrexClient, parse_server

BACKENDS = ("local", "trex")


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
        local: drives `lab` (a gtplab.lab.topology.Lab), or builds one with Lab.up(**lab_kwargs) and removes
        it on close(). trex: server, else config["trex_server"], else $TREX_SERVER; netns (else
        $TREX_NETNS): the network namespace the TRex client runs in (default: this process's).
        trex with `lab` (or lab_kwargs with generator="trex"): the namespace lab's own TRex server
        (Lab.up(**lab_kwargs) builds one and close() removes it when no lab is given).
        """
        config = config or {}
        server = server or config.get("trex_server") or os.environ.get("TREX_SERVER")
        kind = kind or os.environ.get("GTPLAB_BACKEND") or ("trex" if server else "local")
        if kind not in BACKENDS:
            raise UserError(f"unknown backend {kind!r} (use one of {', '.join(BACKENDS)})")
        if kind == "trex" and (lab is not None or lab_kwargs.get("generator") == "trex"):
            # the namespace lab with TRex as its generator (gtplab lab up --generator trex)
            from gtplab.lab.topology import Lab
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
            from gtplab.lab.topology import Lab
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
