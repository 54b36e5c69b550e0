"""`gtplab lab up|down|status`: the command line of the namespace lab (the lab itself is
gtplab.lab.topology). Registered by gtplab.cli.
"""

from __future__ import annotations

import json
import os
import sys

from gtplab.dut.sock import SocketKnobs
from gtplab.errors import UserError
from gtplab.lab import config as labconfig
from gtplab.lab.cpu import CpuLayout, cpu_text, overridden
from gtplab.lab.external import ExternalSpec
from gtplab.lab.topology import (DEFAULT_MTU, DUT_MODES, GENERATORS, NAME_RE, STATE_DIR, VETH_XDP_MAX_MTU, Addressing,
                                 Lab, _owner_alive, _state_path, _write_state, lab_names, lab_status,
                                 teardown)
from gtplab.lab import topology


def _print_status(st: dict) -> None:
    print(f"lab {st['name']}: {st['status']}, created {st['created']}, DUT: {st['dut']}, pins {st['pin_dir']}")
    for k, ns in st["netns"].items():
        print(f"  netns {k:<3} {ns['name']}{'' if ns['exists'] else '  (missing)'}")
    for p in st["ports"]:
        print(f"  port {p['port_id']} ({p['side']}): {p['ifname']} {p['mac']} {p['addr']}/{p['prefixlen']}"
              f"  <->  {p['dut_ifname']} {p['dut_mac']} {p['dut_addr']}  mtu {p['mtu']}")
    t = st.get("trex")
    if t:
        print(f"  generator: TRex {'running' if t['running'] else 'NOT running'} (pid {t.get('pid')}) on CPU(s) "
              f"{cpu_text(t.get('cpus') or [])}, from {t['runtime']}, log {t.get('log')}")
    x = st.get("external")
    if x:
        run = ("started by the user" if x["user_started"] else
               f"{'running' if x['running'] else 'NOT running'} (pid {x.get('pid')}), log {x.get('log')}")
        print(f"  external UPF: {run}; N4: the UPF {x['n4']['upf']}, gtplab {x['n4']['cp']}")
    lay = st.get("cpu_layout")
    if lay:
        print(f"  CPUs: generator {cpu_text(lay['generator'])}, DUT {cpu_text(lay['dut'])}"
              f"{'' if lay.get('honoured') else '  (NOT honoured: see notes)'}")
        for ifname, threads in lay["threads"].items():
            for t in threads:
                print(f"    napi {ifname:<12} pid {t['pid']:<7} on CPU(s) {cpu_text(t['cpus'] or [])}"
                      f"{'' if t['pinned'] else '  (not pinned: an engine attached since? see docs/lab.md)'}")
        u = lay.get("upf")
        if u:
            print(f"    upf process pid {u['pid']:<7} {u['threads']} threads on CPU(s) {cpu_text(u['cpus'])}")
        aw = lay.get("awake")
        if aw:
            print(f"    DUT CPUs kept awake: {aw['method']}{'' if aw.get('applied') else ' (NOT applied)'}"
                  f"{' (given back)' if aw.get('restored') else ''}")
        cl = lay.get("claim")
        if cl:
            print(f"    CPUs claimed: {cpu_text(cl['cpus'])}" + (
                "; shared with " + ", ".join(h["lab"] for h in st.get("shared_with") or [])
                if st.get("shared_with") else ""))
        for n in lay.get("notes", []):
            print(f"    note: {n}")
    else:
        print("  CPUs: no layout (lab made before layouts, or with none)")
    for link in st["links"]:
        x = link["xdp"]
        xs = f"xdp {x['mode']} id {x['prog_id']} {x['prog_name']}" if x else "no xdp"
        print(f"  link {link['ifname']:<15} {link['state']:<5} mtu {link['mtu']}  {xs}")
    sk = st.get("socket")
    if sk:
        print(f"  socket path: pid {sk.get('pid')} ({'running' if sk.get('running') else 'NOT running'}), "
              f"knobs {sk.get('knobs')}, log {sk.get('log')}")
    stats = st.get("dut_stats")
    if stats is not None:
        print("  DUT counters (pgwu stats --json; --json here for all of them):")
        b = stats.get("bearers", {}) if isinstance(stats, dict) else {}
        if b:
            print(f"    bearers: {b.get('uplink')} uplink, {b.get('downlink')} downlink, "
                  f"capacity {b.get('capacity')}")
        # the socket path counts in its own map (pgwu stats' "socket"), with the same reason names
        reasons = ((stats.get("socket") or {}).get("reasons") if st["dut"] == "socket" else stats.get("reasons"))
        nonzero = [(r, v, c.get("packets", 0)) for r, vs in (reasons or {}).items()
                   for v, c in vs.items() if isinstance(c, dict) and c.get("packets")]
        for r, v, n in nonzero:
            print(f"    {r}/{v}: {n} packets")
        if not nonzero:
            print("    no packets seen")
    elif "dut_stats_error" in st:
        print(f"  DUT counters: {st['dut_stats_error']}")


