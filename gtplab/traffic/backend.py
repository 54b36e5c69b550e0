"""Choose the traffic generator and what it runs on: the one place that decides which lab runs with
which generator (and, in the embedded lab, which DUT).

    `local`  the embedded engine (gtplab.traffic.engine) on a namespace lab (gtplab.lab.topology)
    `trex`   a TRex server (gtplab.traffic.trex.client): the namespace lab's own (`gtplab lab up
             --generator trex`, or built here), or one elsewhere ($TREX_SERVER, the lab config's)

    setup = choose(lab_config, kind="local", dut="fwd")   # checks only: nothing is built yet
    with setup.open() as be:                               # builds a lab, tears it down at the end
        be.client.load_profile("trex_profiles/gtpu_uplink.py", ports=[0])

    with Backend.open("local") as be: ...                 # the same without a lab config

The generator's client is built here from the lab's ports and namespaces (engine_client(lab),
trex_client(lab)): the lab knows nothing of the generators. Both clients have the methods of
TrafficClient, those of TRex's STLClient that gtplab uses, so the measurement
(gtplab.measure.runner.Runner) does not care which one it drives. Used by gtplab.measure.sweep, the
tests and bench/.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from gtplab.errors import LabError, UserError, require_built
from gtplab.lab import external
from gtplab.lab.topology import DEFAULT_MTU, Lab, require_lab_built
from gtplab.traffic.engine import LocalClient, PortSpec
from gtplab.traffic.engine.port import BPF_OBJ as ENGINE_OBJ
from gtplab.traffic.trex.client import TrexClient, parse_server


class TrafficClient(Protocol):
    """A traffic generator as the measurement drives it: the methods of TRex's STLClient that gtplab
    calls, with their meaning there (gtplab.traffic.engine.LocalClient and
    gtplab.traffic.trex.client.TrexClient have them). Ports are TRex's port numbers."""

    def connect(self) -> Any: ...
    def disconnect(self) -> None: ...
    def reset(self, ports=None) -> None: ...
    def add_streams(self, streams: list[dict], ports=None) -> list[int]: ...
    def load_profile(self, path: str, ports, direction: int = 0, tunables=None) -> list[int]: ...
    def start(self, ports=None, mult="1", duration: float = -1, force: bool = True) -> None: ...
    def stop(self, ports=None) -> None: ...
    def wait_on_traffic(self, ports=None, timeout=None) -> None: ...
    def get_stats(self, ports=None) -> dict: ...
    def clear_stats(self, ports=None) -> None: ...
    def start_capture(self, rx_ports=None, limit: int = 1000, tx_ports=None) -> dict: ...
    def stop_capture(self, capture_id: int, output: str | None = None) -> Any: ...


def engine_client(lab: Lab, **kwargs) -> LocalClient:
    """An unconnected embedded engine for the lab's ports 0 (access) and 1 (SGi), on its generator
    CPUs, parking its transmit programs on the lab's spare veths. The lab's pass program is removed
    from the generator ports first: the engine attaches its own on connect()."""
    lab.detach_gen_xdp()
    if lab.cpus is not None:
        kwargs.setdefault("cpus", lab.cpus.generator)
    kwargs.setdefault("park", [(lab.gen_ns, i) for i in lab.park_ifnames])
    kwargs.setdefault("on_attach", lab.apply_cpu_layout)
    # the ports' MACs as TRex's port configuration has them: streams with "MACs from the port" get
    # them (a socket-path DUT, as any host, takes only frames addressed to it)
    return LocalClient(ports=[PortSpec(p.port_id, p.netns, p.ifname, src_mac=p.mac, dst_mac=p.dut_mac)
                              for p in lab.ports], **kwargs)


def trex_client(lab: Lab, timeout: float = 120.0) -> TrexClient:
    """An unconnected TrexClient for the lab's TRex (run in the generator netns, where TRex
    listens)."""
    if lab.generator != "trex":
        raise LabError(f"lab {lab.name} has no TRex (generator {lab.generator}): "
                       "make one with `gtplab lab up --generator trex`")
    return TrexClient("127.0.0.1", timeout=timeout, netns=lab.gen_ns)


BACKENDS = ("local", "trex")


