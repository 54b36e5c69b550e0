"""The generator port pairs of a lab config (issue 34, item 5): `generators: [{trex_server, ports:
{access, sgi}, sgw_base, pdn_base, netns}, ...]`, or the one-pair form (`ports`, `trex_server`).
gtplab.lab.config.load checks them (parse_generators: one line naming the key); gtplab.measure.pairs
runs a case over them (docs/ansible.md, "Several generator port pairs").
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from gtplab.errors import UserError

MAX_PAIRS = 4                     # pgwu attach takes up to 4 interfaces per side (dataplane/pgwu_load.c)
SGW_BASE = "10.201.{k}.16"        # pair k's default SGW addresses (routed via its access port)
PDN_BASE = "198.18.{o}.1"         # pair k's default PDN addresses, o = 64 k: 198.18.64k.0/18 via its SGi


@dataclass(frozen=True)
class Pair:
    """One generator port pair: its TRex server (None: the config's trex_server / $TREX_SERVER), its
    access and SGi port numbers on that server, the first SGW address and the first PDN address of
    its bearers, and the network namespace its client runs in (a server listening only there)."""
    index: int
    server: str | None
    access: int
    sgi: int
    sgw_base: str
    pdn_base: str
    netns: str | None = None

    def ports(self, direction: str) -> tuple[int, int]:
        return (self.access, self.sgi) if direction == "uplink" else (self.sgi, self.access)


def server_key(server: str | None) -> tuple:
    """(host, sync port) of "HOST[:SYNC[:ASYNC]]" (TRex's default 4501), (None,) for none."""
    if server is None:
        return (None,)
    parts = str(server).strip().split(":")
    if not parts[0] or len(parts) > 3 or not all(x.isdigit() for x in parts[1:]):
        raise UserError(f"bad TRex server {server!r}: use HOST[:SYNC_PORT[:ASYNC_PORT]]")
    return (parts[0], int(parts[1]) if len(parts) > 1 else 4501)


def parse_generators(data: dict, where: str, default_server: str | None = None,
                     single_server: bool = False) -> list[Pair]:
    """The lab config's generator port pairs: `generators: [{trex_server, ports: {access, sgi},
    sgw_base, pdn_base, netns}, ...]`, or the one-pair form (`ports`, `trex_server`). UserError (one
    line, naming the key) for a pair missing a port, a port given twice on one server, both forms at
    once, two pairs with the same addresses, or (single_server: a namespace lab's one TRex) pairs
    on different servers. The schema (gtplab/lab/config_schema.py) has typed the keys before."""
    top = data.get("trex_server") or default_server
    gens = data.get("generators")
    if gens is None:
        p = data.get("ports") or {"access": 0, "sgi": 1}
        return [Pair(0, top, int(p["access"]), int(p["sgi"]), SGW_BASE.format(k=0), PDN_BASE.format(o=0))]
    if data.get("ports") is not None:
        raise UserError(f"{where}: give ports (one pair) or generators (several), not both")
    if not gens:
        raise UserError(f"{where}: generators is empty: give at least one {{trex_server, ports: {{access, sgi}}}}")
    if len(gens) > MAX_PAIRS:
        raise UserError(f"{where}: generators: {len(gens)} pairs, at most {MAX_PAIRS} (pgwu attach takes "
                        f"{MAX_PAIRS} interfaces per side)")
    pairs, seen, addrs = [], {}, {}
    for k, g in enumerate(gens):
        ports = g.get("ports") or {}
        for side in ("access", "sgi"):
            if ports.get(side) is None:
                raise UserError(f"{where}: generators[{k}].ports has no {side} port: each pair names its "
                                "access and its SGi port ({access: N, sgi: M})")
        server = g.get("trex_server") or top
        try:
            # the same address in two namespaces is two servers (a netns of their own each)
            key = server_key(server) + (g.get("netns"),)
        except UserError as e:
            raise UserError(f"{where}: generators[{k}].trex_server: {e}") from None
        for side in ("access", "sgi"):
            n = int(ports[side])
            if (key, n) in seen:
                raise UserError(f"{where}: generators[{k}].ports.{side}: port {n} of "
                                f"{server or 'the TRex server'} is already {seen[key, n]}")
            seen[key, n] = f"generators[{k}]'s {side} port"
        sgw, pdn = g.get("sgw_base") or SGW_BASE.format(k=k), g.get("pdn_base") or PDN_BASE.format(o=64 * k)
        for name, v in (("sgw_base", sgw), ("pdn_base", pdn)):
            try:
                ipaddress.IPv4Address(v)
            except ValueError:
                raise UserError(f"{where}: generators[{k}].{name} {v!r} is not an IPv4 address") from None
            if (name, v) in addrs:
                raise UserError(f"{where}: generators[{k}].{name} {v} is also generators[{addrs[name, v]}]'s: "
                                "the DUT's routes tell the pairs apart by these addresses")
            addrs[name, v] = k
        pairs.append(Pair(k, server, int(ports["access"]), int(ports["sgi"]), sgw, pdn, g.get("netns")))
    if single_server and len({server_key(p.server) + (p.netns,) for p in pairs}) > 1:
        raise UserError(f"{where}: generators on different TRex servers, but this lab has one TRex "
                        "(lab.generator: trex): give one trex_server, or backend trex with real servers")
    return pairs