def _knob_args(items: list[str]) -> dict:
    """--socket KNOB=VALUE ... as a mapping for SocketKnobs.parse: integers, on/off/true/false,
    none (the kernel's default) or a word."""
    out: dict = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise UserError(f"--socket {item!r}: give KNOB=VALUE (e.g. batch=1, reuseport=off)")
        low = v.lower()
        out[k.replace("-", "_")] = (True if low in ("on", "true", "yes") else False if low in ("off", "false", "no")
                                    else None if low == "none" else int(v) if v.lstrip("-").isdigit() else v)
    return out


def _cmd_up(args) -> int:
    a = Addressing()
    cpus = CpuLayout.default()
    text = overridden(cpus, args.generator_cpus, args.dut_cpus)
    if text:
        cpus = CpuLayout.parse(text)
    cfg = None
    if args.lab_config:
        cfg = labconfig.load(args.lab_config)
    generator = args.generator or (cfg.generator if cfg else "engine")
    if args.trex and generator != "trex":
        raise UserError("--trex names TRex's runtime: it needs --generator trex")
    dut = args.dut or (cfg.dut_mode if cfg else "pgwu")
    spec = None
    if dut == "external":
        spec = cfg.external_spec() if cfg and cfg.dut_mode == "external" else None
        if spec is None:
            raise UserError("--dut external: give --lab-config with the UPF (dut.mode: external, dut.external)")
    knobs = cfg.socket_knobs if cfg else None
    if args.socket:
        if dut != "socket":
            raise UserError("--socket sets the socket path's knobs: it needs --dut socket")
        knobs = SocketKnobs.parse({**(knobs.as_dict() if knobs else {}), **_knob_args(args.socket)},
                                  "--socket")
    lab = Lab.up(args.name, dut=dut, mtu=args.mtu if args.mtu is not None else
                 int((cfg.lab if cfg else {}).get("mtu", DEFAULT_MTU)), addressing=a,
                 gen_pass=not args.no_gen_pass, cpus=cpus, generator=generator,
                 trex_runtime=args.trex or (cfg.trex_runtime() if cfg else None), external_spec=spec,
                 share_cpus=True if args.share_cpus else (cfg.lab.get("share_cpus") if cfg else None),
                 socket_knobs=knobs if dut == "socket" else None, standalone=True)
    # made to outlive this command: not an orphan when its creator exits
    lab.state["standalone"] = True
    _write_state(lab.state_path, lab.state)
    if args.json:
        print(json.dumps(lab_status(lab.name), indent=2))
    else:
        print(lab.name)
        lay = lab.state.get("cpu_layout") or {}
        print(f"lab {lab.name} is up: generator ({lab.generator}) on CPU(s) {cpu_text(cpus.generator)}, DUT ({lab.dut_mode}) "
              f"receive threads pinned to CPU(s) {cpu_text(cpus.dut)}"
              + ("" if lay.get("honoured") else " -- layout NOT honoured: " + "; ".join(lay.get("notes", []))),
              file=sys.stderr)
        if lab.external:
            x, ad = lab.external, lab.addressing
            who = (f"the UPF runs as pid {x['pid']} (log {x['log']})" if x.get("pid") else
                   f"start your UPF in it: ip netns exec {lab.dut_ns} ..." + (
                       f" (its config is rendered in {x['workdir']})" if (x.get("spec") or {}).get("config") else ""))
            print(f"external UPF: N3 {lab.ports[0].dut_ifname} {ad.dut_access}, N6 {lab.ports[1].dut_ifname} "
                  f"{ad.dut_sgi}, N4 {x['n4']['dut_ifname']} {ad.dut_n4}; gtplab's N4 {ad.cp_n4} in {lab.cp_ns}; "
                  f"{who}", file=sys.stderr)
        print(f"remove it with: gtplab lab down --name {lab.name}", file=sys.stderr)
    return 0