class Backend:
    """A connected client plus what it runs on: `kind`, `client`, `lab` (the namespace lab, or None
    for a TRex server elsewhere)."""

    def __init__(self, kind: str, client: TrafficClient, lab: Lab | None = None, own_lab: bool = False):
        self.kind = kind
        self.client = client
        self.lab = lab
        self._own_lab = own_lab

    @classmethod
    def open(cls, kind: str | None = None, *, lab: Lab | None = None, server: str | None = None,
             config: dict | None = None, connect: bool = True, netns: str | None = None,
             **lab_kwargs) -> "Backend":
        """kind: "local" or "trex"; default: $GTPLAB_BACKEND, else "trex" when a TRex server is
        known ($TREX_SERVER or config["trex_server"]), else "local".
        local: drives `lab`, or builds one with Lab.up(**lab_kwargs) and removes
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
            own = lab is None
            lab = lab or Lab.up(**lab_kwargs)
            if lab.generator != "trex":
                if own:
                    lab.down()
                raise UserError(f"lab {lab.name} generates with the {lab.generator}, not TRex: use "
                                "--backend local, or a lab from `gtplab lab up --generator trex`")
            be = cls("trex", trex_client(lab), lab, own_lab=own)
        elif kind == "trex":
            if not server:
                raise UserError("the trex backend needs a server: set TREX_SERVER or trex_server in the lab config")
            parse_server(server)
            be = cls("trex", TrexClient(server, netns=netns or os.environ.get("TREX_NETNS") or None))
        else:
            own = lab is None
            lab = lab or Lab.up(**lab_kwargs)
            try:
                be = cls("local", engine_client(lab), lab, own_lab=own)
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


@dataclass
class Setup:
    """What a run will drive, decided before anything is built: the backend's kind, the running lab
    to use (lab) or the lab to build (lab_kwargs for Lab.up; none for a TRex server elsewhere), the
    TRex server. open() builds and connects it."""
    kind: str
    lab: Lab | None = None
    lab_kwargs: dict[str, Any] = field(default_factory=dict)
    server: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def open(self) -> Backend:
        return Backend.open(self.kind, lab=self.lab, server=self.server, config=self.config, **self.lab_kwargs)


def _check_upf_running(lab: Lab) -> None:
    """A running lab's external UPF is there: its XDP programs on both DUT ports (when it has XDP);
    UserError saying what to start where otherwise."""
    spec = (lab.external or {}).get("spec") or {}
    if not spec.get("xdp", True):
        if spec.get("start") and external.process_info(lab.external) is None:
            raise UserError(f"lab {lab.name}: its external UPF (pid {lab.external.get('pid')}) is not running: "
                            f"see {lab.external.get('log')}; `gtplab lab down --name {lab.name}` and up again")
        return
    progs = external.xdp_progs(lab.dut_ns, [p.dut_ifname for p in lab.ports])
    missing = [i for i, x in progs.items() if not x]
    if missing:
        raise UserError(f"lab {lab.name}: no XDP program on {', '.join(missing)}: start the UPF in {lab.dut_ns} "
                        f"(`gtplab lab status --name {lab.name}`: its N3, N6, N4)")


def require_built_for(dut: str, generator: str, knobs=None) -> None:
    """NotBuilt (one line, exit 2) for a missing file ./setup.sh builds that a lab of this DUT mode
    (topology.require_lab_built) or the engine as its generator would need: checked with the other
    inputs, before a command prints its first line or makes its results directory."""
    require_lab_built(dut, knobs)
    if generator == "engine":
        require_built(ENGINE_OBJ)


def choose(cfg, kind: str | None = None, lab: str | None = None, dut: str | None = None,
           server: str | None = None) -> Setup:
    """The generator and lab for a lab config (gtplab.lab.config.LabConfig) and the command line's
    choices: kind (--backend; default the config's), lab (--lab: a running lab by name), dut (--dut:
    what the embedded lab attaches), server (--trex-server). TRex runs on the namespace lab (its
    generator side: a lab from `gtplab lab up --generator trex`, or one built from the config) unless
    a TRex server elsewhere is named. Checks everything that can be checked before a lab is built
    (UserError naming the conflict); builds nothing."""
    kind = kind or cfg.backend
    remote_trex = bool(server or cfg.trex_server or os.environ.get("TREX_SERVER"))
    trex_lab = kind == "trex" and (bool(lab) or not remote_trex)
    setup = Setup(kind, server=server, config={"trex_server": cfg.trex_server})
    if kind == "local" or trex_lab:
        if lab:
            setup.lab = Lab.open(lab)
            if dut and dut != setup.lab.dut_mode:
                raise UserError(f"--dut {dut}: lab {lab} runs {setup.lab.dut_mode}")
            if setup.lab.dut_mode == "external":
                _check_upf_running(setup.lab)
            want = "trex" if kind == "trex" else "engine"
            if setup.lab.generator != want:
                raise UserError(f"lab {lab} generates with the {setup.lab.generator}: "
                                + ("make one with `gtplab lab up --generator trex`" if kind == "trex"
                                   else "use --backend trex"))
            if want == "engine":
                require_built(ENGINE_OBJ)
        else:
            mode = dut or cfg.dut_mode
            setup.lab_kwargs = {"mtu": int(cfg.lab.get("mtu", DEFAULT_MTU)), "cpus": cfg.cpu_layout(),
                                "dut": mode, "share_cpus": cfg.lab.get("share_cpus")}
            if mode == "socket":
                setup.lab_kwargs["socket_knobs"] = cfg.socket_knobs
            if mode == "external":
                # the UPF the lab starts (gtplab/lab/external.py): the lab config says which, and how
                if cfg.dut_mode != "external":
                    raise UserError(f"--dut external: lab config {cfg.path} describes no external UPF "
                                    "(dut.mode: external, dut.external)")
                spec = setup.lab_kwargs["external_spec"] = cfg.external_spec()
                if spec.user_started:
                    raise UserError(f"lab config {cfg.path}: its UPF is started by you (no dut.external.start): "
                                    f"`gtplab lab up --lab-config {cfg.path}`, start it in the lab's DUT namespace, "
                                    "then run this with --lab NAME")
            if kind == "trex":
                setup.lab_kwargs.update(generator="trex", trex_runtime=cfg.trex_runtime())
            require_built_for(mode, setup.lab_kwargs.get("generator", "engine"), setup.lab_kwargs.get("socket_knobs"))
    elif dut:
        raise UserError("--dut chooses what the embedded lab attaches; a real lab's DUT is what it is")
    return setup