def _cmd_down(args) -> int:
    if args.all == (args.name is not None):
        raise UserError("give either --name NAME or --all")
    names = lab_names() if args.all else [args.name]
    busy = []
    if args.all and not args.force:
        for n in list(names):
            try:
                st = json.loads(_state_path(n).read_text())
            except (OSError, ValueError):
                continue
            if not st.get("standalone") and _owner_alive(st) and st.get("pid") != os.getpid():
                busy.append(f"{n} (pid {st.get('pid')})")
                names.remove(n)
    if not args.all and args.name not in lab_names():
        # Nothing recorded: reconstruct the plan from the name, so a lab whose state file was lost
        # can still be removed (only its own names are touched).
        if not NAME_RE.match(args.name):
            raise UserError(f"bad lab name {args.name!r}")
        plan = Lab._plan(args.name, Addressing(), "external", DEFAULT_MTU, generator="trex",
                         external_spec=ExternalSpec())
        removed = teardown(plan)
        if not removed:
            raise UserError(f"no lab named {args.name!r}")
        print(f"lab {args.name}: removed {', '.join(removed)}")
        return 0
    for n in names:
        try:
            state = json.loads(_state_path(n).read_text())
        except FileNotFoundError:
            continue  # removed meanwhile by another `down`
        except ValueError:
            state = Lab._plan(n, Addressing(), "external", DEFAULT_MTU, generator="trex",
                              external_spec=ExternalSpec())  # torn state file: every name it may have
        removed = teardown(state)
        print(f"lab {n}: removed {', '.join(removed) or 'nothing'}")
    if busy:
        print(f"gtplab lab: left lab(s) in use by a running sweep or test: {', '.join(busy)} "
              "(--force removes them too)", file=sys.stderr)
        return 1
    return 0


def _cmd_status(args) -> int:
    names = [args.name] if args.name else lab_names()
    sts = [lab_status(n) for n in names]
    if args.json:
        print(json.dumps(sts, indent=2))
    elif not sts:
        print("no labs")
    for st in ([] if args.json else sts):
        _print_status(st)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("lab", help="build, inspect and remove the namespace lab",
                              description=topology.__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="lab_command", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("up", help="create a lab; prints its name")
    up.add_argument("--name", help="lab name (1-10 of a-z0-9; default: random)")
    up.add_argument("--dut", choices=DUT_MODES, default=None,
                    help="the DUT: the XDP PGW-U (default, or the lab config's dut.mode), the socket-path "
                         "PGW-U (socket: pgwu socket, docs/socket.md), the reference forwarder (fwd), the "
                         "lab config's external UPF (external: started in the DUT netns, with an N4 link), "
                         "a drop/pass sink, a reflector (tx), or none")
    up.add_argument("--generator", choices=GENERATORS,
                    help="engine: the embedded BPF engine (default); trex: a TRex server on the generator "
                         "ports (DPDK af_packet, in the generator namespace, on the generator CPUs)")
    up.add_argument("--trex", metavar="DIR|TARBALL",
                    help="with --generator trex: TRex's directory or release tarball (default: the lab "
                         "config's trex.runtime, $GTPLAB_TREX_DIR, $GTPLAB_TREX_TARBALL, "
                         "../shared/trex/trex-v3.08-runtime.tgz)")
    up.add_argument("--lab-config", metavar="NAME|FILE",
                    help="take the generator, TRex runtime, MTU and DUT (an external UPF; the socket path's "
                         "knobs, dut.socket) from this lab config")
    up.add_argument("--socket", metavar="KNOB=VALUE", nargs="+",
                    help="with --dut socket: the socket path's knobs (threads, batch, reuseport, rcvbuf, "
                         "sndbuf, busy_poll, prefer_busy_poll, busy_poll_budget, gro, fanout, "
                         "rt_priority; docs/socket.md), e.g. --socket batch=1 reuseport=off")
    up.add_argument("--mtu", type=int, default=None,
                    help=f"MTU of every lab interface (default {DEFAULT_MTU}, max {VETH_XDP_MAX_MTU})")
    up.add_argument("--generator-cpus", metavar="CPUS",
                    help="CPUs of the generator (engine threads, its receive NAPI), e.g. 0 or 0-1 "
                         "(default: the first half of this host's CPUs)")
    up.add_argument("--dut-cpus", metavar="CPUS",
                    help="CPUs of the DUT's receive NAPI threads, hence its XDP programs (default: the "
                         "second half)")
    up.add_argument("--share-cpus", action="store_true",
                    help="run on CPUs another lab holds, and say so (default: refused, naming that lab; "
                         "also lab config lab.share_cpus, $GTPLAB_SHARE_CPUS=1)")
    up.add_argument("--no-gen-pass", action="store_true",
                    help="don't attach the XDP_PASS program to the generator ports")
    up.add_argument("--json", action="store_true", help="print the lab's status as JSON")
    up.set_defaults(func=_cmd_up)
    down = sub.add_parser("down", help="remove a lab (also after a crash) or all of them")
    down.add_argument("--name", help="lab name")
    down.add_argument("--all", action="store_true", help="every lab listed in " + str(STATE_DIR)
                      + " (not those a running sweep or test is using, unless --force)")
    down.add_argument("--force", action="store_true", help="with --all: also labs in use")
    down.set_defaults(func=_cmd_down)
    st = sub.add_parser("status", help="labs, namespaces, links, XDP attachments, DUT counters")
    st.add_argument("--name", help="only this lab")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_cmd_status)
